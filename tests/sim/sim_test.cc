// The cluster simulator against closed forms it must reproduce exactly
// (docs/theory.md): a ring allreduce on a uniform network, two flows on one
// NIC, a one-server parameter server, the pipeline bubbles with free
// communication; the FLOP count against Megatron's formula; the action order
// against the stage executor running the same schedule; the symmetric
// simulation against the full one; and the grids a cluster cannot hold.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

#include "allreduce/allreducer.h"
#include "comm/inproc_comm.h"
#include "core/errors.h"
#include "modelpar/pp/executor.h"
#include "modelpar/pp/generators.h"
#include "modelpar/pp/partition.h"
#include "sim/collective.h"
#include "sim/step.h"
#include "workloads/synthetic_stages.h"

namespace psar::sim {
namespace {

constexpr double kAlpha = 7e-6, kBandwidth = 1.25e9;  // 10 Gbit/s

// `nodes` nodes of `gpus` GPUs sharing `nics` NICs; one uniform speed.
ClusterSpec uniform(int nodes, int gpus = 1, int nics = 1) {
  ClusterSpec c;
  c.nodes = nodes;
  c.gpus_per_node = gpus;
  c.nics_per_node = nics;
  c.intra = c.inter = {kBandwidth, kAlpha};
  c.gpu = {1e12, 1.0, 0.0, int64_t{80} << 30};
  return c;
}

std::vector<int> iota(int n, int from = 0) {
  std::vector<int> v;
  for (int i = 0; i < n; ++i) v.push_back(from + i);
  return v;
}

class Ranks : public ::testing::TestWithParam<int> {};

TEST_P(Ranks, RingAllreduceTakesTwoPMinusOneAlphaPlusTwoPMinusOneOverPNBeta) {
  const int p = GetParam();
  const int64_t count = 840 * 1024;  // divisible by every p here
  const double n = 4.0 * static_cast<double>(count);
  const Network net(uniform(p));
  const StepList ring = find_allreducer("ring").steps(p, count, {});
  const double t = run_groups(net, {{&ring, iota(p), 0.0, 4.0}})[0];
  const double expected = 2 * (p - 1) * kAlpha + 2.0 * (p - 1) / p * n / kBandwidth;
  EXPECT_NEAR(t, expected, 1e-12 * expected);
}

TEST_P(Ranks, AOneServerParameterServerTakesTheServerNicBound) {
  const int d = GetParam();
  const int64_t count = 1 << 20;
  const double n = 4.0 * static_cast<double>(count);
  ClusterSpec c = uniform(d);
  StepSpec s;
  s.model = {1, 8, 1, 1, 1};
  s.dp = d;
  s.batch = d;
  s.vstage_layers = {1};
  s.sync = "ps";
  // Through the simulator's own PS list: every worker pushes n to the one
  // server, then pulls n back; the server's NIC carries d·n each way.
  const Network net(c, /*hosts=*/1);
  StepList ps{.algorithm = "ps", .ranks = d + 1, .count = count, .rounds = {}};
  for (int w = 0; w < d; ++w) {
    ps.add(0, {.src = w, .dst = d, .offset = 0, .count = count, .reduce = true});
    ps.add(1, {.src = d, .dst = w, .offset = 0, .count = count, .reduce = false});
  }
  const double t = run_groups(net, {{&ps, iota(d + 1), 0.0, 4.0}})[0];
  const double expected = 2 * (kAlpha + d * n / kBandwidth);
  EXPECT_NEAR(t, expected, 1e-12 * expected);
  // And the whole step: its exposed sync is that bound (the model is tiny).
  c.gpu.peak_flops = 1e30;
  s.model = {1, 8, 1, 1, 1};
  const StepResult r = simulate_step(c, s);
  const double params = static_cast<double>(model_params(s.model));
  EXPECT_NEAR(r.sync_exposed_s, 2 * (kAlpha + d * 4 * params / kBandwidth), 1e-9);
}

INSTANTIATE_TEST_SUITE_P(Sim, Ranks, ::testing::Values(2, 3, 4, 5, 8));

TEST(Contention, TwoEqualFlowsOnOneNicTakeTwiceAsLong) {
  const Network shared(uniform(2, 2, 1)), own(uniform(2, 2, 2));
  const int64_t count = 1 << 20;
  StepList one{.algorithm = "p2p", .ranks = 2, .count = count, .rounds = {}};
  one.add(0, {.src = 0, .dst = 1, .offset = 0, .count = count, .reduce = false});
  const double bytes = 4.0 * count;
  // GPU j of node 0 to GPU j of node 1, both at once.
  const std::vector<GroupRun> two{{&one, {0, 2}, 0.0, 4.0}, {&one, {1, 3}, 0.0, 4.0}};
  EXPECT_NEAR(run_groups(shared, {two[0]})[0], kAlpha + bytes / kBandwidth, 1e-15);
  for (double t : run_groups(shared, two)) EXPECT_NEAR(t, kAlpha + 2 * bytes / kBandwidth, 1e-15);
  // A NIC each: no contention.
  for (double t : run_groups(own, two)) EXPECT_NEAR(t, kAlpha + bytes / kBandwidth, 1e-15);
}

// A pipeline with free communication and a negligible head (vocab 1).
StepSpec pipeline(const std::string& kind, int p, int m, int v) {
  StepSpec s;
  s.model = {p * v * 2, 64, 4, 32, 1};
  s.pp = p;
  s.microbatches = m;
  s.batch = m;
  s.chunks = v;
  s.schedule = kind;
  s.vstage_layers = pp::partition_layers(static_cast<int>(s.model.layers), p, v);
  return s;
}

ClusterSpec free_network(int gpus) {
  ClusterSpec c = uniform(gpus);
  c.intra = c.inter = {1e30, 0.0};
  return c;
}

TEST(Bubble, OneFOneBAndInterleavedGiveTheirClosedForms) {
  for (int p : {2, 4, 8})
    for (int m : {p, 2 * p, 4 * p}) {
      const StepResult a = simulate_step(free_network(p), pipeline("1f1b", p, m, 1));
      EXPECT_NEAR(a.bubble_fraction, static_cast<double>(p - 1) / m, 1e-3) << p << " " << m;
      const StepResult g = simulate_step(free_network(p), pipeline("gpipe", p, m, 1));
      EXPECT_NEAR(g.bubble_fraction, static_cast<double>(p - 1) / m, 1e-3) << p << " " << m;
      for (int v : {2, 4}) {
        const StepResult i = simulate_step(free_network(p), pipeline("interleaved", p, m, v));
        EXPECT_NEAR(i.bubble_fraction, static_cast<double>(p - 1) / (v * m), 1e-3)
            << p << " " << m << " " << v;
      }
    }
}

TEST(Flops, TheStepCountIsMegatronsFormula) {
  const GptShape g{128, 25600, 160, 2048, 51200};
  const double B = 3072, s = 2048, l = 128, h = 25600, V = 51200;
  const double megatron = 96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h));
  EXPECT_NEAR(step_flops(g, 3072, true), megatron, 1e-12 * megatron);
  // Without recomputation the blocks lose one forward of four; the head keeps its three.
  const double recomputed = 24 * B * s * l * h * h * (1 + s / (6 * h));
  EXPECT_NEAR(step_flops(g, 3072, false), megatron - recomputed, 1e-12 * megatron);
}

