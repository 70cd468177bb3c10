// The cluster simulator against closed forms it must reproduce exactly
// (docs/theory.md): a ring allreduce on a uniform network, two flows on one
// NIC, a one-server parameter server, the pipeline bubbles with free
// communication; the FLOP count against Megatron's formula; the action order
// against the textbook GPipe and 1F1B orders; the symmetric
// simulation against the full one; and the grids a cluster cannot hold.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

#include "allreduce/allreducer.h"
#include "core/errors.h"
#include "modelpar/pp/generators.h"
#include "modelpar/pp/partition.h"
#include "sim/collective.h"
#include "trainer/schema.h"
#include "sim/step.h"

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
  const Program ring = find_allreducer("ring").program_for(p, count, {});
  const double t = run_groups(net, {{&ring, iota(p), 0.0, 4.0}})[0];
  const double expected = 2 * (p - 1) * kAlpha + 2.0 * (p - 1) / p * n / kBandwidth;
  EXPECT_NEAR(t, expected, 1e-12 * expected);
}

// A bus efficiency e on the NICs: the ring's bandwidth term over e, its
// latency unchanged; e read off the table at the ring's whole vector.
TEST_P(Ranks, ARingAtBusEfficiencyEPaysItsBandwidthTermOverE) {
  const int p = GetParam();
  const int64_t count = 840 * 1024;
  const double n = 4.0 * static_cast<double>(count);
  ClusterSpec c = uniform(p);
  c.inter.efficiency = {{n / 4, 0.2}, {n * 4, 0.8}};  // n sits halfway in log n: 0.5
  const Network net(c);
  const Program ring = find_allreducer("ring").program_for(p, count, {});
  const double t = run_groups(net, {{&ring, iota(p), 0.0, 4.0}})[0];
  const double expected = 2 * (p - 1) * kAlpha + 2.0 * (p - 1) / p * n / (0.5 * kBandwidth);
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
  Program ps("ps", d + 1, count);
  for (int w = 0; w < d; ++w) {
    ps.transfer(0, w, d, 0, count, true);
    ps.transfer(1, d, w, 0, count, false);
  }
  ps.finish();
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

// The simulator times the registry's program itself, not a copy: a program
// registered here (a star: everyone to rank 0, the sum back) is what a step
// with that sync backend takes — two rounds bound by rank 0's NIC, as the
// one-server PS above — and a library peer naming no program to be timed as
// is refused instead of silently becoming the ring.
Program star_program(const ProgramShape& shape) {
  Program p("star", shape.ranks, shape.count);
  for (int r = 1; r < shape.ranks; ++r) p.transfer(0, r, 0, 0, shape.count, true);
  for (int r = 1; r < shape.ranks; ++r) p.transfer(1, 0, r, 0, shape.count, false);
  p.finish();
  return p;
}
CostTerms no_cost(int, int64_t, const AllreduceOptions&) { return {}; }

TEST_P(Ranks, AStepSyncsWithTheRegisteredProgramItself) {
  const int d = GetParam();
  const AllreducerRegistration star(
      {.name = "star_for_sim", .summary = "test", .program = &star_program, .cost = &no_cost});
  ClusterSpec c = uniform(d);
  c.gpu.peak_flops = 1e30;
  StepSpec s;
  s.model = {1, 8, 1, 1, 1};
  s.dp = d;
  s.batch = d;
  s.vstage_layers = {1};
  s.sync = "star_for_sim";
  const double n = 4.0 * static_cast<double>(model_params(s.model));
  EXPECT_NEAR(simulate_step(c, s).sync_exposed_s, 2 * (kAlpha + (d - 1) * n / kBandwidth), 1e-9);
  s.sync = "ring";  // and the ring's program otherwise: 2(d-1) rounds of its largest chunk
  const double chunk = 4.0 * static_cast<double>((model_params(s.model) + d - 1) / d);
  EXPECT_NEAR(simulate_step(c, s).sync_exposed_s, 2 * (d - 1) * (kAlpha + chunk / kBandwidth), 1e-12);
  s.allreduce.dtype = ElementType::kBf16;  // sync.dtype: half the bytes of every message
  EXPECT_NEAR(simulate_step(c, s).sync_exposed_s, 2 * (d - 1) * (kAlpha + chunk / 2 / kBandwidth),
              1e-12);
}

TEST(Sim, ALibraryPeerWithoutAProgramToBeTimedAsIsRefused) {
  const AllreducerRegistration opaque(
      {.name = "opaque_for_sim", .summary = "test",
       .make = [](const AllreduceOptions&) -> std::unique_ptr<Allreducer> { return nullptr; },
       .cost = &no_cost});
  StepSpec s;
  s.model = {1, 8, 1, 1, 1};
  s.dp = 2;
  s.batch = 2;
  s.vstage_layers = {1};
  s.sync = "opaque_for_sim";
  try {
    simulate_step(uniform(2), s);
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("opaque_for_sim"));
  }
}

INSTANTIATE_TEST_SUITE_P(Sim, Ranks, ::testing::Values(2, 3, 4, 5, 8));

