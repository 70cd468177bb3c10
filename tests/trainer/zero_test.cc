// Sharded training state (ZeRO stages 1, 2 and 3, sync/zero_sync.h and
// sync/layer_gather.h), in-process. After 10 steps each stage equals the
// same algorithm's ZeRO-0 run — bitwise for stages 1, 2 and 3 of ring and
// halving_doubling under data parallelism alone (the same reduce-scatter
// sums each element, whole, by buckets of layers or layer by layer, cut at
// the same owners' boundaries), within 1e-6 relative
// inside (p, t, d) = (2, 2, 2) —
// for the MLP and the GPT, SGD and Adam, d = 2 and 4. The
// bytes each rank sent and the bytes of its training state, read from
// axes.csv, equal the closed forms to the byte; the bad configurations are
// ConfigErrors naming the keys; a checkpointed run resumes bitwise.
// (mpi and the MPI transport: zero_mpi_test.cc.)

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <mutex>
#include <unistd.h>

#include "allreduce/allreducer.h"
#include "allreduce/partition.h"
#include "comm/inproc_comm.h"
#include "core/ops.h"
#include "tests/trainer/cnn_fixture.h"
#include "tests/trainer/three_d_fixture.h"
#include "tests/trainer/train_fixture.h"
#include "core/checkpoint.h"
#include "core/optim.h"
#include "core/param_store.h"
#include "sync/layer_gather.h"
#include "trainer/trainer.h"