// The order the simulator replays equals the order the stage executor runs,
// for the same schedule (the executor on in-process ranks, zero-time layers).
TEST(Order, TheSimulatorAndTheExecutorRunTheSameActions) {
  for (const auto& entry : pp::schedule_registry()) {
    const int p = 4, m = 8, v = std::string(entry.name) == "interleaved" ? 2 : 1;
    const StepSpec spec = pipeline(entry.name, p, m, v);
    const StepResult r = simulate_step(free_network(p), spec);
    const pp::Schedule schedule = pp::make_schedule(entry.name, {p, m, v, 0});
    std::vector<std::vector<pp::Action>> ran(static_cast<size_t>(p));
    run_inproc(p, [&](Comm& comm) {
      const int stage = comm.rank();
      SyntheticStagesOptions o;
      o.layers = p * v;
      o.forward_s = o.backward_s = o.weight_grad_s = 0;
      StageLayout l;
      l.stages = p;
      l.chunks = v;
      l.stage = stage;
      l.microbatches = m;
      l.layers = pp::partition_layers(p * v, p, v);
      SyntheticStages model(o, {nullptr, l});
      ParamStore store;
      for (int c = 0; c < v; ++c) model.declare(store, c);
      store.finalize(1);
      model.bind(store);
      pp::StageExecutor executor(schedule, comm, model);
      for (const auto& span : executor.run().spans)
        ran[static_cast<size_t>(stage)].push_back(span.action);
    });
    EXPECT_EQ(r.order, ran) << entry.name;
  }
}

TEST(Symmetry, OneReplicaStandsForAll) {
  ClusterSpec c = uniform(4, 4, 2);
  c.intra.bandwidth = 50e9;
  StepSpec s = pipeline("interleaved", 2, 4, 2);
  s.model.vocab = 1000;
  s.tp = 2;
  s.dp = 4;
  s.batch = 16;
  s.scatter_gather = true;
  const StepResult sym = simulate_step(c, s);
  s.symmetric = false;
  const StepResult full = simulate_step(c, s);
  EXPECT_GT(sym.step_s, 0);
  EXPECT_NEAR(sym.step_s, full.step_s, 1e-12 * full.step_s);
  EXPECT_NEAR(sym.pipeline_s, full.pipeline_s, 1e-12 * full.pipeline_s);
}

TEST(BadInput, ATensorGroupThatDoesNotDivideTheNodeNamesTheField) {
  ClusterSpec c = uniform(2, 8, 8);
  StepSpec s = pipeline("1f1b", 1, 1, 1);
  s.tp = 3;
  s.dp = 1;
  EXPECT_THAT([&] { simulate_step(c, s); },
              ::testing::ThrowsMessage<ConfigError>(::testing::HasSubstr("parallel.tp")));
  s.tp = 2;
  s.pp = 1;
  s.dp = 3;  // 2·1·3 ≠ 16 GPUs
  EXPECT_THAT([&] { simulate_step(c, s); },
              ::testing::ThrowsMessage<ConfigError>(::testing::HasSubstr("cluster")));
}

}  // namespace
}  // namespace psar::sim