// The streamed parameter server (ps_program): S shards of C equal chunks of c
// elements take C + 1 rounds, each bound by the busier of a shard's NIC (d
// flows) and a worker's (S flows): (C + 1)·(α + max(S, d)·4c/B).
TEST(ParameterServer, StreamedChunksTakeCPlusOneRoundsAtTheBusiestNic) {
  for (int d : {1, 2, 4, 8})
    for (int servers : {1, 2, 4})
      for (int64_t chunks : {1, 3, 8}) {
        const int64_t chunk = 4096, count = servers * chunks * chunk;
        const Network net(uniform(d), servers);
        const Program ps = ps_program(d, ps::plan_shards(count, servers), chunk);
        EXPECT_EQ(ps.rounds(), chunks + 1);
        const double t = run_groups(net, {{&ps, iota(d + servers), 0.0, 4.0}})[0];
        const double expected =
            static_cast<double>(chunks + 1) *
            (kAlpha + std::max(servers, d) * 4.0 * static_cast<double>(chunk) / kBandwidth);
        EXPECT_NEAR(t, expected, 1e-12 * expected) << d << " " << servers << " " << chunks;
      }
}

TEST(ParameterServer, EveryFloatIsPushedAndPulledOncePerWorker) {
  const int d = 3, servers = 2;
  const int64_t count = 10007, chunk = 1000;
  const Program ps = ps_program(d, ps::plan_shards(count, servers), chunk);
  ps.validate();
  std::vector<int64_t> pushed(static_cast<size_t>(count), 0), pulled(pushed);
  for (int r = d; r < d + servers; ++r)  // what the servers receive (push) and send (pull)
    for (const Step& m : ps.steps[static_cast<size_t>(r)])
      for (int64_t i = m.offset; i < m.offset + m.count; ++i)
        ++(m.receives() ? pushed : pulled)[static_cast<size_t>(i)];
  for (int64_t i = 0; i < count; ++i) {
    ASSERT_EQ(pushed[static_cast<size_t>(i)], d) << i;
    ASSERT_EQ(pulled[static_cast<size_t>(i)], d) << i;
  }
}

// Wave quantization against its closed form, and without it (sms = 0) the
// GEMM times are the FLOP count over the rate.
TEST(Links, EfficiencyIsInterpolatedInLogSizeAndHeldFlatOutside) {
  LinkSpec link{1e9, 0.0, {}};
  EXPECT_EQ(link_efficiency(link, 123.0), 1.0);  // no table: ideal
  link.efficiency = {{1 << 20, 0.2}, {16 << 20, 0.6}, {256 << 20, 0.9}};
  EXPECT_DOUBLE_EQ(link_efficiency(link, 1024.0), 0.2);
  EXPECT_DOUBLE_EQ(link_efficiency(link, 1 << 20), 0.2);
  EXPECT_DOUBLE_EQ(link_efficiency(link, 4 << 20), 0.4);  // a quarter of the way in log: half
  EXPECT_DOUBLE_EQ(link_efficiency(link, 64 << 20), 0.75);
  EXPECT_DOUBLE_EQ(link_efficiency(link, 1e12), 0.9);
}

TEST(Links, ABadEfficiencyTableNamesTheKey) {
  auto load = [](const std::string& table) {
    return Config::load_string("model: {type: gpt}\n", config_schema(),
                               {"cluster.inter.efficiency=" + table});
  };
  EXPECT_THAT([&] { cluster_from_config(load("[16M:0.5, 1M:0.2]")); },
              ::testing::ThrowsMessage<ConfigError>(::testing::HasSubstr("cluster.inter.efficiency")));
  EXPECT_THAT([&] { cluster_from_config(load("[1M:1.5]")); },
              ::testing::ThrowsMessage<ConfigError>(::testing::HasSubstr("share in (0, 1]")));
  EXPECT_EQ(cluster_from_config(load("[1M:0.25, 4M:0.5]")).inter.efficiency.size(), 2u);
}

TEST(Gemm, WaveEfficiencyIsTheFilledShareOfTheLastWave) {
  GpuSpec gpu{1e12, 0.5, 0.0, 0};
  EXPECT_EQ(gemm_wave_efficiency(gpu, 1, 100, 100), 1.0);  // off
  gpu.sms = 4;
  gpu.tiles = {{128, 256}};
  EXPECT_DOUBLE_EQ(gemm_wave_efficiency(gpu, 1, 256, 512), 1.0);        // 4 tiles, one wave
  EXPECT_DOUBLE_EQ(gemm_wave_efficiency(gpu, 1, 5 * 128, 256), 5.0 / 8);  // 5 tiles, two waves
  EXPECT_DOUBLE_EQ(gemm_wave_efficiency(gpu, 3, 128, 256), 3.0 / 4);    // batched
  EXPECT_DOUBLE_EQ(gemm_wave_efficiency(gpu, 1, 192, 512), 192.0 * 512 / (4 * 128 * 256));
  // With a second tile, the better of the two: 640 rows are 4 tiles of 160,
  // one full wave.
  gpu.tiles = {{128, 256}, {160, 256}};
  EXPECT_DOUBLE_EQ(gemm_wave_efficiency(gpu, 1, 5 * 128, 256), 1.0);
}

