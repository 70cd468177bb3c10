// Sharded training state (ZeRO stages 1 and 2, sync/zero_sync.h),
// in-process. After 10 steps each stage equals the same algorithm's ZeRO-0
// run — bitwise for stage 1 of ring and halving_doubling (the same
// reduce-scatter sums each element), within 1e-6 relative for stage 2's
// per-bucket reduce-scatters (a bucket's owners are cut at the flat layout's
// boundaries, so an element's sum starts at another rank) — for the MLP and
// the GPT, SGD and Adam, d = 2 and 4, and inside (p, t, d) = (2, 2, 2). The
// bytes each rank sent and the bytes of its training state, read from
// axes.csv, equal the closed forms to the byte; the bad configurations are
// ConfigErrors naming the keys; a checkpointed run resumes bitwise.
// (mpi and the MPI transport: zero_mpi_test.cc.)

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <mutex>
#include <unistd.h>

#include "allreduce/partition.h"
#include "comm/inproc_comm.h"
#include "core/ops.h"
#include "tests/trainer/three_d_fixture.h"
#include "tests/trainer/train_fixture.h"
#include "core/checkpoint.h"
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

TEST_P(ZeroEqualsZero0, Stage1IsBitwiseAndStage2WithOverlapWithin1e6) {
  const int d = GetParam().d;
  const auto zero0 = train_result(d, config({})).params;
  const auto stage1 = train_result(d, config({"sync.zero=1"})).params;
  const auto stage2 = train_result(d, config({"sync.zero=2"})).params;
  const auto stage2_overlap =
      train_result(d, config({"sync.zero=2", "sync.overlap=true", "sync.bucket_bytes=1K"})).params;
  ASSERT_FALSE(zero0.empty());
  EXPECT_EQ(stage1, zero0) << "stage 1 is the same sums and the same elementwise step";
  EXPECT_EQ(stage2, zero0) << "stage 2 without overlap is stage 1";
  ASSERT_EQ(stage2_overlap.size(), zero0.size());
  EXPECT_LE(relative_difference(zero0, stage2_overlap), 1e-6);
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
                                                     "sync.bucket_bytes=8K"})))
                            .params;
    EXPECT_EQ(stage1, zero0) << opt;
    ASSERT_EQ(stage2.size(), zero0.size());
    EXPECT_LE(relative_difference(zero0, stage2), 1e-6) << opt;
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
      const Config cfg = with(testing::small_mlp_config("ring", 3, "adam"),
                              {std::string("sync.zero=") + stage, "sync.overlap=" +
                               std::string(stage[0] == '2' ? "true" : "false"),
                               "sync.bucket_bytes=1K", "train.batch_size=" + std::to_string(batch)});
      const auto rows = axes(n, cfg, std::string("bytes_") + stage + "_" + std::to_string(n));
      ASSERT_EQ(rows.size(), 3u * n);
      for (const auto& row : rows) {
        const int r = static_cast<int>(field(row, "rank"));
        EXPECT_EQ(field(row, "dp_bytes_sent"), ring_zero_bytes(kMlpParams, n, r))
            << "stage " << stage << " N " << n << " rank " << r;
        if (kMlpParams % n == 0)
          EXPECT_EQ(field(row, "dp_bytes_sent"), 4 * 2 * (n - 1) * kMlpParams / n);
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
                                                           "sync.bucket_bytes=8K"}),
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

// fp32 Adam: ZeRO-0 16Ψ (parameters 4Ψ, gradients 4Ψ, m and v 8Ψ); stages 1
// and 2: 4Ψ + 4Ψ + 8·P_r, P_r = Partition{Ψ, N}.size(r) = ⌈Ψ/N⌉ for
// r < Ψ mod N, else ⌊Ψ/N⌋ — 8Ψ + 8Ψ/N when N divides Ψ. SGD with momentum:
// 4·P_r of velocity.
TEST_F(ZeroFiles, StateBytesAreTheZeroFormsToTheByte) {
  const int n = 4;
  const Partition pieces{kMlpParams, n};
  for (const char* opt : {"adam", "sgd"}) {
    const int64_t per_element = std::string(opt) == "adam" ? 8 : 4;
    for (int stage : {0, 1, 2}) {
      const Config cfg = with(testing::small_mlp_config("ring", 2, opt),
                              {"sync.zero=" + std::to_string(stage)});
      const auto rows = axes(n, cfg, std::string("mem_") + opt + std::to_string(stage));
      ASSERT_EQ(rows.size(), 2u * n);
      for (const auto& row : rows) {
        const int r = static_cast<int>(field(row, "rank"));
        EXPECT_EQ(field(row, "params_bytes"), 4 * kMlpParams);
        EXPECT_EQ(field(row, "grads_bytes"), 4 * kMlpParams);
        const int64_t elements = stage == 0 ? kMlpParams : pieces.size(r);
        EXPECT_EQ(field(row, "optimizer_bytes"), per_element * elements)
            << opt << " stage " << stage << " rank " << r;
      }
    }
  }
}

// ---- checkpoints -------------------------------------------------------------

TEST_F(ZeroFiles, Stage1And2ResumeBitwise) {
  for (const char* stage : {"1", "2"}) {
    const Config whole = with(testing::small_mlp_config("ring", 10, "adam"),
                              {std::string("sync.zero=") + stage, "train.checkpoint_every=5",
                               std::string("sync.overlap=") + (stage[0] == '2' ? "true" : "false")});
    const Config first = with(whole, {"train.steps=5"});
    const auto reference = train_result(4, whole, (dir_ / (std::string("whole") + stage)).string());
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
  const Config whole = with(testing::small_mlp_config("ring", 10, "adam"),
                            {"sync.zero=1", "train.checkpoint_every=5"});
  const auto four = train_result(4, whole, (dir_ / "four").string()).params;
  for (int n : {2, 8}) {
    const std::string from = (dir_ / ("half" + std::to_string(n))).string();
    const auto stopped = train_result(4, with(whole, {"train.steps=5"}), from).params;
    std::vector<float> resumed;
    std::mutex mu;
    run_inproc(n, [&](Comm& c) {
      TrainOptions o;
      o.out_dir = (dir_ / ("resumed" + std::to_string(n))).string();
      o.resume_from = from;
      TrainResult r = train(c, whole, o);
      std::lock_guard<std::mutex> lock(mu);
      if (c.rank() == 0) resumed = r.params;
    });
    const auto direct = train_result(n, whole).params;
    ASSERT_EQ(resumed.size(), four.size());
    EXPECT_LE(relative_difference(four, resumed), 1e-6) << n;
    EXPECT_LE(relative_difference(direct, resumed), 1e-6) << n;
    EXPECT_GT(relative_difference(four, stopped), 1e-4) << "the check can fail";
  }
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
  EXPECT_THAT(error(2, "ring", {"sync.zero=3"}),
              AllOf(HasSubstr("sync.zero: 3"), HasSubstr("model.type mlp")));
  EXPECT_THAT(error(2, "ring", {"sync.zero=1", "sync.overlap=true"}),
              AllOf(HasSubstr("sync.zero: 1"), HasSubstr("sync.overlap")));
  EXPECT_THAT(error(2, "ring", {"sync.zero=4"}), HasSubstr("sync.zero must be 0, 1, 2 or 3"));
  EXPECT_THAT(error(3, "halving_doubling", {"sync.zero=1"}),
              AllOf(HasSubstr("sync.zero"), HasSubstr("power-of-two"), HasSubstr("3 ranks")));
}

}  // namespace
}  // namespace psar
