// Checkpoints and resume, in-process. k steps with a checkpoint at k, then a
// resume to 2k, end with the bits of one uninterrupted 2k-step run — the
// whole model and every checkpoint file byte for byte (parameters, optimizer
// state, data position, RNG) — for every allreduce algorithm over Comm
// point-to-point, Adam as well as SGD with momentum, the parameter server
// (bsp, dedicated and co-located; dense, sparse and hybrid on a DLRM) and a
// (2, 2, 1) 3D GPT with dropout. Also:
// a checkpoint of another job is refused naming what differs, the file
// format refuses damage, the streamed steps.csv of the resumed run holds the
// same rows as the uninterrupted one's, a run without checkpoints cannot be
// resumed. (`mpi` and killed ranks: tests/trainer/kill_resume.sh.)

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <sstream>

#include "allreduce/allreducer.h"
#include "comm/inproc_comm.h"
#include "core/errors.h"
#include "core/ops.h"
#include "three_d_fixture.h"
#include "train_fixture.h"
#include "core/checkpoint.h"
#include "trainer/agreement.h"
#include "trainer/step_log.h"
#include "trainer/trainer.h"

namespace psar {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

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
    o.resume_from = resume ? o.out_dir : "";
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

// A DLRM on Zipf ids under Adam: the sparse shards' per-row state and row
// versions, and under hybrid also each worker's dense-layer optimizer.
Config dlrm_adam_config(const std::string& sync) {
  return Config::load_string(
      "model: {type: dlrm, tables: [300, 50], embedding_dim: 4, hidden: [16]}\n"
      "data: {dataset: zipf, zipf_skew: 1.1, synthetic_samples: 480, synthetic_features: 6, "
      "synthetic_classes: 3}\n"
      "optimizer: {type: adam, lr: 0.01}\n"
      "train: {steps: 8, batch_size: 24, seed: 2, log_every: 1000, eval_every: 0}\n"
      "sync: {backend: " + sync + ", timeout: 20s}\n"
      "ps: {sparse: " + std::string(sync == "ps" ? "true" : "false") +
          ", servers: 2, chunk_bytes: 1K, timeout: 20s}\n",
      config_schema());
}

TEST_F(Checkpoints, SparseParameterServerRowsAndTheirVersionsToo) {
  expect_bitwise_resume(4, dlrm_adam_config("ps"), 4);
}

TEST_F(Checkpoints, HybridShardsAndEveryWorkersDenseLayersToo) {
  expect_bitwise_resume(4, dlrm_adam_config("hybrid"), 4);
  // Each worker's file holds its dense layers' Adam state (m and v).
  const CheckpointFile f =
      CheckpointFile::read(rank_checkpoint_path((dir_ / "resumed").string() + checkpoint_dir("", 8), 0));
  EXPECT_TRUE(f.has_blob("optimizer.1"));
  EXPECT_LT(f.blob("optimizer.0").size(), f.blob("params").size());
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
    // Another data-parallel size alone is an elastic resume (dp_resize), not a difference.
    EXPECT_THAT(e.what(), Not(HasSubstr("world size")));
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
                             "0,3,0.300000,6.5,0,0,0,0,0,0,0,0,0,0,0,none\n");
  EXPECT_TRUE(fs::exists(dir_ / "axes.csv"));
  EXPECT_TRUE(fs::exists(dir_ / "eval.csv"));
}

// untimed_rows in sorted order (flushes cut a stopped run's blocks elsewhere).
std::string sorted_rows(const fs::path& steps_csv) {
  std::istringstream in(untimed_rows(steps_csv));
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  std::sort(lines.begin(), lines.end());
  std::string out;
  for (const auto& l : lines) out += l + "\n";
  return out;
}

// Every file under `dir` (relative path -> bytes).
std::map<std::string, std::string> snapshot(const fs::path& dir) {
  std::map<std::string, std::string> files;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file()) files[fs::relative(e.path(), dir).string()] = read(e.path());
  return files;
}

// Trains `ranks` threads with per-rank options; returns worker rank 0's result.
TrainResult train_with(int ranks, const Config& cfg,
                       const std::function<TrainOptions(int rank)>& options) {
  TrainResult first;
  std::mutex mu;
  run_inproc(ranks, [&](Comm& c) {
    TrainResult r = train(c, cfg, options(c.rank()));
    std::lock_guard<std::mutex> lock(mu);
    if (!r.server && (first.params.empty() || c.rank() == 0)) first = r;
  });
  return first;
}

// The summary.csv status column's value.
std::string summary_status(const fs::path& run) {
  std::istringstream in(read(run / "summary.csv"));
  std::string header, row;
  std::getline(in, header);
  std::getline(in, row);
  return row.substr(row.rfind(',') + 1);
}