TEST(Gemm, AGemmTakesTheSlowerOfItsMathAndItsMemory) {
  GpuSpec gpu{1e12, 0.5, 0.0, 0};
  // Math: 2·batch·r·c·k / (peak·efficiency); memory: 2 bytes per operand
  // element read and per output element written.
  auto math = [](double batch, double r, double c, double k) { return 2 * batch * r * c * k / 5e11; };
  auto memory = [](double batch, double r, double c, double k) {
    return 2 * batch * (r * k + k * c + r * c) / 1e9;
  };
  EXPECT_DOUBLE_EQ(gemm_seconds(gpu, 2, 64, 64, 8), math(2, 64, 64, 8));  // no bandwidth: math
  gpu.memory_bandwidth = 1e9;
  EXPECT_DOUBLE_EQ(gemm_seconds(gpu, 2, 64, 64, 8), memory(2, 64, 64, 8));  // a thin inner dim
  EXPECT_GT(memory(2, 64, 64, 8), math(2, 64, 64, 8));
  EXPECT_DOUBLE_EQ(gemm_seconds(gpu, 1, 4096, 4096, 4096), math(1, 4096, 4096, 4096));
  EXPECT_GT(math(1, 4096, 4096, 4096), memory(1, 4096, 4096, 4096));
  // The attention core at head dimension 128 is memory-bound on an A100's
  // data sheet; FlashAttention (on chip) leaves it its math.
  const GpuSpec a100{312e12, 1.0, 0.0, 0, 0, 2039e9};
  const GptShape g{1, 12288, 96, 2048, 51200};
  const double heads = 96.0 / 8, s = 2048, d = 128;
  EXPECT_DOUBLE_EQ(attention_core_seconds(g, 1, 8, a100),
                   2 * 2 * heads * (2 * s * d + s * s) / 2039e9);
  EXPECT_DOUBLE_EQ(attention_core_seconds(g, 1, 8, a100, true), 2 * 2 * heads * s * s * d / 312e12);
}

TEST(Gemm, WithoutWavesABlockTakesItsFlopsOverTheRate) {
  const GpuSpec gpu{2e12, 0.5, 0.0, 0};
  const GptShape g{4, 256, 8, 128, 1000};
  for (int t : {1, 2, 4})
    for (int64_t b : {1, 3}) {
      const GemmSeconds block = block_gemm_seconds(g, b, t, gpu);
      const double f = block_forward_flops(g, b) / t / 1e12;
      EXPECT_NEAR(block.forward, f, 1e-12 * f);
      EXPECT_NEAR(block.input_grad, f, 1e-12 * f);
      EXPECT_NEAR(block.weight_grad, f, 1e-12 * f);
      const GemmSeconds head = head_gemm_seconds(g, b, t, gpu);
      const double hf = head_forward_flops(g, b) / t / 1e12;
      EXPECT_NEAR(head.forward, hf, 1e-12 * hf);
      EXPECT_NEAR(head.weight_grad, hf, 1e-12 * hf);
    }
  // Waves only slow a GEMM down.
  GpuSpec waves = gpu;
  waves.sms = 108;
  const GemmSeconds slow = block_gemm_seconds(g, 1, 1, waves);
  EXPECT_GT(slow.forward, block_gemm_seconds(g, 1, 1, gpu).forward);
}

// Overlap, one stage, d = 2, one block per bucket: block k's gradients are
// final at the backward's start + (k + 1)·w (w: a block's backward; the head
// is negligible), and the embedding's bucket at its end.
StepSpec overlapped(int layers, int d) {
  StepSpec s;
  s.model = {layers, 64, 4, 32, 1};
  s.dp = d;
  s.batch = d;
  s.vstage_layers = {layers};
  s.overlap = true;
  s.bucket_bytes = 4 * block_params(s.model);  // one block per bucket
  return s;
}

double ring_s(int d, int64_t count) {
  return 2 * (d - 1) * kAlpha + 2.0 * (d - 1) / d * 4.0 * static_cast<double>(count) / kBandwidth;
}

TEST(Overlap, AFastNetworkLeavesTheLastBlockAndTheEmbeddingExposed) {
  const int layers = 4, d = 2;
  ClusterSpec c = uniform(d);
  c.gpu.peak_flops = 1e9;  // a block's backward ≈ 6.8 ms ≫ its 80 us ring
  const StepSpec s = overlapped(layers, d);
  const StepResult r = simulate_step(c, s);
  const int64_t tail = model_params(s.model) - layers * block_params(s.model);
  const double expected = r.pipeline_s + ring_s(d, block_params(s.model)) + ring_s(d, tail);
  EXPECT_NEAR(r.step_s, expected, 1e-9 * expected);
  StepSpec off = s;
  off.overlap = false;
  const StepResult o = simulate_step(c, off);
  EXPECT_NEAR(o.step_s, o.pipeline_s + ring_s(d, model_params(s.model)), 1e-9 * o.step_s);
  EXPECT_LT(r.step_s, o.step_s);
}

TEST(Overlap, ASlowNetworkSyncsTheBucketsBackToBack) {
  const int layers = 4, d = 2;
  ClusterSpec c = uniform(d);
  c.gpu.peak_flops = 1e13;  // a block's backward ≈ 0.7 us ≪ its ring
  const StepSpec s = overlapped(layers, d);
  const StepResult r = simulate_step(c, s);
  // The backward's share before the first bucket is ready: the forward, the
  // head and one block, from the same GEMM times the simulator uses.
  const GemmSeconds block = block_gemm_seconds(s.model, 1, 1, c.gpu);
  const GemmSeconds head = head_gemm_seconds(s.model, 1, 1, c.gpu);
  const double first = layers * block.forward + head.forward + head.input_grad +
                       head.weight_grad + block.input_grad + block.weight_grad;
  const int64_t tail = model_params(s.model) - layers * block_params(s.model);
  const double expected = first + layers * ring_s(d, block_params(s.model)) + ring_s(d, tail);
  EXPECT_NEAR(r.step_s, expected, 1e-9 * expected);
}

