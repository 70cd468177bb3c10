// The text grid and the JSON for the PNG: exact pictures of small schedules
// worked out by hand.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "modelpar/pp/generators.h"
#include "modelpar/pp/grid.h"
#include "modelpar/pp/simulate.h"

namespace psar::pp {
namespace {

using ::testing::HasSubstr;

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST(Grid, DrawsGPipeLikeTheNotes) {
  // Unit forward and backward: stage 1 starts one step late, and stage 0
  // waits two steps for the first gradient.
  const Schedule s = gpipe({2, 2, 1, 0});
  const Prediction pr = simulate(s, {{1, 1, 0, 0}, {}});
  EXPECT_EQ(render_grid(s, pr),
            "gpipe (p=2, m=2, v=1): one column = 1 time unit\n"
            "          0              5\n"
            "stage 0 | F0 F1 .  .  B0 B1\n"
            "stage 1 | .  F0 F1 B0 B1 .\n");
}

TEST(Grid, ContinuesLongerActionsWithDashes) {
  const Schedule s = one_f_one_b({2, 2, 1, 0});
  const Prediction pr = simulate(s);  // fused backward = t_b + t_w = 2 columns
  EXPECT_THAT(render_grid(s, pr), HasSubstr("stage 1 | .  F0 B0 -  F1 B1 -  .  .\n"));
  EXPECT_THAT(render_grid(s, pr), HasSubstr("stage 0 | F0 F1 .  .  B0 -  .  B1 -\n"));
}

TEST(Grid, MarksChunksOfInterleavedSchedulesAndHalvesTheColumn) {
  const Schedule s = interleaved({2, 2, 2, 0});
  const std::string grid = render_grid(s, simulate(s, {{1, 1, 0, 0}, {}}));
  EXPECT_THAT(grid, HasSubstr("one column = 0.5 time units"));
  EXPECT_THAT(grid, HasSubstr("stage 0 | F0a F1a F0b F1b"));
}

TEST(Grid, ShowsSplitBackwardsAsBAndW) {
  const Schedule s = zb_h1({2, 2, 1, 0});
  const std::string grid = render_grid(s, simulate(s));
  EXPECT_EQ(count(grid, "W"), 4u);
  EXPECT_EQ(count(grid, "B"), 4u);
}

TEST(Grid, JsonCarriesEverySpanAndTheNumbers) {
  const Schedule s = zb_h1({4, 8, 1, 0});
  const CostModel costs;
  const Prediction pr = simulate(s, {costs, {}});
  const std::string json = grid_json(s, pr, costs);
  EXPECT_EQ(count(json, "\"op\": "), 4u * 8u * 3u);
  EXPECT_THAT(json, HasSubstr("\"bubble_fraction\": 0.125"));
  EXPECT_THAT(json, HasSubstr("\"peak_activations\": [4, 4, 4, 4]"));
  EXPECT_THAT(json, HasSubstr("{\"op\": \"backward-weight\", \"label\": \"W7\", \"microbatch\": "
                              "7, \"chunk\": 0, \"start\": "));
}

}  // namespace
}  // namespace psar::pp
