// The planner of `psar plan` (sim/plan.h): its memory terms against values
// worked out by hand from a small GPT's shapes, every proposal's memory
// recomputed independently and held to the capacity (with a control that
// the capacity does reject grids), and the inputs no grid can serve.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>

#include "core/errors.h"
#include "modelpar/pp/partition.h"
#include "sim/plan.h"

namespace psar::sim {
namespace {

// A small GPT: L = 4 blocks, h = 64, a = 4 heads, s = 32, V = 100.
constexpr GptShape kSmall{4, 64, 4, 32, 100};

// t = 2, p = 2, b = 2, m = 4; 16-bit weights and activations, fp32 gradients.
StepSpec small_spec(const std::string& schedule, int chunks, bool recompute) {
  StepSpec s;
  s.model = kSmall;
  s.tp = 2;
  s.pp = 2;
  s.dp = 1;
  s.batch = 8;
  s.microbatches = 4;
  s.microbatch = 2;
  s.chunks = chunks;
  s.schedule = schedule;
  s.vstage_layers = pp::partition_layers(4, 2, chunks);
  s.recompute = recompute;
  return s;
}

// By hand. One block: 12·64² + 13·64 = 49152 + 832 = 49984 parameters.
// Stage 0: two blocks + embedding 100·64 + position 32·64 = 99968 + 8448 =
// 108416, over t = 2: 54208 per GPU. Stage 1: two blocks + final layer norm
// 128 + the tied head's copy 6400 = 106496, over t: 53248.
constexpr double kStage0Params = 54208, kStage1Params = 53248;
// One block's activations for one micro-batch without recomputation:
// s·b·h = 32·2·64 = 4096, times 10 + 24/2 + 5·4·32/(64·2) = 10 + 12 + 5 = 27.
constexpr double kLayerActivations = 4096.0 * 27;  // 110592 bytes
// With recomputation a block keeps its input: 2 bytes · 4096.
constexpr double kLayerInput = 2.0 * 4096;
// The last stage's fp32 logits of one micro-batch: 4·b·s·V/t = 4·2·32·100/2.
constexpr double kLogits = 12800;

TEST(Memory, OneFOneBStageTermsMatchTheHandCount) {
  const StepSpec s = small_spec("1f1b", 1, false);
  const Memory m0 = stage_memory(s, 0);
  EXPECT_EQ(m0.params, 54208);
  EXPECT_DOUBLE_EQ(m0.weights, 2 * kStage0Params);              // 108416
  EXPECT_DOUBLE_EQ(m0.gradients, 4 * kStage0Params);            // 216832
  EXPECT_DOUBLE_EQ(m0.optimizer, 12 * kStage0Params);           // 650496: fp32 master, m, v
  EXPECT_EQ(m0.in_flight, 2);                                   // stage 0 of p = 2 holds p − 0
  EXPECT_DOUBLE_EQ(m0.activations, 2 * 2 * kLayerActivations);  // 2 in flight × 2 layers
  EXPECT_DOUBLE_EQ(m0.total(), 1418112);

  const Memory m1 = stage_memory(s, 1);
  EXPECT_EQ(m1.params, 53248);
  EXPECT_EQ(m1.in_flight, 1);
  EXPECT_DOUBLE_EQ(m1.activations, 1 * 2 * kLayerActivations + kLogits);  // 233984
  EXPECT_DOUBLE_EQ(m1.total(), 18 * kStage1Params + 233984);

  const Memory peak = peak_memory(s);
  EXPECT_EQ(peak.stage, 0);
  EXPECT_DOUBLE_EQ(peak.total(), 1418112);
}

TEST(Memory, InterleavedStageZeroHoldsMegatronsWarmUpCount) {
  // p = 2, v = 2, m = 4: stage 0 holds 2(p − 1) + (v − 1)·p + 1 = 5 chunks
  // of one layer each — L·(1 + (p − 1)/(p·v)) = 4·1.25 = 5 layers' worth.
  const StepSpec s = small_spec("interleaved", 2, false);
  const Memory m0 = stage_memory(s, 0);
  EXPECT_EQ(m0.params, 54208);  // virtual stages 0 and 2: still two blocks
  EXPECT_EQ(m0.in_flight, 5);
  EXPECT_DOUBLE_EQ(m0.activations, 5 * kLayerActivations);  // 552960
  // Stage 1: 2(p − 2) + (v − 1)·p + 1 = 3 chunks, and the logits.
  EXPECT_DOUBLE_EQ(stage_memory(s, 1).activations, 3 * kLayerActivations + kLogits);
}

TEST(Memory, RecomputationKeepsEachBlocksInputAndOneWorkingBlock) {
  const StepSpec s = small_spec("1f1b", 1, true);
  EXPECT_DOUBLE_EQ(stage_memory(s, 0).activations, 2 * 2 * kLayerInput + kLayerActivations);
  EXPECT_DOUBLE_EQ(stage_memory(s, 0).weights, 2 * kStage0Params);  // unchanged
}

// Two nodes of four GPUs; a GPT of 8 blocks so that every p·v divides L.
ClusterSpec small_cluster(int64_t memory) {
  ClusterSpec c;
  c.nodes = 2;
  c.gpus_per_node = 4;
  c.nics_per_node = 1;
  c.intra = {100e9, 5e-6};
  c.inter = {12.5e9, 5e-6};
  c.gpu = {100e12, 0.5, 5e-6, memory};
  return c;
}

PlanOptions small_options() {
  PlanOptions o;
  o.model = {8, 512, 8, 256, 1000};
  o.batch = 32;
  return o;
}

// A GPU's bytes at stage r, written out apart from sim/plan.cc: blocks
// L/(p) of 12h² + 13h, the embedding on the first, the head's copy and final
// LN on the last, over t; 18 bytes per parameter; the schedule's in-flight
// chunks × L/(p·v) blocks × the block's activations; the logits on the last.
double independent_bytes(const GptShape& g, const StepSpec& s, int r) {
  const int p = s.pp, t = s.tp, v = s.chunks;
  double params =
      static_cast<double>(g.layers / p) * (12.0 * g.hidden * g.hidden + 13.0 * g.hidden);
  if (r == 0) params += static_cast<double>(g.vocab * g.hidden + g.seq * g.hidden);
  if (r == p - 1) params += 2.0 * g.hidden + (p > 1 ? static_cast<double>(g.vocab * g.hidden) : 0);
  params = static_cast<double>(static_cast<int64_t>(params) / t);
  // Interleaved with m = p runs every forward first (Megatron's
  // all-warm-up case): m·v chunks on every stage.
  const int m = s.microbatches;
  const int in_flight = p == 1   ? 1
                        : v == 1 ? p - r
                        : m == p ? m * v
                                 : std::min(2 * (p - r - 1) + (v - 1) * p + 1, m * v);
  const double sbh = static_cast<double>(g.seq * s.microbatch * g.hidden);
  const double layer = sbh * (10.0 + 24.0 / t + 5.0 * g.heads * g.seq / (double(g.hidden) * t));
  double act = in_flight * static_cast<double>(g.layers / (p * v)) * layer;
  if (r == p - 1) act += 4.0 * s.microbatch * g.seq * g.vocab / t;
  return 18 * params + act;
}

TEST(Plan, NoProposalNeedsMoreThanTheGpuHolds) {
  const PlanOptions o = small_options();
  const int64_t capacity = int64_t{360} << 20;  // rejects some grids, not all
  const Plan plan = sim::plan(small_cluster(capacity), o);
  ASSERT_FALSE(plan.ranked.empty());
  EXPECT_LT(static_cast<int>(plan.ranked.size()), plan.enumerated)
      << "control: the capacity should reject some grids";
  for (const Candidate& c : plan.ranked) {
    double worst = 0;
    for (int r = 0; r < c.spec.pp; ++r)
      worst = std::max(worst, independent_bytes(o.model, c.spec, r));
    EXPECT_LE(worst, static_cast<double>(capacity))
        << "p=" << c.spec.pp << " t=" << c.spec.tp << " b=" << c.spec.microbatch
        << " v=" << c.spec.chunks;
    EXPECT_NEAR(c.memory.total(), worst, 1e-9 * worst)
        << "p=" << c.spec.pp << " t=" << c.spec.tp << " b=" << c.spec.microbatch
        << " m=" << c.spec.microbatches << " v=" << c.spec.chunks;
    EXPECT_EQ(c.spec.pp * c.spec.tp * c.spec.dp, 8);
  }
  EXPECT_TRUE(std::is_sorted(
      plan.ranked.begin(), plan.ranked.end(),
      [](const Candidate& a, const Candidate& b) { return a.result.step_s < b.result.step_s; }));
}

TEST(Plan, AModelThatFitsNowhereNamesTheMemoryKey) {
  EXPECT_THAT([] { sim::plan(small_cluster(int64_t{1} << 20), small_options()); },
              ::testing::ThrowsMessage<ConfigError>(::testing::HasSubstr("cluster.gpu.memory")));
}

TEST(Plan, ATensorDegreeThatDoesNotDivideTheNodeNamesTheField) {
  PlanOptions o = small_options();
  o.tps = {3};
  EXPECT_THAT([&] { sim::plan(small_cluster(int64_t{80} << 30), o); },
              ::testing::ThrowsMessage<ConfigError>(::testing::HasSubstr("parallel.tp")));
}

TEST(Plan, HeadsThatNoTensorDegreeDividesNamesTheField) {
  PlanOptions o = small_options();
  o.model.heads = 7;
  o.tps = {2, 4};
  EXPECT_THAT([&] { sim::plan(small_cluster(int64_t{80} << 30), o); },
              ::testing::ThrowsMessage<ConfigError>(::testing::HasSubstr("model.heads")));
}

TEST(Plan, ABatchNoGridCanSplitNamesTheField) {
  PlanOptions o = small_options();
  o.batch = 3;
  o.microbatches = {2};
  EXPECT_THAT([&] { sim::plan(small_cluster(int64_t{80} << 30), o); },
              ::testing::ThrowsMessage<ConfigError>(::testing::HasSubstr("train.batch_size")));
}

}  // namespace
}  // namespace psar::sim