TEST(Contention, TwoEqualFlowsOnOneNicTakeTwiceAsLong) {
  const Network shared(uniform(2, 2, 1)), own(uniform(2, 2, 2));
  const int64_t count = 1 << 20;
  Program one("p2p", 2, count);
  one.transfer(0, 0, 1, 0, count, false);
  const double bytes = 4.0 * count;
  // GPU j of node 0 to GPU j of node 1, both at once.
  const std::vector<GroupRun> two{{&one, {0, 2}, 0.0, 4.0}, {&one, {1, 3}, 0.0, 4.0}};
  EXPECT_NEAR(run_groups(shared, {two[0]})[0], kAlpha + bytes / kBandwidth, 1e-15);
  for (double t : run_groups(shared, two)) EXPECT_NEAR(t, kAlpha + 2 * bytes / kBandwidth, 1e-15);
  // A NIC each: no contention.
  for (double t : run_groups(own, two)) EXPECT_NEAR(t, kAlpha + bytes / kBandwidth, 1e-15);
}

// Flows sharing links in time (share_links, processor sharing): two equal
// flows started together on one link both end at 2W; one joined halfway
// by an equal one ends at W/2 + (W/2)·2 = 1.5W, the joiner at 2W (W/2
// shared, W/2 alone); a flow on other links keeps W; a flow shares at its
// busiest link (three on link 0, one of them also on link 1 with one other:
// it moves at 1/3); a flow of no time ends where it starts.
TEST(Contention, FlowsOverlappingInTimeShareTheirLinks) {
  const double w = 2.0;
  {
    const std::vector<double> e = share_links({{0, w, {0}}, {0, w, {0}}, {0, w, {1}}}, 2);
    EXPECT_NEAR(e[0], 2 * w, 1e-12);
    EXPECT_NEAR(e[1], 2 * w, 1e-12);
    EXPECT_NEAR(e[2], w, 1e-12);
  }
  {
    const std::vector<double> e = share_links({{0, w, {0, 1}}, {w / 2, w, {1, 2}}}, 3);
    EXPECT_NEAR(e[0], 1.5 * w, 1e-12);
    EXPECT_NEAR(e[1], 2 * w, 1e-12);
  }
  {
    // Flows 0-2 on link 0 from t = 0, flow 0 also on link 1 with flow 3:
    // flows 0-2 move at 1/3 (link 0 holds three), flow 3 at 1/2 (link 1
    // holds two) and ends at 2W; flows 0-2 then have W − 2W/3 = W/3 left,
    // still three on link 0: they end at 3W.
    const std::vector<double> e =
        share_links({{0, w, {0, 1}}, {0, w, {0}}, {0, w, {0}}, {0, w, {1}}}, 2);
    EXPECT_NEAR(e[3], 2 * w, 1e-12);
    for (int k = 0; k < 3; ++k) EXPECT_NEAR(e[static_cast<size_t>(k)], 3 * w, 1e-12) << k;
  }
  EXPECT_NEAR(share_links({{5, 0, {0}}}, 1)[0], 5.0, 1e-15);
}

