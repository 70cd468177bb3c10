// The validator: hand-broken schedules are rejected with errors that name the
// stage and the action, and on random perturbations of valid schedules its
// verdict agrees with an independent reference — a schedule runs to the end
// exactly when its dependency graph (each stage's order, plus every
// transfer's producer before its consumer, plus F before B before W of the
// same work) has no cycle (Kahn's topological sort).

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "core/errors.h"
#include "modelpar/pp/generators.h"
#include "modelpar/pp/p2p.h"
#include "modelpar/pp/validate.h"

namespace psar::pp {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

std::string error_of(const Schedule& s) {
  try {
    validate(s);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(Validator, NamesAMissingBackward) {
  Schedule s = one_f_one_b({2, 3, 1, 0});
  s.actions[1].erase(s.actions[1].begin() + 3);  // stage 1: F0 B0 F1 [B1] F2 B2
  EXPECT_THAT(error_of(s), AllOf(HasSubstr("invalid pipeline schedule 1f1b (p=2, m=3, v=1)"),
                                 HasSubstr("stage 1, micro-batch 1, chunk 0: no backward")));
}

TEST(Validator, NamesADuplicatedForward) {
  Schedule s = gpipe({2, 2, 1, 0});
  s.actions[0].insert(s.actions[0].begin() + 2, Action{Op::kForward, 1, 0});
  EXPECT_THAT(error_of(s), HasSubstr("stage 0, micro-batch 1, chunk 0: 2 forwards (#1, #2)"));
}

TEST(Validator, NamesTheBlockedActionsOfADeadlock) {
  // Stage 0 waits for micro-batch 0's gradient before sending micro-batch 1
  // forward; stage 1 needs micro-batch 1 before it sends that gradient.
  Schedule s = gpipe({2, 2, 1, 0});
  s.actions[0] = {
      {Op::kForward, 0, 0}, {Op::kBackward, 0, 0}, {Op::kForward, 1, 0}, {Op::kBackward, 1, 0}};
  EXPECT_THAT(error_of(s),
              AllOf(HasSubstr("deadlock"),
                    HasSubstr("stage 0 action #1 (backward of micro-batch 0, chunk 0) is blocked "
                              "waiting for the gradient of micro-batch 0 from virtual stage 1 "
                              "(stage 1)"),
                    HasSubstr("stage 1 action #1 (forward of micro-batch 1, chunk 0) is blocked "
                              "waiting for the activation of micro-batch 1 from virtual stage 0 "
                              "(stage 0)")));
}

TEST(Validator, RejectsABackwardBeforeItsForward) {
  Schedule s = one_f_one_b({2, 2, 1, 0});
  std::swap(s.actions[1][0], s.actions[1][1]);  // stage 1: B0 F0 F1 B1
  EXPECT_THAT(error_of(s), HasSubstr("stage 1, micro-batch 0, chunk 0: backward at #0 comes "
                                     "before its forward at #1"));
}

TEST(Validator, RejectsAWeightGradientBeforeItsInputGradient) {
  Schedule s = zb_h1({2, 2, 1, 0});  // stage 1: F0 B0 F1 B1 W0 W1
  std::swap(s.actions[1][1], s.actions[1][4]);
  EXPECT_THAT(error_of(s), HasSubstr("stage 1, micro-batch 0, chunk 0: backward-weight at #1 "
                                     "comes before its backward-input at #4"));
}

TEST(Validator, RejectsAFusedAndASplitBackwardOfTheSameWork) {
  Schedule s = zb_h1({2, 2, 1, 0});
  s.actions[0].push_back({Op::kBackward, 1, 0});
  EXPECT_THAT(error_of(s), HasSubstr("stage 0, micro-batch 1, chunk 0: needs one backward or one "
                                     "backward-input and one backward-weight, has 1 backward"));
}

TEST(Validator, RejectsAMissingWeightGradient) {
  Schedule s = zb_h1({2, 2, 1, 0});
  s.actions[0].pop_back();  // the last W
  EXPECT_THAT(error_of(s), HasSubstr("stage 0, micro-batch 1, chunk 0: needs one backward or"));
}

TEST(Validator, RejectsActionsOutOfRange) {
  Schedule s = interleaved({2, 2, 2, 0});
  s.actions[0][0].chunk = 2;
  s.actions[1][0].microbatch = -1;
  EXPECT_THAT(error_of(s),
              AllOf(HasSubstr("stage 0 action #0 (forward of micro-batch 0, chunk 2): chunk "
                              "outside [0, 2)"),
                    HasSubstr("stage 1 action #0 (forward of micro-batch -1, chunk 0): "
                              "micro-batch outside [0, 2)")));
}

TEST(Validator, RejectsTheWrongNumberOfStageLists) {
  Schedule s = gpipe({3, 2, 1, 0});
  s.actions.pop_back();
  EXPECT_THAT(error_of(s), HasSubstr("has action lists for 2 stages, not p = 3"));
}

// ---- the randomized comparison with a graph reference --------------------

// True iff the dependency graph of `s` (complete, in range) is acyclic.
bool acyclic(const Schedule& s) {
  std::map<std::tuple<int, int, int>, int> node;  // (op, micro-batch, virtual stage) -> id
  std::vector<std::vector<int>> next;
  std::vector<int> indegree;
  const auto id = [&](Op op, int i, int u) {
    const auto key = std::make_tuple(static_cast<int>(op), i, u);
    const auto [it, added] = node.emplace(key, static_cast<int>(next.size()));
    if (added) next.emplace_back(), indegree.push_back(0);
    return it->second;
  };
  const auto edge = [&](int from, int to) { next[from].push_back(to), ++indegree[to]; };
  for (int r = 0; r < s.stages; ++r) {
    const auto& list = s.actions[static_cast<size_t>(r)];
    for (size_t k = 0; k < list.size(); ++k) {
      const Action& a = list[k];
      const int u = s.virtual_stage(r, a.chunk);
      const int me = id(a.op, a.microbatch, u);
      if (k > 0) {
        const Action& b = list[k - 1];
        edge(id(b.op, b.microbatch, s.virtual_stage(r, b.chunk)), me);
      }
      if (a.op != Op::kForward) edge(id(Op::kForward, a.microbatch, u), me);
      if (a.op == Op::kBackwardWeight) edge(id(Op::kBackwardInput, a.microbatch, u), me);
      if (a.op == Op::kForward && u > 0) edge(id(Op::kForward, a.microbatch, u - 1), me);
      if (a.op != Op::kForward && a.op != Op::kBackwardWeight && u + 1 < s.virtual_stages()) {
        // The gradient comes from whichever backward the next virtual stage runs.
        const auto& nl = s.actions[static_cast<size_t>(s.stage_of(u + 1))];
        for (const Action& b : nl)
          if (b.microbatch == a.microbatch && b.chunk == s.chunk_of(u + 1) &&
              (b.op == Op::kBackward || b.op == Op::kBackwardInput))
            edge(id(b.op, b.microbatch, u + 1), me);
      }
    }
  }
  std::vector<int> ready;
  for (size_t n = 0; n < indegree.size(); ++n)
    if (indegree[n] == 0) ready.push_back(static_cast<int>(n));
  size_t seen = 0;
  while (!ready.empty()) {
    const int n = ready.back();
    ready.pop_back();
    ++seen;
    for (int m : next[n])
      if (--indegree[m] == 0) ready.push_back(m);
  }
  return seen == indegree.size();
}

TEST(Validator, AgreesWithTheDependencyGraphOnRandomReorderings) {
  std::mt19937 rng(20240607);
  int accepted = 0, rejected = 0;
  for (const auto& entry : schedule_registry())
    for (int trial = 0; trial < 150; ++trial) {
      const int p = 2 + trial % 3, v = entry.name == std::string("interleaved") ? 2 : 1;
      Schedule s = entry.make({p, 2 * p, v, 0});
      // A few swaps of neighbouring actions on random stages.
      const int swaps = 1 + trial % 3;
      for (int k = 0; k < swaps; ++k) {
        auto& list = s.actions[rng() % s.actions.size()];
        const size_t i = rng() % (list.size() - 1);
        std::swap(list[i], list[i + 1]);
      }
      const bool valid = error_of(s).empty();
      EXPECT_EQ(valid, acyclic(s)) << entry.name << " trial " << trial << ": " << error_of(s);
      (valid ? accepted : rejected)++;
    }
  // Both verdicts occur, or the comparison would prove little.
  EXPECT_GT(accepted, 50);
  EXPECT_GT(rejected, 50);
}

TEST(Lowering, EveryReceiveHasItsSendOnTheNeighbouringStage) {
  for (const auto& entry : schedule_registry()) {
    const int v = entry.name == std::string("interleaved") ? 2 : 1;
    const Schedule s = entry.make({4, 8, v, 0});
    std::map<std::tuple<int, int, int>, int> sends, recvs;  // (from, to, tag) -> count
    std::map<int, int> tags;
    const auto program = lower(s);
    for (int r = 0; r < s.stages; ++r)
      for (const Step& step : program[static_cast<size_t>(r)]) {
        if (step.output) {
          EXPECT_EQ(step.output->from_stage, r);
          EXPECT_EQ((step.output->to_stage - r + s.stages) % s.stages,
                    step.output->payload == Payload::kActivation ? 1 : s.stages - 1);
          ++sends[{step.output->from_stage, step.output->to_stage, step.output->tag}];
          ++tags[step.output->tag];
        }
        if (step.input) {
          EXPECT_EQ(step.input->to_stage, r);
          ++recvs[{step.input->from_stage, step.input->to_stage, step.input->tag}];
        }
      }
    EXPECT_EQ(sends, recvs) << entry.name;
    for (const auto& [tag, n] : tags) EXPECT_EQ(n, 1) << entry.name << ": tag " << tag;
    // Per (micro-batch, virtual-stage boundary): one activation and one gradient.
    EXPECT_EQ(sends.size(), static_cast<size_t>(2 * s.microbatches * (s.virtual_stages() - 1)));
  }
}

TEST(Lowering, OneStageHandsChunksOverInMemory) {
  const Schedule s = interleaved({1, 2, 2, 0});
  const auto program = lower(s);
  for (const Step& step : program[0]) {
    EXPECT_TRUE(!step.input || step.input->local());
    EXPECT_TRUE(!step.output || step.output->local());
  }
  EXPECT_NO_THROW(validate(s));
}

}  // namespace
}  // namespace psar::pp