// train.exit_at_step stops with a checkpoint and status "exited"; --resume
// then runs the rest under the same cosine schedule, ending bitwise where one
// uninterrupted run ends.
TEST_F(Checkpoints, ExitAtStepThenResumeEqualsAnUninterruptedCosineRun) {
  const Config whole = with(testing::small_mlp_config("ring", 12, "adam"),
                            {"optimizer.schedule=cosine", "optimizer.warmup_steps=2"});
  const TrainResult reference = train_with(2, whole, [&](int) {
    return TrainOptions{.out_dir = (dir_ / "whole").string()};
  });
  const auto in = [&](const std::string& run, const std::string& from = "") {
    return [=, this](int) {
      return TrainOptions{.out_dir = (dir_ / run).string(),
                          .resume_from = from.empty() ? "" : (dir_ / from).string()};
    };
  };
  const TrainResult stopped = train_with(2, with(whole, {"train.exit_at_step=5"}), in("run"));
  EXPECT_EQ(stopped.status, "exited");
  EXPECT_EQ(stopped.steps, 5);
  EXPECT_EQ(summary_status(dir_ / "run"), "exited");
  ASSERT_EQ(latest_checkpoint((dir_ / "run").string()), 5);
  EXPECT_NE(stopped.params, reference.params);  // the check can fail
  // The resume names the same exit step: a run past it runs on.
  const TrainResult resumed =
      train_with(2, with(whole, {"train.exit_at_step=5"}), in("run", "run"));
  EXPECT_EQ(resumed.status, "finished");
  EXPECT_EQ(resumed.params, reference.params);
  EXPECT_EQ(sorted_rows(dir_ / "whole" / "steps.csv"), sorted_rows(dir_ / "run" / "steps.csv"));
  EXPECT_EQ(summary_status(dir_ / "run"), "finished");
}

// train.exit_after: every rank stops after the same step (the first whose
// end passes the duration on some rank), with a checkpoint, status "exited".
TEST_F(Checkpoints, ExitAfterADurationStopsEveryRankAfterTheSameStep) {
  const Config cfg = with(testing::small_mlp_config("ring", 1000), {"train.exit_after=1ns"});
  std::vector<TrainResult> results(3);
  run_inproc(3, [&](Comm& c) {
    results[static_cast<size_t>(c.rank())] =
        train(c, cfg, TrainOptions{.out_dir = (dir_ / "run").string()});
  });
  for (const TrainResult& r : results) {
    EXPECT_EQ(r.status, "exited");
    EXPECT_EQ(r.steps, 1);
  }
  EXPECT_EQ(summary_status(dir_ / "run"), "exited");
  EXPECT_EQ(latest_checkpoint((dir_ / "run").string()), 1);
}

// --resume RUN --out NEW: NEW continues RUN from its checkpoint (its rows up
// to it included); RUN is not changed by a single byte.
TEST_F(Checkpoints, ABranchContinuesInItsOwnDirectoryAndLeavesTheOldRunByteIdentical) {
  const Config whole = with(testing::small_mlp_config("ring", 8), {"train.checkpoint_every=4"});
  const TrainResult reference = train_with(3, whole, [&](int) {
    return TrainOptions{.out_dir = (dir_ / "whole").string()};
  });
  train_with(3, with(whole, {"train.steps=4"}),
             [&](int) { return TrainOptions{.out_dir = (dir_ / "old").string()}; });
  const auto before = snapshot(dir_ / "old");
  const TrainResult branch = train_with(3, whole, [&](int) {
    return TrainOptions{.out_dir = (dir_ / "new").string(),
                        .resume_from = (dir_ / "old").string()};
  });
  EXPECT_EQ(branch.first_step, 4);
  EXPECT_EQ(branch.params, reference.params);
  EXPECT_EQ(snapshot(dir_ / "old"), before);
  EXPECT_EQ(sorted_rows(dir_ / "whole" / "steps.csv"), sorted_rows(dir_ / "new" / "steps.csv"));
  EXPECT_EQ(latest_checkpoint((dir_ / "new").string()), 8);
}

// A stop signal seen by one rank only: every rank stops after the same step,
// with a checkpoint there (checkpoints on) and status "terminated".
TEST_F(Checkpoints, AStopSignalOnOneRankStopsEveryRankAfterTheSameStep) {
  const Config cfg = with(testing::small_mlp_config("ring", 20), {"train.checkpoint_every=50"});
  std::atomic<int> quiet{0}, signalled{SIGTERM};
  std::vector<TrainResult> results(3);
  run_inproc(3, [&](Comm& c) {
    TrainOptions o{.out_dir = (dir_ / "run").string()};
    o.stop_signal = c.rank() == 2 ? &signalled : &quiet;
    results[static_cast<size_t>(c.rank())] = train(c, cfg, o);
  });
  for (const TrainResult& r : results) {
    EXPECT_EQ(r.status, "terminated");
    EXPECT_EQ(r.steps, 1);
  }
  EXPECT_EQ(summary_status(dir_ / "run"), "terminated");
  EXPECT_EQ(latest_checkpoint((dir_ / "run").string()), 1);
  // The control: no signal, no stop.
  const TrainResult whole = train_with(3, cfg, [&](int) {
    TrainOptions o{.out_dir = (dir_ / "whole").string()};
    o.stop_signal = &quiet;
    return o;
  });
  EXPECT_EQ(whole.status, "finished");
  EXPECT_EQ(whole.steps, 20);
}