// The pipeline's transfers share the links they overlap on: GPipe on two
// stages with free compute and posted sends puts all m activations on
// stage 0's NIC at t = 0, so they arrive together at m·W (W = α + b·s·h·D/B
// alone), and the m gradients leave stage 1 together and arrive at 2m·W:
// the step takes 2m·W where transfers priced alone gave 2W.
TEST(Contention, ConcurrentPipelineTransfersShareTheStagesNics) {
  for (int m : {1, 2, 4}) {
    StepSpec s;
    s.model = {2, 4096, 4, 32, 1};
    s.pp = 2;
    s.microbatches = m;
    s.batch = m;
    s.schedule = "gpipe";
    s.vstage_layers = pp::partition_layers(2, 2, 1);
    ClusterSpec c = uniform(2);
    c.gpu.peak_flops = 1e30;  // free compute: only the wire is timed
    const double wire = kAlpha + 32.0 * 4096 * 2 / kBandwidth;
    const StepResult r = simulate_step(c, s);
    EXPECT_NEAR(r.transfer_s, wire, 1e-12);
    EXPECT_NEAR(r.pipeline_s, 2 * m * wire, 1e-9 * r.pipeline_s) << m;
  }
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

// Megatron's batched steady-state exchange (blocking sends on the
// interleaved schedule): a steady forward's activation leaves only when the
// backward after it ends. Megatron's deeper warm-up, 2(p − r − 1) + (v − 1)p
// forwards, exists to absorb that wait, so on a free network the bubble is
// still (p − 1)/(v·m).
TEST(Bubble, TheBatchedExchangesLateActivationsCostNoBubble) {
  for (int p : {2, 4})
    for (int m : {2 * p, 4 * p})
      for (int v : {2, 4}) {
        StepSpec s = pipeline("interleaved", p, m, v);
        s.blocking_p2p = true;
        const StepResult r = simulate_step(free_network(p), s);
        EXPECT_NEAR(r.bubble_fraction, static_cast<double>(p - 1) / (v * m), 1e-3)
            << p << " " << m << " " << v;
      }
}

// simulate.blocking_p2p: each stage waits for its send. On two stages of
// 1F1B every micro-batch's forward and backward sends sit on the loop
// between them, so the makespan is (m + 1)·(f + b + T) for a transfer of T
// = α + b·s·h·D/B: the free network's (m + 1)·(f + b) plus (m + 1)·T.
// Posted sends are no slower (on two stages 1F1B's loop carries both
// transfers either way).
TEST(Transfers, BlockingSendsAddOneTransferPerMicroBatchOnTwoStages) {
  for (int m : {2, 4, 8}) {
    StepSpec s = pipeline("1f1b", 2, m, 1);
    s.model.hidden = 4096;  // a transfer of 32·4096·2 bytes: visible beside the compute
    const double wire = kAlpha + 32.0 * 4096 * 2 / kBandwidth;
    const double free = simulate_step(free_network(2), s).pipeline_s;
    const StepResult posted = simulate_step(uniform(2), s);
    s.blocking_p2p = true;
    const StepResult blocking = simulate_step(uniform(2), s);
    EXPECT_NEAR(blocking.transfer_s, wire, 1e-12);
    EXPECT_NEAR(blocking.pipeline_s, free + (m + 1) * wire, 1e-9 * blocking.pipeline_s) << m;
    EXPECT_LE(posted.pipeline_s, blocking.pipeline_s) << m;
  }
}

// Scatter/gather: each of the t senders puts 1/t of the activation on the
// wire (its own NIC here), and the receivers all-gather it on the node;
// with one NIC per node the t senders share it.
TEST(Transfers, ScatterGatherPutsOneTthOnTheWire) {
  StepSpec s = pipeline("1f1b", 2, 4, 1);
  s.model.hidden = 4096;
  s.tp = 4;
  s.blocking_p2p = true;
  ClusterSpec c = uniform(2, 4, 4);
  c.intra = {1e30, 0.0};  // a free node: the all-gather costs nothing
  const double whole = kAlpha + 32.0 * 4096 * 2 / kBandwidth;
  EXPECT_NEAR(simulate_step(c, s).transfer_s, whole, 1e-12);
  s.scatter_gather = true;
  EXPECT_NEAR(simulate_step(c, s).transfer_s, kAlpha + 32.0 * 4096 * 2 / 4 / kBandwidth, 1e-12);
  // One NIC per node: the t concurrent sends of a stage boundary share it
  // (equal sharing, sim/collective.h). Whole copies: t·S on one NIC, t
  // times the wire; scatter/gather's t pieces of S/t: S on it, the time of
  // one whole copy on a NIC of its own.
  c.nics_per_node = 1;
  EXPECT_NEAR(simulate_step(c, s).transfer_s, whole, 1e-12);
  s.scatter_gather = false;
  EXPECT_NEAR(simulate_step(c, s).transfer_s, kAlpha + 4 * 32.0 * 4096 * 2 / kBandwidth, 1e-12);
}

// The embedding's TP collective: with sequence parallelism a reduce-scatter
// of [b, s, h] in its forward and an all-gather in its backward, beside each
// block's two of each per pass. On two GPUs a ring reduce-scatter or
// all-gather of n elements is one step of n/2: α + n/2·D/B. Megatron-Core's
// TP overlap (simulate.tp_comm_overlap) hides a block's collectives behind
// GEMMs longer than they are, and leaves the excess of shorter ones; the
// embedding's stay exposed.
TEST(TensorParallel, EmbeddingAndBlocksCollectivesWithAndWithoutOverlap) {
  const int m = 3;
  StepSpec s = pipeline("1f1b", 1, m, 1);  // p = 1: 2 layers, hidden 64, seq 32, vocab 1
  s.tp = 2;
  s.sequence_parallel = true;
  ClusterSpec c = uniform(1, 2, 1);
  const double n = 32.0 * 64, one = kAlpha + n / 2 * 2 / kBandwidth;  // an AG or an RS
  const double layers = 2;
  // Without overlap: per micro-batch 2 layers · (2 + 2) · 2 collectives, and the embedding's 2.
  EXPECT_NEAR(simulate_step(c, s).stages[0].tp_s, m * (layers * 8 * one + 2 * one), 1e-12);
  // Overlapped, GEMMs far longer than a collective (a slow GPU): the embedding's alone.
  s.tp_comm_overlap = true;
  c.gpu.peak_flops = 1e6;
  EXPECT_NEAR(simulate_step(c, s).stages[0].tp_s, m * 2 * one, 1e-12);
  // Overlapped, a fast GPU: each collective exposes its excess over its GEMM.
  c.gpu.peak_flops = 1e12;
  const double tokens = 32, h = 64, f = 4 * h, t = 2;
  const auto gemm = [&](double cols, double inner) { return 2 * tokens * cols * inner / 1e12; };
  const auto over = [&](double g) { return std::max(0.0, one - g); };
  const double forward = over(gemm(3 * h / t, h)) + over(gemm(h, h / t)) + over(gemm(f / t, h)) +
                         over(gemm(h, f / t));
  const double backward = over(gemm(h / t, h)) + over(gemm(h, 3 * h / t)) + over(gemm(f / t, h)) +
                          over(gemm(h, f / t));
  ASSERT_GT(forward, 0);
  EXPECT_NEAR(simulate_step(c, s).stages[0].tp_s, m * (layers * (forward + backward) + 2 * one),
              1e-12);
  s.sequence_parallel = false;  // Megatron refuses it without sequence parallelism
  EXPECT_THAT([&] { simulate_step(c, s); },
              ::testing::ThrowsMessage<ConfigError>(::testing::HasSubstr("needs parallel.sequence_parallel")));
}

// The tied embedding: once the last stage is done its copy's V·h/t fp32
// gradients are all-reduced with the first stage's — on two GPUs a ring of
// two steps of n/2: 2·(α + n/2·4/B) — and the step waits for it.
TEST(Embedding, TheTiedCopiesAllReduceTheirGradientsBetweenFirstAndLastStage) {
  StepSpec s = pipeline("1f1b", 2, 4, 1);
  s.model.vocab = 1000;
  const double n = 1000.0 * 64;
  const StepResult r = simulate_step(uniform(2), s);
  const double ring = 2 * (kAlpha + n / 2 * 4 / kBandwidth);
  EXPECT_NEAR(r.embedding_sync_s, ring, 1e-12);
  EXPECT_NEAR(r.step_s, r.pipeline_s + ring, 1e-12);  // free of everything else (d = 1)
  s.pp = 1;  // one stage holds the only copy
  s.vstage_layers = {static_cast<int>(s.model.layers)};
  EXPECT_EQ(simulate_step(uniform(1), s).embedding_sync_s, 0.0);
}

// The memory-bound kernels: the byte count of a small block by hand, and
// in a step their time bytes / bandwidth once in the forward and once in
// each half of the backward, per layer.
TEST(Memory, TheBlocksElementwiseBytesCostBytesOverBandwidthThreeTimes) {
  // b = 1, s = 4, h = 8, a = 2, t = 1, 2-byte elements: b·s·h = 32 and
  // b·a·s² = 32 — norms 256, softmax 128, dropout 160, GeLU 512, residuals 448.
  EXPECT_EQ(block_memory_bytes({1, 8, 2, 4, 1}, 1, 1, 2), 1504.0);
  EXPECT_EQ(block_memory_bytes({1, 8, 2, 4, 1}, 1, 1, 2, /*flash=*/true), 1504.0 - 128 - 160);
  ClusterSpec c = uniform(1);
  StepSpec s = pipeline("1f1b", 1, 2, 1);
  const StepResult off = simulate_step(c, s);
  c.gpu.memory_bandwidth = 1e9;
  const StepResult on = simulate_step(c, s);
  const double per_layer = block_memory_bytes(s.model, s.microbatch, 1, s.dtype_bytes) / 1e9;
  // The cross-entropy over b·s·V = 32 logits per micro-batch: forward
  // 2 + 8 bytes each, backward 4 + 2; Adam's step 30 bytes per parameter.
  const double logits = 1.0 * 32 * 1;
  // The GEMMs' memory bound (gemm_seconds) on this tiny block, too.
  GpuSpec no_memory = c.gpu;
  no_memory.memory_bandwidth = 0;
  auto total = [](const GemmSeconds& g) { return g.forward + g.input_grad + g.weight_grad; };
  const double gemm = total(block_gemm_seconds(s.model, s.microbatch, 1, c.gpu)) -
                      total(block_gemm_seconds(s.model, s.microbatch, 1, no_memory));
  EXPECT_GT(gemm, 0);
  // The embedding over b·s·h = 2048 elements per micro-batch: forward the
  // lookup and position add 5·2 and the dropout 2·2 + 1; backward the
  // dropout's gradient 2·2 + 1 and the scatter-add 2·2 + 8.
  const double embedding = 2048.0 * (15 + 17);
  const double expected = 3 * s.microbatches * s.model.layers * per_layer +
                          s.microbatches * s.model.layers * gemm +
                          s.microbatches * (logits * (10 + 6) + embedding) / 1e9 +
                          30.0 * static_cast<double>(model_params(s.model)) / 1e9;
  EXPECT_NEAR(on.step_s - off.step_s, expected, 1e-9 * expected);
  EXPECT_NEAR(on.stages[0].optimizer_s, 30.0 * static_cast<double>(model_params(s.model)) / 1e9,
              1e-15);
}

TEST(Flops, TheStepCountIsMegatronsFormula) {
  const GptShape g{128, 25600, 160, 2048, 51200};
  const double B = 3072, s = 2048, l = 128, h = 25600, V = 51200;
  const double megatron = 96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h));
  EXPECT_NEAR(step_flops(g, 3072, Recompute::kFull), megatron, 1e-12 * megatron);
  // Without recomputation the blocks lose one forward of four; the head keeps its three.
  const double recomputed = 24 * B * s * l * h * h * (1 + s / (6 * h));
  EXPECT_NEAR(step_flops(g, 3072, Recompute::kNone), megatron - recomputed, 1e-12 * megatron);
}

