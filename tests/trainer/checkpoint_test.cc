// Checkpoints and resume, in-process. k steps with a checkpoint at k, then a
// resume to 2k, end with the bits of one uninterrupted 2k-step run — the
// whole model and every checkpoint file byte for byte (parameters, optimizer
// state, data position, RNG) — for every allreduce algorithm over Comm
// point-to-point, Adam as well as SGD with momentum, the parameter server
// (bsp, dedicated and co-located) and a (2, 2, 1) 3D GPT with dropout. Also:
// a checkpoint of another job is refused naming what differs, the file
// format refuses damage, the streamed steps.csv of the resumed run holds the
// same rows as the uninterrupted one's, a run without checkpoints cannot be
// resumed. (`mpi` and killed ranks: tests/trainer/kill_resume.sh.)

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>

#include "allreduce/allreducer.h"
#include "comm/inproc_comm.h"
#include "core/errors.h"
#include "core/ops.h"
#include "three_d_fixture.h"
#include "train_fixture.h"
#include "trainer/checkpoint.h"
#include "trainer/step_log.h"
#include "trainer/trainer.h"

namespace psar {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

std::string read(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Trains `ranks` threads on `cfg` in `dir`; returns rank 0's whole model.
std::vector<float> train_in(int ranks, const Config& cfg, const fs::path& dir, bool resume) {
  std::vector<float> params;
  std::mutex mu;
  run_inproc(ranks, [&](Comm& c) {
    TrainOptions o;
    o.out_dir = dir.string();
    o.resume = resume;
    TrainResult r = train(c, cfg, o);
    std::lock_guard<std::mutex> lock(mu);
    if (!r.server && (params.empty() || c.rank() == 0) && !r.params.empty()) params = r.params;
  });
  return params;
}

// A copy of `cfg` with `sets` applied (through its text: Config copies share their tree).
Config with(const Config& cfg, const std::vector<std::string>& sets) {
  return Config::load_string(cfg.dump(), config_schema(), sets);
}

// The steps.csv rows without the time columns (step_s, compute_s, sync_s,
// exposed_sync_s: 4–6 and 10).
std::string untimed_rows(const fs::path& steps_csv) {
  std::istringstream in(read(steps_csv));
  std::string out;
  for (std::string line; std::getline(in, line);) {
    std::vector<std::string> cells;
    std::stringstream ss(line);
    for (std::string c; std::getline(ss, c, ',');) cells.push_back(c);
    for (size_t i = 0; i < cells.size(); ++i)
      if (i < 4 || (i > 6 && i != 10)) out += cells[i] + ",";
    out += "\n";
  }
  return out;
}

class Checkpoints : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { ops::set_blas_threads(1); }
  void SetUp() override {
    std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    for (char& ch : name)
      if (ch == '/') ch = '_';
    dir_ = fs::temp_directory_path() / ("psar_ckpt_" + std::to_string(::getpid()) + "_" + name);
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // 2k uninterrupted vs k then resume to 2k: equal models and final files.
  void expect_bitwise_resume(int ranks, const Config& base, int k) {
    const Config whole = with(base, {"train.steps=" + std::to_string(2 * k),
                                     "train.checkpoint_every=" + std::to_string(k)});
    const Config first = with(whole, {"train.steps=" + std::to_string(k)});
    const auto reference = train_in(ranks, whole, dir_ / "whole", false);
    const auto stopped = train_in(ranks, first, dir_ / "resumed", false);
    ASSERT_EQ(latest_checkpoint((dir_ / "resumed").string()), k);
    const auto resumed = train_in(ranks, whole, dir_ / "resumed", true);
    ASSERT_FALSE(reference.empty());
    EXPECT_EQ(resumed, reference) << "the resumed run's parameters differ";
    // The check can fail: the first half ended elsewhere.
    EXPECT_NE(stopped, reference);
    const std::string last = checkpoint_dir("", 2 * k);
    int files = 0;
    for (const auto& e : fs::directory_iterator(dir_.string() + "/whole" + last)) {
      if (e.path().filename() == "MANIFEST") continue;
      ++files;
      EXPECT_EQ(read(e.path()),
                read(dir_.string() + "/resumed" + last + "/" + e.path().filename().string()))
          << e.path().filename() << " differs";
    }
    EXPECT_GE(files, 1);
    EXPECT_EQ(untimed_rows(dir_ / "whole" / "steps.csv"),
              untimed_rows(dir_ / "resumed" / "steps.csv"));
  }

  fs::path dir_;
};

class ResumeEveryAlgorithm : public Checkpoints,
                             public ::testing::WithParamInterface<std::string> {};

TEST_P(ResumeEveryAlgorithm, ContinuesBitwiseIdentically) {
  expect_bitwise_resume(3, testing::small_mlp_config(GetParam()), 4);
}

std::vector<std::string> point_to_point_algorithms() {
  std::vector<std::string> names;
  for (const auto& n : allreducer_names())
    if (n != "mpi") names.push_back(n);
  return names;
}
INSTANTIATE_TEST_SUITE_P(Algorithms, ResumeEveryAlgorithm,
                         ::testing::ValuesIn(point_to_point_algorithms()),
                         [](const auto& info) { return info.param; });

TEST_F(Checkpoints, AdamStateIsRestoredToo) {
  expect_bitwise_resume(2, testing::small_mlp_config("ring", 20, "adam"), 5);
}

TEST_F(Checkpoints, ParameterServerShardsSaveAndRestoreTheirState) {
  // Ranks 0, 1 serve two shards (chunked), ranks 2, 3 train.
  expect_bitwise_resume(
      4, with(testing::small_mlp_config("ps", 20, "adam"), {"ps.servers=2", "ps.chunk_bytes=1K"}),
      4);
}

TEST_F(Checkpoints, ColocatedParameterServerToo) {
  expect_bitwise_resume(3, with(testing::small_mlp_config("ps"), {"ps.colocated=true"}), 4);
}

TEST_F(Checkpoints, ThreeDimensionalGptWithDropoutEveryRankItsSlice) {
  const testing::Grid3d grid{2, 2, 1};
  expect_bitwise_resume(4, testing::gpt_3d_config(grid, {"model.dropout=0.1"}), 3);
  // Every rank wrote its own slice.
  for (int r = 0; r < 4; ++r)
    EXPECT_TRUE(
        fs::exists(rank_checkpoint_path((dir_ / "whole").string() + checkpoint_dir("", 6), r)));
}

TEST_F(Checkpoints, AnotherJobsCheckpointIsRefusedNamingWhatDiffers) {
  const Config cfg =
      with(testing::small_mlp_config("ring"), {"train.steps=4", "train.checkpoint_every=4"});
  train_in(2, cfg, dir_ / "run", false);
  try {
    train_in(3, with(cfg, {"optimizer.lr=0.2", "train.steps=8"}), dir_ / "run", true);
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr("optimizer.lr = 0.05 in the checkpoint, 0.2 in this run"));
    EXPECT_THAT(e.what(), HasSubstr("world size: 2 ranks wrote it, this job has 3"));
  }
  // A cosine schedule's length is part of the math.
  try {
    train_in(2, with(cfg, {"train.steps=8", "optimizer.schedule=cosine"}), dir_ / "run", true);
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr("optimizer.schedule = constant in the checkpoint"));
  }
}

