// Schedule generators: the exact action lists of small cases written out by
// hand from the papers' rules, the shape rules of every registered schedule,
// and clear errors for the shapes a schedule cannot run.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/errors.h"
#include "modelpar/pp/generators.h"
#include "modelpar/pp/partition.h"
#include "modelpar/pp/validate.h"

namespace psar::pp {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// "F0 F1 B0" for one stage's list (chunk letters when v > 1).
std::string cells(const Schedule& s, int stage) {
  std::string out;
  for (const Action& a : s.actions[static_cast<size_t>(stage)])
    out.append(out.empty() ? "" : " ").append(cell_label(a, s.chunks));
  return out;
}

TEST(Generators, GPipeRunsAllForwardsThenAllBackwards) {
  const Schedule s = gpipe({2, 3, 1, 0});
  EXPECT_EQ(cells(s, 0), "F0 F1 F2 B0 B1 B2");
  EXPECT_EQ(cells(s, 1), "F0 F1 F2 B0 B1 B2");
}

TEST(Generators, OneFOneBWarmsUpWithPMinusRMinusOneForwards) {
  const Schedule s = one_f_one_b({3, 4, 1, 0});
  EXPECT_EQ(cells(s, 0), "F0 F1 F2 B0 F3 B1 B2 B3");
  EXPECT_EQ(cells(s, 1), "F0 F1 B0 F2 B1 F3 B2 B3");
  EXPECT_EQ(cells(s, 2), "F0 B0 F1 B1 F2 B2 F3 B3");
}

TEST(Generators, ZbH1DefersRWeightGradientsOnStageR) {
  const Schedule s = zb_h1({2, 3, 1, 0});
  EXPECT_EQ(cells(s, 0), "F0 F1 B0 W0 F2 B1 W1 B2 W2");
  EXPECT_EQ(cells(s, 1), "F0 B0 F1 B1 W0 F2 B2 W1 W2");
  for (const Action& a : s.actions[0])
    EXPECT_NE(a.op, Op::kBackward) << "zb_h1 splits every backward";
}

TEST(Generators, InterleavedFollowsMegatronsGroupsOfPMicroBatches) {
  // p = 2, m = 4, v = 2: forwards F0a F1a F0b F1b F2a F3a F2b F3b, backwards
  // with the chunks reversed; stage r warms up with 2(p-r-1) + (v-1)p forwards.
  const Schedule s = interleaved({2, 4, 2, 0});
  EXPECT_EQ(cells(s, 0), "F0a F1a F0b F1b F2a B0b F3a B1b F2b B0a F3b B1a B2b B3b B2a B3a");
  EXPECT_EQ(cells(s, 1), "F0a F1a F0b B0b F1b B1b F2a B0a F3a B1a F2b B2b F3b B3b B2a B3a");
}

TEST(Generators, InterleavedWithMEqualPWarmsUpCompletely) {
  const Schedule s = interleaved({2, 2, 2, 0});
  EXPECT_EQ(cells(s, 1), "F0a F1a F0b F1b B0b B1b B0a B1a");
}

TEST(Generators, InterleavedWithOneChunkIsOneFOneB) {
  const Schedule a = interleaved({4, 8, 1, 0}), b = one_f_one_b({4, 8, 1, 0});
  EXPECT_EQ(a.kind, "interleaved");
  EXPECT_EQ(a.actions, b.actions);
}

TEST(Generators, GPipeAcceptsFewerMicroBatchesThanStages) {
  const Schedule s = gpipe({4, 2, 1, 0});
  EXPECT_NO_THROW(validate(s));
  EXPECT_EQ(cells(s, 3), "F0 F1 B0 B1");
}

TEST(Registry, ListsEveryScheduleByName) {
  EXPECT_THAT(schedule_names(), ElementsAre("gpipe", "1f1b", "interleaved", "zb_h1"));
  EXPECT_EQ(make_schedule("zb_h1", {2, 2, 1, 0}).kind, "zb_h1");
  EXPECT_EQ(&find_schedule("1f1b"), &schedule_registry()[1]);
}

TEST(Registry, UnknownNameListsTheKnownOnes) {
  EXPECT_THAT(
      [] { find_schedule("pipedream"); },
      ThrowsMessage<ConfigError>(HasSubstr(
          "unknown pipeline schedule 'pipedream' (known: gpipe, 1f1b, interleaved, zb_h1)")));
}

struct BadShape {
  std::string kind;
  ScheduleShape shape;
  std::string message;
};

class RejectedShapes : public ::testing::TestWithParam<BadShape> {};

TEST_P(RejectedShapes, AreAConfigErrorNamingTheProblem) {
  const BadShape& c = GetParam();
  EXPECT_THAT([&] { make_schedule(c.kind, c.shape); },
              ThrowsMessage<ConfigError>(HasSubstr(c.message)));
}

INSTANTIATE_TEST_SUITE_P(
    Generators, RejectedShapes,
    ::testing::Values(
        BadShape{"1f1b",
                 {4, 2, 1, 0},
                 "1f1b (p=4, m=2, v=1): needs at least as many micro-batches "
                 "as stages (m=2 < p=4)"},
        BadShape{"zb_h1", {4, 3, 1, 0}, "zb_h1 (p=4, m=3, v=1): needs at least as many"},
        BadShape{"interleaved", {4, 2, 2, 0}, "needs at least as many micro-batches as stages"},
        BadShape{"interleaved",
                 {4, 6, 2, 0},
                 "interleaved (p=4, m=6, v=2): the number of micro-batches must be a multiple of "
                 "the number of stages (6 % 4 = 2)"},
        BadShape{"interleaved", {4, 6, 1, 0}, "must be a multiple of the number of stages"},
        BadShape{"gpipe", {2, 4, 2, 0}, "gpipe (p=2, m=4, v=2): runs one chunk per stage"},
        BadShape{"1f1b", {2, 4, 2, 0}, "use 'interleaved' for v > 1"},
        BadShape{"zb_h1", {2, 4, 3, 0}, "runs one chunk per stage"},
        BadShape{"1f1b", {0, 4, 1, 0}, "needs at least 1 stage"},
        BadShape{"gpipe", {2, 0, 1, 0}, "needs at least 1 micro-batch"},
        BadShape{"interleaved", {2, 4, 0, 0}, "needs at least 1 chunk per stage"},
        BadShape{"1f1b",
                 {4, 8, 1, 3},
                 "more virtual stages (p·v = 4) than model layers (3); every virtual stage "
                 "needs at least one layer"},
        BadShape{
            "interleaved", {4, 8, 2, 6}, "more virtual stages (p·v = 8) than model layers (6)"},
        BadShape{"gpipe", {1 << 11, 1 << 12, 1, 0}, "p·v·m is too large"}),
    [](const auto& info) { return "case" + std::to_string(info.index); });

TEST(Generators, AcceptExactlyAsManyLayersAsVirtualStages) {
  EXPECT_NO_THROW(interleaved({4, 8, 2, 8}));
  EXPECT_NO_THROW(one_f_one_b({4, 8, 1, 4}));
}

TEST(Partition, SplitsEvenlyWithTheRemainderOnTheFirstVirtualStages) {
  EXPECT_THAT(partition_layers(8, 4, 1), ElementsAre(2, 2, 2, 2));
  EXPECT_THAT(partition_layers(10, 2, 2), ElementsAre(3, 3, 2, 2));
  EXPECT_THAT(layer_offsets(partition_layers(10, 2, 2)), ElementsAre(0, 3, 6, 8, 10));
  // Embedding and head counted as layers: 8 + 2 spread as 3 3 2 2, then the
  // first stage gives one to the embedding and the last one to the head.
  EXPECT_THAT(partition_layers(8, 4, 1, {}, {1, 1}), ElementsAre(2, 3, 2, 1));
  EXPECT_THAT(partition_layers(6, 2, 1, {}, {1, 0}), ElementsAre(3, 3));
  EXPECT_THAT(partition_layers(7, 2, 2, {}, {0, 1}), ElementsAre(2, 2, 2, 1));
  EXPECT_THAT([] { partition_layers(3, 3, 1, {}, {1, 1}); },
              ThrowsMessage<ConfigError>(HasSubstr("leaves virtual stage 2 of 3 with 0")));
  const std::vector<int64_t> explicit_counts{2, 2};
  EXPECT_THAT([&] { partition_layers(4, 2, 1, explicit_counts, {1, 0}); },
              ThrowsMessage<ConfigError>(HasSubstr("does not combine")));
}

TEST(Partition, TakesExplicitCountsPerVirtualStage) {
  const std::vector<int64_t> counts{1, 3, 2};
  EXPECT_THAT(partition_layers(6, 3, 1, counts), ElementsAre(1, 3, 2));
}

TEST(Partition, RejectsWhatCannotBeSplit) {
  const std::vector<int64_t> two{2, 2}, zero{0, 4, 2}, sum7{1, 4, 2};
  EXPECT_THAT([] { partition_layers(3, 2, 2); },
              ThrowsMessage<ConfigError>(HasSubstr("more virtual stages (p·v = 2·2 = 4) than "
                                                   "model layers (3)")));
  EXPECT_THAT([&] { partition_layers(6, 3, 1, two); },
              ThrowsMessage<ConfigError>(HasSubstr("has 2 entries; needs one per virtual stage")));
  EXPECT_THAT([&] { partition_layers(6, 3, 1, zero); },
              ThrowsMessage<ConfigError>(HasSubstr("stage_layers[0] = 0")));
  EXPECT_THAT([&] { partition_layers(6, 3, 1, sum7); },
              ThrowsMessage<ConfigError>(HasSubstr("sums to 7 layers; the model has 6")));
}

}  // namespace
}  // namespace psar::pp