TEST(Flops, SelectiveRecomputesTheAttentionCoreAndFullTheWholeBlock) {
  const GptShape g{24, 2048, 16, 1024, 51200};
  const double B = 64, s = 1024, l = 24, h = 2048;
  const double none = step_flops(g, 64, Recompute::kNone);
  EXPECT_NEAR(step_flops(g, 64, Recompute::kSelective) - none, 4 * B * s * s * h * l, 1e-9 * none);
  const double block = 24 * B * s * h * h + 4 * B * s * s * h;
  EXPECT_NEAR(step_flops(g, 64, Recompute::kFull) - none, l * block, 1e-9 * none);
}

// Llama 3 405B's block (GQA with 8 KV heads, SwiGLU of 53248), counted by
// hand: Q and output h² each, K and V h·(8·128) each, three h × ffn MLP
// matrices; biases h + 2·1024 (QKV), h (output), 2·ffn + h (MLP), and two
// layer norms 4h.
TEST(Shapes, GqaAndSwigluBlocksCountTheirParametersAndFlops) {
  GptShape g{126, 16384, 128, 8192, 128256};
  g.kv_heads = 8;
  g.ffn = 53248;
  g.swiglu = true;
  const int64_t h = 16384, kv = 8 * 128, f = 53248;
  const int64_t weights = 2 * h * h + 2 * h * kv + 3 * h * f;
  EXPECT_EQ(block_params(g), weights + (h + 2 * kv) + h + (2 * f + h) + 4 * h);
  const double bs = 8192, flops = 2 * bs * static_cast<double>(weights) + 4 * bs * bs * h;
  EXPECT_NEAR(block_forward_flops(g, 1), flops, 1e-12 * flops);
  // The GEMMs' own sum agrees with the count.
  const GpuSpec gpu{1e15, 1.0, 0.0, 0};
  EXPECT_NEAR(block_gemm_seconds(g, 1, 8, gpu).forward, flops / 8 / 1e15, 1e-9 * flops / 8e15);
}