// A run directory is never mixed: a second run into it is refused before
// anything is touched; overwrite clears it; files that are no run are never cleared.
TEST_F(Checkpoints, AnExistingRunIsRefusedUntouchedUnlessOverwritten) {
  const Config cfg = with(testing::small_mlp_config("ring", 3), {"train.checkpoint_every=3"});
  const auto out = [&](bool overwrite) {
    return [&, overwrite](int) {
      return TrainOptions{.out_dir = (dir_ / "run").string(), .overwrite = overwrite};
    };
  };
  train_with(2, cfg, out(false));
  std::ofstream(dir_ / "run" / "tp.csv") << "an older run's file\n";
  const auto before = snapshot(dir_ / "run");
  try {
    train_with(2, with(cfg, {"train.steps=2"}), out(false));
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr("already holds a run"));
    EXPECT_THAT(e.what(), HasSubstr("--overwrite"));
    EXPECT_TRUE(e.agreed());
  }
  EXPECT_EQ(snapshot(dir_ / "run"), before);
  train_with(2, with(cfg, {"train.steps=2", "train.checkpoint_every=0"}), out(true));
  EXPECT_FALSE(fs::exists(dir_ / "run" / "tp.csv"));
  EXPECT_FALSE(fs::exists(dir_ / "run" / "checkpoints"));
  fs::create_directories(dir_ / "mine");
  std::ofstream(dir_ / "mine" / "notes.txt") << "not a run\n";
  EXPECT_THROW(train_with(1, cfg, [&](int) {
                 return TrainOptions{.out_dir = (dir_ / "mine").string(), .overwrite = true};
               }),
               ConfigError);
  EXPECT_TRUE(fs::exists(dir_ / "mine" / "notes.txt"));
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

// `cfg` with its last section (train:) written first: the same values in
// another text.
Config reordered(const Config& cfg) {
  const std::string text = cfg.dump();
  const size_t at = text.rfind("\ntrain:\n");
  return Config::load_string(text.substr(at + 1) + text.substr(0, at + 1), config_schema());
}

// The configuration is recorded once, at the start: MANIFEST holds its text
// as it always did (older checkpoints stay readable), and reading that text
// back gives the same values and digest. The record is canonical: the same
// configuration written in another order records the same text and digest.
TEST(ConfigRecord, AManifestsTextReadsBackToTheSameValuesAndDigest) {
  const Config cfg = with(testing::small_mlp_config("ring"), {"train.steps=4"});
  const ConfigRecord rec = ConfigRecord::of(cfg);
  EXPECT_EQ(rec.text, cfg.dump());
  const CheckpointFile manifest = make_manifest(4, rec, JobIdentity{});
  EXPECT_EQ(manifest.get("config"), cfg.dump());
  const ConfigRecord back = rec.read(manifest.get("config"), "MANIFEST");
  EXPECT_EQ(back.values, rec.values);
  EXPECT_EQ(back.digest, rec.digest);
  const ConfigRecord same = ConfigRecord::of(reordered(cfg));
  EXPECT_TRUE(same.text == rec.text);
  EXPECT_EQ(same.digest, rec.digest);
  const ConfigRecord other = ConfigRecord::of(with(cfg, {"optimizer.lr=0.2"}));
  EXPECT_NE(other.digest, rec.digest);
  EXPECT_THROW(rec.read("optimizer: {lr: [1, 2]}\n", "bad MANIFEST"), ConfigError);
}

// Start-up agreement on records taken once: every rank throws the same
// error naming the rank and the key that differs; the same configuration
// written in another order agrees.
TEST(StartUpAgreement, ARankWithAnotherConfigurationIsOneClearErrorOnEveryRank) {
  const Config cfg = with(testing::small_mlp_config("ring"), {"train.steps=4"});
  const ConfigRecord mine = ConfigRecord::of(cfg);
  const ConfigRecord lr = ConfigRecord::of(with(cfg, {"optimizer.lr=0.2"}));
  const ConfigRecord same = ConfigRecord::of(reordered(cfg));
  auto agree = [&](const ConfigRecord& rank2) {
    std::vector<std::string> errors(3);
    run_inproc(3, [&](Comm& c) {
      try {
        check_agreement(c, c.rank() == 2 ? rank2 : mine, "");
      } catch (const ConfigError& e) {
        errors[static_cast<size_t>(c.rank())] = e.what();
      }
    });
    return errors;
  };
  const auto errors = agree(lr);
  for (const auto& e : errors) {
    EXPECT_EQ(e, errors[0]);
    EXPECT_THAT(e, HasSubstr("start-up agreement: rank 2 differs from rank 0 in the "
                             "configuration: optimizer.lr = 0.05 in rank 0, 0.2 in rank 2"));
  }
  EXPECT_EQ(agree(same), std::vector<std::string>(3));
}

}  // namespace
}  // namespace psar