TEST_F(Checkpoints, ARunWithoutCheckpointsOrWithNothingLeftCannotBeResumed) {
  const Config cfg = with(testing::small_mlp_config("ring"), {"train.steps=2"});
  train_in(1, cfg, dir_ / "run", false);
  EXPECT_THROW(train_in(1, cfg, dir_ / "run", true), ConfigError);
  const Config done = with(cfg, {"train.checkpoint_every=2"});
  train_in(1, done, dir_ / "done", false);
  try {
    train_in(1, done, dir_ / "done", true);
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr("nothing is left to run"));
  }
}

TEST_F(Checkpoints, AResumedStepLogKeepsTheRowsUpToTheCheckpointAndDropsACutLine) {
  // What a run killed after its checkpoint at step 2 left: rows 1..3 and a
  // line cut short inside its last append.
  const std::string steps = (dir_ / "steps.csv").string();
  std::ofstream(steps) << kStepsCsvHeader << "0,1,0.1,9,0,0,0,0,0,0,0,0,0\n0,2,0.2,8,0,0,0,0,0,0,0,0,0\n"
                       << "0,3,0.3,7,0,0,0,0,0,0,0,0,0\n0,4,0.";
  run_inproc(1, [&](Comm& c) {
    StepLog log(c, c, GridShape{}, GridCoord{}, {dir_.string(), false, 2});
    StepRow row{3, 0.3, 6.5, 0, 0, 0, 0, 0, 0, 0};
    log.add(row, AxisRow{});
    log.flush();
    EXPECT_EQ(log.losses(), std::vector<double>{6.5});
  });
  EXPECT_EQ(read(steps), std::string(kStepsCsvHeader) +
                             "0,1,0.1,9,0,0,0,0,0,0,0,0,0\n0,2,0.2,8,0,0,0,0,0,0,0,0,0\n"
                             "0,3,0.300000,6.5,0,0,0,0,0,0,0,0,0\n");
  EXPECT_TRUE(fs::exists(dir_ / "axes.csv"));
  EXPECT_TRUE(fs::exists(dir_ / "eval.csv"));
}

TEST(CheckpointFile, RoundTripsAndRefusesDamage) {
  CheckpointFile f;
  f.set("kind", "rank");
  f.set("text", "two\nlines");
  f.set_int("step", 42);
  const std::vector<float> a = {1.5f, -0.0f, 3e-38f}, b = {};
  f.add_blob("params", a);
  f.add_blob("empty", b);
  const std::string bytes = f.encode();
  const CheckpointFile g = CheckpointFile::decode(bytes, "mem");
  EXPECT_EQ(g.get("text"), "two\nlines");
  EXPECT_EQ(g.get_int("step"), 42);
  EXPECT_EQ(std::vector<float>(g.blob("params").begin(), g.blob("params").end()), a);
  EXPECT_TRUE(g.blob("empty").empty());
  EXPECT_THROW(g.get("missing"), DataError);
  EXPECT_THROW(CheckpointFile::decode(bytes.substr(0, bytes.size() - 3), "cut"), DataError);
  std::string flipped = bytes;
  flipped[flipped.size() / 2] ^= 1;
  EXPECT_THROW(CheckpointFile::decode(flipped, "flipped"), DataError);
  EXPECT_THROW(CheckpointFile::decode("not a checkpoint", "foreign"), DataError);
}

}  // namespace
}  // namespace psar