// Korthikanti et al. 2022, Table 2: bytes one block keeps per micro-batch.
TEST(Activations, EveryModeMatchesKorthikantisForms) {
  const GptShape g{4, 6144, 64, 2048, 51200};
  const double s = 2048, b = 2, h = 6144, a = 64, t = 8, sbh = s * b * h;
  auto bytes = [&](Recompute r, bool sp) {
    return block_activation_bytes(g, 2, 8, 2, {r, sp, false});
  };
  EXPECT_NEAR(bytes(Recompute::kNone, false), sbh * (10 + 24 / t + 5 * a * s / (h * t)), 1e-6);
  EXPECT_NEAR(bytes(Recompute::kNone, true), sbh / t * (34 + 5 * a * s / h), 1e-6);
  EXPECT_NEAR(bytes(Recompute::kSelective, false), sbh * (10 + 24 / t), 1e-6);
  EXPECT_NEAR(bytes(Recompute::kSelective, true), sbh * 34 / t, 1e-6);
  EXPECT_NEAR(bytes(Recompute::kFull, false), 2 * sbh, 1e-6);
  EXPECT_NEAR(bytes(Recompute::kFull, true), 2 * sbh / t, 1e-6);
  // Flash attention keeps fp32 softmax statistics in place of the scores.
  EXPECT_NEAR(block_activation_bytes(g, 2, 8, 2, {Recompute::kNone, true, true}),
              sbh * 34 / t + 4 * a * s * b / t, 1e-6);
}

TEST(Memory, SequenceParallelismSplitsTheNormsAndDropoutsBytes) {
  const GptShape g{4, 1024, 16, 512, 1000};
  const double bsh = 2.0 * 512 * 1024, D = 2, t = 4;
  const double scores = 2.0 * 16 / t * 512 * 512;
  const double without = 4 * bsh * D + 2 * scores * D + scores * (2 * D + 1) +
                         2 * (4 * bsh / t) * D + 2 * bsh * (3 * D + 1);
  EXPECT_NEAR(block_memory_bytes(g, 2, 4, 2, false, false), without, 1e-6);
  const double with = 4 * bsh / t * D + 2 * scores * D + scores * (2 * D + 1) +
                      2 * (4 * bsh / t) * D + 2 * bsh / t * (3 * D + 1);
  EXPECT_NEAR(block_memory_bytes(g, 2, 4, 2, false, true), with, 1e-6);
}

// One GPU, no kernel overheads nor memory-bound time: a recomputation adds
// m·L times what it runs again before each backward.
TEST(Recompute, EachModeAddsWhatItRunsAgain) {
  const ClusterSpec c = free_network(1);
  StepSpec s = pipeline("1f1b", 1, 3, 1);
  const double none = simulate_step(c, s).step_s;
  const double per = 3.0 * static_cast<double>(s.model.layers);
  s.recompute = Recompute::kSelective;
  const double core = attention_core_seconds(s.model, 1, 1, c.gpu);
  EXPECT_NEAR(simulate_step(c, s).step_s - none, per * core, 1e-9 * none);
  s.recompute = Recompute::kFull;
  const double block = block_gemm_seconds(s.model, 1, 1, c.gpu).forward;
  EXPECT_NEAR(simulate_step(c, s).step_s - none, per * block, 1e-9 * none);
  EXPECT_NEAR(core, attention_core_flops(s.model, 1) / 1e12,
              1e-15);
}

// Sequence parallelism: a ring reduce-scatter and a ring all-gather in place
// of each all-reduce — together the ring all-reduce's 2(t−1)α + 2(t−1)/t·n·β.
TEST(SequenceParallel, ReduceScatterPlusAllGatherCostTheRingAllreduce) {
  const int t = 4;
  ClusterSpec c = uniform(1, t, 1);
  c.intra = c.inter = {kBandwidth, kAlpha};
  StepSpec s = pipeline("1f1b", 1, 1, 1);
  s.tp = t;
  s.sequence_parallel = true;
  const StepResult r = simulate_step(c, s);
  const double n = 2.0 * 32 * 64;  // [b, s, h] in bf16
  const double ring = 2 * (t - 1) * kAlpha + 2.0 * (t - 1) / t * n / kBandwidth;
  EXPECT_NEAR(r.tp_allreduce_s, ring, 1e-9 * ring);
  s.tp = 1;
  EXPECT_THAT([&] { check_step(s, uniform(1)); },
              ::testing::ThrowsMessage<ConfigError>(
                  ::testing::HasSubstr("parallel.sequence_parallel")));
}