namespace psar {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using testing::relative_difference;
using testing::train_result;


Config with(const Config& cfg, const std::vector<std::string>& sets) {
  return Config::load_string(cfg.dump(), config_schema(), sets);
}

// The MLP of train_fixture.h: 20 features, hidden [32, 16], 5 classes.
constexpr int64_t kMlpParams = 20 * 32 + 32 + 32 * 16 + 16 + 16 * 5 + 5;  // Ψ = 1285

struct ZeroCase {
  std::string algorithm, model, optimizer;
  int d;
};

class ZeroEqualsZero0 : public ::testing::TestWithParam<ZeroCase> {
 protected:
  static void SetUpTestSuite() { ops::set_blas_threads(1); }
  Config config(const std::vector<std::string>& sets) const {
    const ZeroCase& c = GetParam();
    std::vector<std::string> all = {"sync.backend=" + c.algorithm, "train.steps=10",
                                    "optimizer.type=" + c.optimizer, "optimizer.lr=0.01"};
    all.insert(all.end(), sets.begin(), sets.end());
    if (c.model == "mlp") return with(testing::small_mlp_config(c.algorithm), all);
    return testing::gpt_3d_config({1, 1, c.d}, all);
  }
};

TEST_P(ZeroEqualsZero0, Stages1To3AreBitwise) {
  const int d = GetParam().d;
  const auto zero0 = train_result(d, config({})).params;
  const auto stage1 = train_result(d, config({"sync.zero=1"})).params;
  // Stage 2 reduce-scatters buckets of whole layers, cut at the owners'
  // boundaries: one bucket of the whole model (the default 1M), or smaller
  // ones (the MLP's 3K: its last two layers, then its first alone; the
  // GPT's 128K: two blocks each) on the communication thread
  // during the backward.
  const std::string buckets = GetParam().model == "mlp" ? "3K" : "128K";
  const auto stage2 = train_result(d, config({"sync.zero=2"})).params;
  const auto stage2_overlap = train_result(d, config({"sync.zero=2", "sync.overlap=true",
                                                      "sync.bucket_bytes=" + buckets}))
                                  .params;
  ASSERT_FALSE(zero0.empty());
  EXPECT_EQ(stage1, zero0) << "stage 1 is the same sums and the same elementwise step";
  EXPECT_EQ(stage2, zero0) << "stage 2: the same sums per element, one bucket";
  EXPECT_EQ(stage2_overlap, zero0) << "stage 2 overlapped: the same sums by buckets, earlier";
  // Stage 3, the layers gathered on this thread, or prefetched on the
  // communication thread (sync.overlap): the same collectives either way.
  // Each layer's reduce-scatter, cut at the flat layout's owners, sums
  // every element in the order of the whole arena's: bitwise ZeRO-0.
  const auto stage3 = train_result(d, config({"sync.zero=3"})).params;
  const auto stage3_prefetch = train_result(d, config({"sync.zero=3", "sync.overlap=true"})).params;
  EXPECT_EQ(stage3, zero0) << "stage 3: the same sums per element, the same elementwise step";
  EXPECT_EQ(stage3_prefetch, stage3) << "prefetching changes when a layer is gathered, not its sums";
  // The check can fail: a run of fewer steps ends elsewhere.
  const auto shorter = train_result(d, config({"sync.zero=1", "train.steps=9"})).params;
  EXPECT_GT(relative_difference(zero0, shorter), 1e-6);
}

std::vector<ZeroCase> zero_cases() {
  std::vector<ZeroCase> cases;
  for (const char* a : {"ring", "halving_doubling"})
    for (const char* m : {"mlp", "gpt"})
      for (const char* o : {"sgd", "adam"})
        for (int d : {2, 4}) cases.push_back({a, m, o, d});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Backends, ZeroEqualsZero0, ::testing::ValuesIn(zero_cases()),
                         [](const auto& info) {
                           return info.param.algorithm + "_" + info.param.model + "_" +
                                  info.param.optimizer + "_d" + std::to_string(info.param.d);
                         });

// Inside a 3D grid every (pipeline stage, tensor rank) shards over its own
// data-parallel group of d = 2, as Megatron's distributed optimizer does.
TEST(Zero3d, A222GptShardsOverEachDataParallelGroup) {
  ops::set_blas_threads(1);
  const testing::Grid3d g{2, 2, 2, "1f1b", 1, true};
  for (const char* opt : {"sgd", "adam"}) {
    const std::vector<std::string> base = {"train.steps=10", std::string("optimizer.type=") + opt,
                                           "optimizer.lr=0.01"};
    auto sets = [&](std::vector<std::string> more) {
      more.insert(more.begin(), base.begin(), base.end());
      return more;
    };
    const auto zero0 = train_result(8, testing::gpt_3d_config(g, base)).params;
    const auto stage1 = train_result(8, testing::gpt_3d_config(g, sets({"sync.zero=1"}))).params;
    const auto stage2 = train_result(8, testing::gpt_3d_config(
                                            g, sets({"sync.zero=2", "sync.overlap=true",
                                                     "sync.bucket_bytes=64K"})))
                            .params;
    // Stage 3: the embedding and its copy on the last stage (tied across
    // the pipeline) reduce-scattered after their pair's sum.
    const auto stage3 =
        train_result(8, testing::gpt_3d_config(g, sets({"sync.zero=3", "sync.overlap=true"})))
            .params;
    EXPECT_EQ(stage1, zero0) << opt;
    ASSERT_EQ(stage2.size(), zero0.size());
    EXPECT_LE(relative_difference(zero0, stage2), 1e-6) << opt;
    ASSERT_EQ(stage3.size(), zero0.size());
    EXPECT_LE(relative_difference(zero0, stage3), 1e-6) << opt;
  }
}

// ---- bytes on the wire and bytes of state, from axes.csv ----------------------

class ZeroFiles : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { ops::set_blas_threads(1); }
  void SetUp() override {
    std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    dir_ = fs::temp_directory_path() / ("psar_zero_" + std::to_string(::getpid()) + "_" + name);
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  // axes.csv of a run of `ranks` ranks on `cfg`.
  std::vector<std::map<std::string, std::string>> axes(int ranks, const Config& cfg,
                                                       const std::string& run) {
    train_result(ranks, cfg, (dir_ / run).string());
    return testing::read_csv_rows(dir_ / run / "axes.csv");
  }
  fs::path dir_;
};

int64_t field(const std::map<std::string, std::string>& row, const char* name) {
  return std::stoll(row.at(name));
}

// Ring: rank r sends Ψ − P_r in the reduce-scatter (every piece but its own)
// and Ψ − P_{(r+1) mod N} in the all-gather (every piece but its right
// neighbour's), P = Partition{Ψ, N}: 2(N−1)/N·Ψ floats when N divides Ψ.
int64_t ring_zero_bytes(int64_t psi, int n, int r) {
  const Partition p{psi, n};
  return 4 * (2 * psi - p.size(r) - p.size((r + 1) % n));
}

TEST_F(ZeroFiles, BytesOnTheWireAreTheReduceScatterAndAllGatherForms) {
  // N = 4 does not divide Ψ = 1285 (pieces 322, 321, 321, 321); N = 5 does.
  for (const auto& [n, batch] : {std::pair{4, 48}, std::pair{5, 40}}) {
    for (const char* stage : {"1", "2"}) {
      // Stage 2's buckets of 3K: the last two layers (613 floats), the first (672).
      const Config cfg = with(testing::small_mlp_config("ring", 3, "adam"),
                              {std::string("sync.zero=") + stage, "sync.overlap=" +
                               std::string(stage[0] == '2' ? "true" : "false"),
                               "sync.bucket_bytes=3K", "train.batch_size=" + std::to_string(batch)});
      const auto rows = axes(n, cfg, std::string("bytes_") + stage + "_" + std::to_string(n));
      ASSERT_EQ(rows.size(), 3u * n);
      for (const auto& row : rows) {
        const int r = static_cast<int>(field(row, "rank"));
        EXPECT_EQ(field(row, "dp_bytes_sent"), ring_zero_bytes(kMlpParams, n, r))
            << "stage " << stage << " N " << n << " rank " << r;
        if (kMlpParams % n == 0) {
          EXPECT_EQ(field(row, "dp_bytes_sent"), 4 * 2 * (n - 1) * kMlpParams / n);
        }
      }
    }
  }
}

// The GPT at d = 4 and inside (2, 2, 2), where each rank shards its stage's
// TP slice (Ψ = its dp_floats, which other tests hold to the model's
// shapes) over a data-parallel group of 2: 4·(2Ψ − P_0 − P_1) = 4Ψ bytes.
TEST_F(ZeroFiles, GptBytesOnTheWireAreTheFormsOverEachDataParallelGroup) {
  for (const auto& [grid, ranks] : {std::pair{testing::Grid3d{1, 1, 4}, 4},
                                    std::pair{testing::Grid3d{2, 2, 2, "1f1b", 1, true}, 8}}) {
    for (const char* stage : {"1", "2"}) {
      const auto rows = axes(ranks,
                             testing::gpt_3d_config(grid, {std::string("sync.zero=") + stage,
                                                           "train.steps=2", "sync.overlap=" +
                                                           std::string(stage[0] == '2' ? "true" : "false"),
                                                           "sync.bucket_bytes=128K"}),
                             std::string("gpt_") + stage + "_" + std::to_string(ranks));
      ASSERT_EQ(rows.size(), 2u * ranks);
      for (const auto& row : rows) {
        const int64_t psi = field(row, "dp_floats");
        EXPECT_EQ(field(row, "dp_bytes_sent"),
                  ring_zero_bytes(psi, grid.d, static_cast<int>(field(row, "dp"))))
            << "stage " << stage << " rank " << row.at("rank");
        EXPECT_EQ(field(row, "optimizer_bytes"),
                  4 * (Partition{psi, grid.d}.size(static_cast<int>(field(row, "dp")))))
            << "sgd with momentum: one velocity per owned float";
      }
    }
  }
}

// Stage 3, ring, one micro-batch: each layer all-gathered before its
// forward and again before its backward (Ψ − P_{(r+1) mod N} per pass over
// the layers: every layer but the right neighbour's part of it) and
// reduce-scattered once (Ψ − P_r): 3(N−1)/N·Ψ floats when N divides Ψ.
int64_t ring_zero3_bytes(int64_t psi, int n, int r) {
  const Partition p{psi, n};
  return 4 * (3 * psi - 2 * p.size((r + 1) % n) - p.size(r));
}

TEST_F(ZeroFiles, Stage3BytesOnTheWireAreTwoAllGathersAndAReduceScatter) {
  for (const auto& [n, batch] : {std::pair{4, 48}, std::pair{5, 40}}) {
    for (const char* prefetch : {"false", "true"}) {
      const Config cfg = with(testing::small_mlp_config("ring", 3, "adam"),
                              {"sync.zero=3", std::string("sync.overlap=") + prefetch,
                               "train.batch_size=" + std::to_string(batch)});
      const auto rows = axes(n, cfg, std::string("bytes3_") + prefetch + std::to_string(n));
      ASSERT_EQ(rows.size(), 3u * n);
      for (const auto& row : rows) {
        const int r = static_cast<int>(field(row, "rank"));
        EXPECT_EQ(field(row, "dp_bytes_sent"), ring_zero3_bytes(kMlpParams, n, r))
            << "prefetch " << prefetch << " N " << n << " rank " << r;
        if (kMlpParams % n == 0) {
          EXPECT_EQ(field(row, "dp_bytes_sent"), 4 * 3 * (n - 1) * kMlpParams / n);
        }
      }
    }
  }
}

// The GPT (m = 2 micro-batches here): every layer is gathered for each
// micro-batch's forward and backward, and its gradient reduce-scattered
// once; its head reads the token embedding (tied, on the same rank), so the
// embeddings' layer [0, E) is gathered twice more per micro-batch (the
// head's forward and backward) — 4·(E − its right neighbour's part of it)
// bytes each.
TEST_F(ZeroFiles, Stage3GptBytesGatherPerMicroBatchAndTwiceMoreForTheTiedHead) {
  const int n = 4;
  const Config cfg = testing::gpt_3d_config({1, 1, n}, {"sync.zero=3", "train.steps=2"});
  const int64_t m = cfg.get_int("parallel.microbatches"), d = cfg.get_int("model.d_model");
  ASSERT_EQ(m, 2);
  const auto rows = axes(n, cfg, "gpt3");
  ASSERT_EQ(rows.size(), 2u * n);
  for (const auto& row : rows) {
    const int64_t psi = field(row, "dp_floats");
    const int r = static_cast<int>(field(row, "dp")), q = (r + 1) % n;
    const Partition p{psi, n};
    // wte [V, d] then wpe [T, d] open the arena.
    const int64_t embedding = (cfg.get_int("model.vocab") + cfg.get_int("model.seq_len")) * d;
    const int64_t right = std::clamp(p.offset(q) + p.size(q), int64_t{0}, embedding) -
                          std::clamp(p.offset(q), int64_t{0}, embedding);
    EXPECT_EQ(field(row, "dp_bytes_sent"),
              4 * (m * 2 * (psi - p.size(q) + embedding - right) + psi - p.size(r)))
        << "rank " << r;
  }
}

// The training state each rank allocated, from axes.csv, to the byte (fp32
// Adam, MLP at N = 4, which does not divide Ψ: pieces P_r of 322 and 321):
//   stage 1: parameters 4Ψ, the gradient arena 4Ψ, Adam's state of the
//            owned piece 8·P_r — ZeRO's 8Ψ + 8Ψ/N;
//   stage 2: parameters 4Ψ, the gradient shard 4·P_r, Adam's 8·P_r — ZeRO's
//            4Ψ + 12Ψ/N — and, reported apart, the buckets' gradient buffers
//            while the backward holds them: one bucket at a time on this
//            thread (4 × the largest bucket's floats: buckets of 1K, each
//            layer alone, 4·n_l of the largest; of the default 1M, the
//            whole model, 4Ψ), more while the communication thread is
//            behind (3K: the last two layers, then the first);
//   stage 3: its piece of the parameters 4·P_r and of Adam's state 8·P_r,
//            no gradient shard (each owned part is stepped as its layer's
//            sum arrives): 4Ψ/N below the paper's 16Ψ/N. During the step it
//            gathers one layer at a time: without prefetch the largest is
//            layer l's backward, its parameters and its gradient at once,
//            8·n_l bytes; with prefetch the next layer's parameters come on
//            top (at least the forward's first two layers).
TEST_F(ZeroFiles, StateIsTheFormsToTheByte) {
  const int n = 4;
  const Partition pieces{kMlpParams, n};
  const std::vector<int64_t> layers = {20 * 32 + 32, 32 * 16 + 16, 16 * 5 + 5};  // n_l
  const int64_t largest = *std::max_element(layers.begin(), layers.end());
  struct Run {
    const char *stage, *overlap, *bucket;
    int64_t largest_bucket;  // stage 2's, in floats
  };
  for (const Run& run : {Run{"1", "false", "1M", 0}, Run{"2", "false", "1K", largest},
                         Run{"2", "false", "1M", kMlpParams}, Run{"2", "true", "3K", largest},
                         Run{"3", "false", "1M", 0}, Run{"3", "true", "1M", 0}}) {
    const char *stage = run.stage, *overlap = run.overlap;
    {
      const Config cfg = with(testing::small_mlp_config("ring", 2, "adam"),
                              {std::string("sync.zero=") + stage, std::string("sync.overlap=") + overlap,
                               std::string("sync.bucket_bytes=") + run.bucket});
      const auto rows = axes(n, cfg, std::string("mem") + stage + "_" + overlap + "_" + run.bucket);
      ASSERT_EQ(rows.size(), 2u * n);
      for (const auto& row : rows) {
        const int r = static_cast<int>(field(row, "rank"));
        const int64_t p = pieces.size(r);
        const std::string at = std::string("stage ") + stage + " overlap " + overlap +
                               " buckets " + run.bucket + " rank " + std::to_string(r);
        EXPECT_EQ(field(row, "params_bytes"), stage[0] == '3' ? 4 * p : 4 * kMlpParams) << at;
        EXPECT_EQ(field(row, "grads_bytes"), stage[0] == '1'   ? 4 * kMlpParams
                                             : stage[0] == '2' ? 4 * p
                                                               : 0)
            << at;
        EXPECT_EQ(field(row, "optimizer_bytes"), 8 * p) << at;
        const int64_t gathered = field(row, "gathered_bytes");
        if (stage[0] == '1') {
          EXPECT_EQ(gathered, 0) << at;
        } else if (overlap[0] == 'f') {
          EXPECT_EQ(gathered, stage[0] == '2' ? 4 * run.largest_bucket : 8 * largest) << at;
        } else if (stage[0] == '2') {
          EXPECT_GE(gathered, 4 * run.largest_bucket) << at;
          EXPECT_LE(gathered, 4 * kMlpParams) << at;
        } else {
          EXPECT_GE(gathered, 4 * (layers[0] + layers[1])) << at;
          EXPECT_LE(gathered, 8 * kMlpParams) << at;
        }
      }
    }
  }
}

// Stage 3 driven by hand on 3 ranks, two layers of ones (5 and 4 floats,
// pieces of 3 that cut the first layer at the owners' boundaries), SGD at
// lr 0.5, gradients 2(r + 1) and r + 1: the step's parameters are the
// closed form 1 − 0.5·mean_r(g) exactly (−1 and 0). The prefetch thread
// leaves the group's waits to the transport (Comm::poll_sleep stays 0).
TEST(LayerGatherPrefetch, StepsTheClosedFormAndWaitsAsTheTransportDoes) {
  run_inproc(3, [](Comm& c) {
    ParamStore store;
    store.add("a", Shape{5}, Init::ones());
    store.add("b", Shape{4}, Init::ones());
    store.finalize(1);
    OptimizerOptions sgd;
    sgd.lr = 0.5f;
    const Partition pieces{store.size(), c.size()};
    auto optimizer = make_optimizer(sgd, pieces.size(c.rank()));
    LayerGather gather(c, store, {{0, 5}, {5, 9}}, {}, *optimizer,
                       LayerGatherOptions{"ring", AllreduceOptions{}, /*prefetch=*/true,
                                          /*params_sharded=*/true, 1});
    EXPECT_EQ(c.poll_sleep(), 0.0);
    gather.begin_step();
    EXPECT_FALSE(store.has_arenas());
    for (const auto& [begin, end] : {std::pair<int64_t, int64_t>{0, 5}, {5, 9}}) {
      gather.need(0, begin, end);
      for (float v : store.param(begin == 0 ? 0 : 1).span()) EXPECT_EQ(v, 1.0f);
      gather.done(0, begin, end);
    }
    const float g = static_cast<float>(c.rank() + 1);
    for (const auto& [index, begin, end] : {std::tuple<int, int64_t, int64_t>{1, 5, 9}, {0, 0, 5}}) {
      gather.need_backward(0, begin, end);
      for (float& v : store.grad(index).span()) v = index == 0 ? 2 * g : g;
      gather.ready(0, begin, end);
      gather.done(0, begin, end);
    }
    EXPECT_EQ(gather.finish_step(), pieces.size(c.rank()));
    gather.gather_all();
    const auto p = store.params();
    EXPECT_EQ(std::vector<float>(p.begin(), p.end()),
              std::vector<float>({-1, -1, -1, -1, -1, 0, 0, 0, 0}));
  });
}

// Layers of 20000 floats on 3 ranks: the first is one owner's 13334 floats
// and another's 6666, so its ring streams the large chunk in segments of an
// even chunk (LayerGather::collectives_for), above the eager pieces. The
// step equals ZeRO-0's to the bit: the ring allreduce of the whole
// gradient, divided by N, stepped by SGD (each element summed in the same
// ring order, however the chunks are cut into segments).
TEST(LayerGatherPrefetch, SegmentedLayersStepAsZero0Bitwise) {
  run_inproc(3, [](Comm& c) {
    constexpr int64_t kLayer = 20000;
    ParamStore store;
    store.add("a", Shape{kLayer}, Init::zeros());
    store.add("b", Shape{kLayer}, Init::zeros());
    store.finalize(1);
    std::vector<float> grads(2 * kLayer);
    for (size_t i = 0; i < grads.size(); ++i)
      grads[i] = std::sin(0.37f * static_cast<float>(i) + static_cast<float>(c.rank())) *
                 static_cast<float>(1 + c.rank());
    OptimizerOptions sgd;
    sgd.lr = 0.5f;
    std::vector<float> expected = grads;
    make_allreducer("ring", AllreduceOptions{})->allreduce(c, expected);
    for (float& v : expected) v = -sgd.lr * (v * (1.0f / 3.0f));
    const Partition pieces{store.size(), c.size()};
    auto optimizer = make_optimizer(sgd, pieces.size(c.rank()));
    LayerGather gather(c, store, {{0, kLayer}, {kLayer, 2 * kLayer}}, {}, *optimizer,
                       LayerGatherOptions{"ring", AllreduceOptions{}, /*prefetch=*/true,
                                          /*params_sharded=*/true, 1});
    gather.begin_step();
    for (const int index : {1, 0}) {
      const int64_t begin = index * kLayer;
      gather.need_backward(0, begin, begin + kLayer);
      auto g = store.grad(index).span();
      std::copy(grads.begin() + begin, grads.begin() + begin + kLayer, g.begin());
      gather.ready(0, begin, begin + kLayer);
      gather.done(0, begin, begin + kLayer);
    }
    gather.finish_step();
    gather.gather_all();
    const auto p = store.params();
    EXPECT_EQ(std::vector<float>(p.begin(), p.end()), expected);
  });
}

// hierarchical on two nodes of two ranks (net.node_size): its reduce-scatter
// and all-gather are two levels (allreduce/hierarchical.cc), whose sums
// group the elements by owner where its allreduce groups them by
// Partition{Ψ, L}: within 1e-6 of its ZeRO-0 run (not bitwise in general).
// The MLP with Adam and the GPT with SGD (stages 2 and 3 by its layers).
TEST(ZeroHierarchical, Stages1To3EqualZero0OnTwoNodes) {
  ops::set_blas_threads(1);
  const std::vector<std::string> nodes = {"net.node_size=2", "net.bandwidth=100Gbit"};
  // (Without net.bandwidth the nodes are the hierarchical's only: no emulated delay.)
  const std::vector<std::string> gpt_sets = {"net.node_size=2", "sync.backend=hierarchical",
                                             "train.steps=10", "optimizer.type=sgd",
                                             "optimizer.lr=0.01"};
  for (const auto& [what, base] :
       {std::pair{"mlp adam", with(testing::small_mlp_config("hierarchical", 10, "adam"), nodes)},
        std::pair{"gpt sgd", testing::gpt_3d_config({1, 1, 4}, gpt_sets)}}) {
    const auto zero0 = train_result(4, base).params;
    ASSERT_FALSE(zero0.empty());
    for (const char* stage : {"1", "2", "3"}) {
      const auto sharded = train_result(4, with(base, {std::string("sync.zero=") + stage})).params;
      ASSERT_EQ(sharded.size(), zero0.size());
      EXPECT_LE(relative_difference(zero0, sharded), 1e-6) << what << " stage " << stage;
    }
  }
  // The check can fail: a run of fewer steps ends elsewhere.
  const Config mlp = with(testing::small_mlp_config("hierarchical", 10, "adam"), nodes);
  EXPECT_GT(relative_difference(train_result(4, mlp).params,
                                train_result(4, with(mlp, {"sync.zero=1", "train.steps=9"})).params),
            1e-6);
}

// ---- checkpoints -------------------------------------------------------------

TEST_F(ZeroFiles, Stages1To3ResumeBitwise) {
  for (const char* stage : {"1", "2", "3"}) {
    const Config whole = with(testing::small_mlp_config("ring", 10, "adam"),
                              {std::string("sync.zero=") + stage, "train.checkpoint_every=5",
                               std::string("sync.overlap=") + (stage[0] != '1' ? "true" : "false")});
    const Config first = with(whole, {"train.steps=5"});
    // The reference writes no checkpoint: a checkpoint that wrote other
    // parameters than the run holds (stage 3 gathers them for it) would
    // otherwise mislead both runs alike.
    const auto reference = train_result(4, with(whole, {"train.checkpoint_every=0"}),
                                        (dir_ / (std::string("whole") + stage)).string());
    const std::string run = (dir_ / (std::string("resumed") + stage)).string();
    train_result(4, first, run);
    ASSERT_EQ(latest_checkpoint(run), 5);
    std::vector<float> resumed;
    std::mutex mu;
    run_inproc(4, [&](Comm& c) {
      TrainOptions o;
      o.out_dir = run;
      o.resume_from = run;
      TrainResult r = train(c, whole, o);
      std::lock_guard<std::mutex> lock(mu);
      if (c.rank() == 0) resumed = r.params;
    });
    EXPECT_EQ(resumed, reference.params) << "stage " << stage;
  }
}

// Resuming onto another data-parallel size reshards the optimizer state:
// 4 ranks to step 5, then 2 (and 8) ranks from the checkpoint to step 10,
// against the uninterrupted runs of 4 and of the new size (the sums differ
// only in their order: within 1e-6).
TEST_F(ZeroFiles, ResumingOntoAnotherDataParallelSizeReshards) {
  std::map<int, std::vector<float>> resumed_stage1;
  for (const char* stage : {"1", "3"}) {
  const Config whole = with(testing::small_mlp_config("ring", 10, "adam"),
                            {std::string("sync.zero=") + stage, "train.checkpoint_every=5"});
  const auto four = train_result(4, whole, (dir_ / (stage + std::string("four"))).string()).params;
  for (int n : {2, 8}) {
    const std::string from = (dir_ / (stage + std::string("half") + std::to_string(n))).string();
    const auto stopped = train_result(4, with(whole, {"train.steps=5"}), from).params;
    std::vector<float> resumed;
    std::mutex mu;
    run_inproc(n, [&](Comm& c) {
      TrainOptions o;
      o.out_dir = (dir_ / (stage + std::string("resumed") + std::to_string(n))).string();
      o.resume_from = from;
      TrainResult r = train(c, whole, o);
      std::lock_guard<std::mutex> lock(mu);
      if (c.rank() == 0) resumed = r.params;
    });
    const auto direct = train_result(n, whole).params;
    ASSERT_EQ(resumed.size(), four.size());
    EXPECT_LE(relative_difference(four, resumed), 1e-6) << stage << " " << n;
    EXPECT_LE(relative_difference(direct, resumed), 1e-6) << stage << " " << n;
    EXPECT_GT(relative_difference(four, stopped), 1e-4) << "the check can fail";
    // Stage 3's resumed run is the stage-1 run resumed onto the same size.
    if (std::string(stage) == "1") resumed_stage1[n] = resumed;
    else EXPECT_LE(relative_difference(resumed_stage1[n], resumed), 1e-6) << n;
  }
  }
}

// "A run that had d/2 from the checkpoint": ZeRO-0's own run stopped at
// step 5 on 4 ranks and resumed on 2 (its optimizer state whole on every
// rank). Each stage's checkpoint of step 5 holds the same parameters and,
// cut in pieces, the same Adam state, and its 2 ranks then run the sums of
// ZeRO-0 at d = 2 (ZeroEqualsZero0): the resumed runs are bitwise that one.
TEST_F(ZeroFiles, ResumingOntoHalfTheRanksIsBitwiseZero0ResumedThere) {
  auto resumed = [&](const std::string& stage, const std::vector<std::string>& sets) {
    const Config whole = with(testing::small_mlp_config("ring", 10, "adam"),
                              [&] {
                                auto all = sets;
                                all.insert(all.begin(), {"sync.zero=" + stage,
                                                         "train.checkpoint_every=5"});
                                return all;
                              }());
    const std::string from = (dir_ / ("stopped" + stage)).string();
    train_result(4, with(whole, {"train.steps=5"}), from);
    std::vector<float> params;
    std::mutex mu;
    run_inproc(2, [&](Comm& c) {
      TrainOptions o;
      o.out_dir = (dir_ / ("resumed" + stage)).string();
      o.resume_from = from;
      TrainResult r = train(c, whole, o);
      std::lock_guard<std::mutex> lock(mu);
      if (c.rank() == 0) params = r.params;
    });
    return params;
  };
  const auto zero0 = resumed("0", {});
  ASSERT_FALSE(zero0.empty());
  EXPECT_EQ(resumed("1", {}), zero0) << "stage 1";
  EXPECT_EQ(resumed("2", {"sync.overlap=true", "sync.bucket_bytes=3K"}), zero0) << "stage 2";
  EXPECT_EQ(resumed("3", {"sync.overlap=true"}), zero0) << "stage 3";
  // The check can fail: the 4-rank run to step 10 sums in another order.
  const auto four = train_result(4, with(testing::small_mlp_config("ring", 10, "adam"),
                                         {"sync.zero=1"})).params;
  EXPECT_NE(four, zero0);
}

// Inside a (p, t, d) grid the same holds cell by cell: (2, 2, 2) to step 3,
// then (2, 2, 1) from the checkpoint to step 6 — each (stage, tensor rank)
// restores its cell's replica 0, and with ZeRO-1 cuts its optimizer piece
// from the cell's two old pieces — against the uninterrupted runs of d = 2
// and of d = 1. Those two differ by ~2e-5 relative (Adam's first steps
// magnify the summation order of other micro-batch cuts), the stopped run
// by ~0.1: within 1e-4 of both tells a right restore from a wrong one.
TEST_F(ZeroFiles, ResumingA3dGridOntoAnotherDataParallelSizeReshardsEachCell) {
  for (const char* zero : {"0", "1"}) {
    const std::vector<std::string> sets = {"train.steps=6", "optimizer.type=adam",
                                           "optimizer.lr=0.01", "train.checkpoint_every=3",
                                           std::string("sync.zero=") + zero};
    const testing::Grid3d two{2, 2, 2}, one{2, 2, 1};
    const auto whole = train_result(8, testing::gpt_3d_config(two, sets)).params;
    const std::string from = (dir_ / (std::string("stopped") + zero)).string();
    const auto stopped =
        train_result(8, with(testing::gpt_3d_config(two, sets), {"train.steps=3"}), from).params;
    std::vector<float> resumed;
    std::mutex mu;
    run_inproc(4, [&](Comm& c) {
      TrainOptions o;
      o.out_dir = (dir_ / (std::string("resumed") + zero)).string();
      o.resume_from = from;
      TrainResult r = train(c, testing::gpt_3d_config(one, sets), o);
      std::lock_guard<std::mutex> lock(mu);
      if (c.rank() == 0) resumed = r.params;
    });
    const auto direct = train_result(4, testing::gpt_3d_config(one, sets)).params;
    ASSERT_EQ(resumed.size(), whole.size());
    EXPECT_LE(relative_difference(whole, resumed), 1e-4) << "zero " << zero;
    EXPECT_LE(relative_difference(direct, resumed), 1e-4) << "zero " << zero;
    EXPECT_GT(relative_difference(whole, stopped), 1e-2) << "the check can fail";
  }
}

TEST(Reshard, EveryNewPieceIsTheOldStatesSliceForAnyCounts) {
  for (int64_t count : {0, 1, 5, 13, 1285})
    for (int old_parts : {1, 2, 3, 4, 7})
      for (int new_parts : {1, 2, 4, 6, 8}) {
        // The old pieces of the state 0, 1, ..., count-1.
        const Partition before{count, old_parts}, after{count, new_parts};
        std::vector<int64_t> bounds;
        for (int q = 0; q <= old_parts; ++q) bounds.push_back(q == old_parts ? count : before.offset(q));
        int reads = 0;
        for (int r = 0; r < new_parts; ++r) {
          const auto piece = reshard_range(bounds, after.offset(r), after.offset(r) + after.size(r),
                                           [&](int q) {
            ++reads;
            std::vector<float> v(static_cast<size_t>(before.size(q)));
            for (size_t i = 0; i < v.size(); ++i)
              v[i] = static_cast<float>(before.offset(q) + static_cast<int64_t>(i));
            return v;
          });
          ASSERT_EQ(static_cast<int64_t>(piece.size()), after.size(r));
          for (size_t i = 0; i < piece.size(); ++i)
            ASSERT_EQ(piece[i], static_cast<float>(after.offset(r) + static_cast<int64_t>(i)))
                << count << " " << old_parts << " -> " << new_parts << " rank " << r;
        }
        EXPECT_LE(reads, old_parts + new_parts) << "each new piece reads only what overlaps it";
      }
  EXPECT_THROW(reshard_range({0, 5, 10}, 0, 10, [](int) { return std::vector<float>(3); }),
               DataError);
  EXPECT_THROW(reshard_range({0, 5}, 0, 10, [](int) { return std::vector<float>(5); }), DataError);
}

// ---- bad configurations --------------------------------------------------------

TEST(ZeroConfig, RefusalsNameTheKeys) {
  const auto error = [](int ranks, const std::string& sync, std::vector<std::string> sets) {
    return testing::train_config_error(ranks, with(testing::small_mlp_config(sync), sets));
  };
  EXPECT_THAT(error(2, "ps", {"sync.zero=1", "ps.colocated=true"}),
              AllOf(HasSubstr("sync.zero"), HasSubstr("sync.backend ps")));
  EXPECT_THAT(error(2, "naive", {"sync.zero=1"}),
              AllOf(HasSubstr("sync.zero"), HasSubstr("naive"), HasSubstr("reduce-scatter")));
  EXPECT_THAT(error(2, "tree", {"sync.zero=2"}), AllOf(HasSubstr("sync.zero"), HasSubstr("tree")));
  EXPECT_THAT(error(2, "auto", {"sync.zero=1"}), AllOf(HasSubstr("sync.zero"), HasSubstr("auto")));
  EXPECT_THAT(testing::train_config_error(2, testing::cnn_config(false, {"sync.zero=2"})),
              AllOf(HasSubstr("sync.zero: 2"), HasSubstr("model.type cnn"),
                    HasSubstr("layer_ranges")));
  EXPECT_THAT(testing::train_config_error(2, testing::cnn_config(false, {"sync.zero=3"})),
              AllOf(HasSubstr("sync.zero: 3"), HasSubstr("model.type cnn"),
                    HasSubstr("layer_ranges")));
  EXPECT_THAT(error(2, "ps", {"sync.zero=3", "ps.colocated=true"}),
              AllOf(HasSubstr("sync.zero"), HasSubstr("sync.backend ps")));
  EXPECT_THAT(error(2, "butterfly", {"sync.zero=3"}),
              AllOf(HasSubstr("sync.zero"), HasSubstr("butterfly"), HasSubstr("reduce-scatter")));
  EXPECT_THAT(error(2, "ring", {"sync.zero=3", "sync.overlap=true", "sync.priority=front_first"}),
              AllOf(HasSubstr("sync.zero: 3"), HasSubstr("sync.priority")));
  EXPECT_THAT(error(2, "ring", {"sync.zero=1", "sync.overlap=true"}),
              AllOf(HasSubstr("sync.zero: 1"), HasSubstr("sync.overlap")));
  EXPECT_THAT(error(2, "ring", {"sync.zero=4"}), HasSubstr("sync.zero must be 0, 1, 2 or 3"));
  EXPECT_THAT(error(3, "halving_doubling", {"sync.zero=1"}),
              AllOf(HasSubstr("sync.zero"), HasSubstr("power-of-two"), HasSubstr("3 ranks")));
}

}  // namespace
}  // namespace psar