// ZeRO-1/2 after the backward: the fp32 gradients reduce-scattered, then the
// bf16 weights all-gathered — (d−1)α + (d−1)/d·4n·β, then (d−1)α + (d−1)/d·2n·β.
TEST(Zero, StagesOneAndTwoReduceScatterThenAllGather) {
  const int layers = 4, d = 2;
  const ClusterSpec c = uniform(d);
  StepSpec s = overlapped(layers, d);
  s.overlap = false;
  const double n = static_cast<double>(model_params(s.model));
  const double rs = (d - 1) * kAlpha + (d - 1.0) / d * 4 * n / kBandwidth;
  const double ag = (d - 1) * kAlpha + (d - 1.0) / d * 2 * n / kBandwidth;
  for (int zero : {1, 2}) {
    s.zero = zero;
    const StepResult r = simulate_step(c, s);
    EXPECT_NEAR(r.step_s, r.pipeline_s + rs + ag, 1e-9 * r.step_s) << "zero " << zero;
  }
  s.sync = "ps";
  EXPECT_THAT([&] { check_step(s, c); },
              ::testing::ThrowsMessage<ConfigError>(::testing::HasSubstr("sync.zero")));
}

// --overlap-param-gather: only the first bucket's gather stays in the step,
// (d−1)α + (d−1)/d·2c·β for a bucket of c weights.
TEST(Zero, OverlappedParamGatherExposesOneBucket) {
  const int layers = 4, d = 2;
  const ClusterSpec c = uniform(d);
  StepSpec s = overlapped(layers, d);
  s.overlap = false;
  s.zero = 1;
  s.overlap_param_gather = true;
  s.bucket_bytes = 4 * block_params(s.model);  // one block's fp32 gradients
  const double n = static_cast<double>(model_params(s.model));
  const double bucket = static_cast<double>(block_params(s.model));
  const double rs = (d - 1) * kAlpha + (d - 1.0) / d * 4 * n / kBandwidth;
  const double ag = (d - 1) * kAlpha + (d - 1.0) / d * 2 * bucket / kBandwidth;
  const StepResult r = simulate_step(c, s);
  EXPECT_NEAR(r.step_s, r.pipeline_s + rs + ag, 1e-9 * r.step_s);
}

// ZeRO-3 with compute much slower than the network: each action waits for
// one block's gather (forward) or gather and scatter (backward), the rest
// hides behind compute, and nothing is left to sync after the backward.
TEST(Zero, StageThreeExposesOneGatherPerAction) {
  const int layers = 4, d = 2;
  ClusterSpec c = uniform(d);
  c.gpu.peak_flops = 1e9;
  StepSpec s = overlapped(layers, d);
  s.overlap = false;
  const double plain = simulate_step(c, s).pipeline_s;
  s.zero = 3;
  const StepResult r = simulate_step(c, s);
  const double nb = static_cast<double>(block_params(s.model));
  const double ag = (d - 1) * kAlpha + (d - 1.0) / d * 2 * nb / kBandwidth;
  const double rs = (d - 1) * kAlpha + (d - 1.0) / d * 4 * nb / kBandwidth;
  EXPECT_NEAR(r.step_s, plain + ag + ag + rs, 1e-9 * r.step_s);
  EXPECT_DOUBLE_EQ(r.sync_exposed_s, 0.0);
}

// The order the simulator replays equals the order the stage executor runs,
// for the same schedule (the executor on in-process ranks, zero-time layers).
// The order the simulator runs, against the textbook orders written out here
// from their definitions rather than taken from the generators (which the
// simulator replays): GPipe runs every forward, then every backward, in
// micro-batch order; 1F1B on stage s runs p − s − 1 warm-up forwards, then
// one forward and one backward alternately, then the remaining backwards.
std::vector<std::vector<pp::Action>> textbook_order(const std::string& kind, int p, int m) {
  std::vector<std::vector<pp::Action>> order(static_cast<size_t>(p));
  for (int s = 0; s < p; ++s) {
    auto& a = order[static_cast<size_t>(s)];
    const int warmup = kind == "gpipe" ? m : std::min(m, p - s - 1);
    int f = 0, b = 0;
    for (; f < warmup; ++f) a.push_back({pp::Op::kForward, f, 0});
    for (; f < m; ++f, ++b) {
      a.push_back({pp::Op::kForward, f, 0});
      a.push_back({pp::Op::kBackward, b, 0});
    }
    for (; b < m; ++b) a.push_back({pp::Op::kBackward, b, 0});
  }
  return order;
}

TEST(Order, GpipeAndOneFOneBRunInTheirTextbookOrder) {
  for (const std::string kind : {"gpipe", "1f1b"})
    for (int p : {2, 4})
      for (int m : {p, 2 * p + 1}) {
        const StepResult r = simulate_step(free_network(p), pipeline(kind, p, m, 1));
        EXPECT_EQ(r.order, textbook_order(kind, p, m)) << kind << " p=" << p << " m=" << m;
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
