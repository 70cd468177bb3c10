// Bad input through the real `psar` binary: a clear message naming the field
// or file, exit code 2, and no run directory left behind.

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

struct Outcome {
  int code = -1;
  std::string output;
};

Outcome run(const std::string& cmd) {
  Outcome o;
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) o.output.append(buf.data(), n);
  const int status = pclose(p);
  o.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return o;
}

class Cli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("psar_cli_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string config(const std::string& yaml) {
    const auto path = dir_ / "c.yaml";
    std::ofstream(path) << yaml;
    return path.string();
  }
  // Runs `psar train` on one rank; the run directory must not appear on error.
  Outcome train(const std::string& yaml, const std::string& extra = "") {
    const std::string out = (dir_ / "run").string();
    Outcome o = run(std::string(PSAR_BIN) + " train " + config(yaml) + " --out " + out + " " + extra);
    if (o.code != 0) {
      EXPECT_FALSE(fs::exists(out)) << "partial results left in " << out;
    }
    return o;
  }

  fs::path dir_;
};

const char* kGood =
    "model: {type: mlp, hidden: [8]}\n"
    "data: {dataset: synthetic, synthetic_samples: 256, synthetic_features: 6, synthetic_classes: 3}\n"
    "train: {steps: 3, batch_size: 16}\n"
    "sync: {backend: naive}\n";


TEST_F(Cli, AGoodConfigRunsAndWritesItsFiles) {
  const Outcome o = train(kGood);
  EXPECT_EQ(o.code, 0) << o.output;
  for (const char* f : {"config.yaml", "steps.csv", "summary.csv", "eval.csv"})
    EXPECT_TRUE(fs::exists(dir_ / "run" / f)) << f;
  std::ifstream in(dir_ / "run" / "steps.csv");
  std::string header;
  std::getline(in, header);
  EXPECT_EQ(header,
            "rank,step,epoch,loss,step_s,compute_s,sync_s,bytes_sent,bytes_recv,messages,"
            "exposed_sync_s,injected_s,pushes_dropped,workers,sequence_parallel,recompute");
  std::ifstream summary(dir_ / "run" / "summary.csv");
  std::getline(summary, header);
  std::string row;
  std::getline(summary, row);
  EXPECT_THAT(header, ::testing::EndsWith(",network,status"));
  EXPECT_THAT(row, ::testing::EndsWith(",off,finished"));
}

TEST_F(Cli, UnknownKeyIsNamed) {
  const Outcome o = train(std::string(kGood) + "optimizer: {lrate: 0.1}\n");
  EXPECT_EQ(o.code, 2);
  EXPECT_THAT(o.output, HasSubstr("unknown config key 'optimizer.lrate'"));
  EXPECT_THAT(o.output, HasSubstr("did you mean 'optimizer.lr'"));
}

TEST_F(Cli, WrongTypeIsNamed) {
  const Outcome o = train(kGood, "--set train.batch_size=lots");
  EXPECT_EQ(o.code, 2);
  EXPECT_THAT(o.output, HasSubstr("train.batch_size: expected an integer, got 'lots'"));
}

TEST_F(Cli, MissingDatasetFileIsNamed) {
  const Outcome o = train("train: {steps: 3}\ndata: {dataset: fashion_mnist, path: /nonexistent/fmnist}\n");
  EXPECT_EQ(o.code, 2);
  EXPECT_THAT(o.output, HasSubstr("/nonexistent/fmnist/train-images-idx3-ubyte"));
  EXPECT_THAT(o.output, HasSubstr("not found"));
}

TEST_F(Cli, CorruptDatasetFileIsNamed) {
  fs::create_directories(dir_ / "bad");
  for (const char* f : {"train-images-idx3-ubyte", "train-labels-idx1-ubyte",
                        "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"})
    std::ofstream(dir_ / "bad" / f) << "not an idx file";
  const Outcome o = train("train: {steps: 3}\ndata: {path: " + (dir_ / "bad").string() + "}\n");
  EXPECT_EQ(o.code, 2);
  EXPECT_THAT(o.output, HasSubstr("bad magic"));
}

TEST_F(Cli, MissingConfigFileIsNamed) {
  const Outcome o = run(std::string(PSAR_BIN) + " train /nonexistent/exp.yaml");
  EXPECT_EQ(o.code, 2);
  EXPECT_THAT(o.output, HasSubstr("cannot open config file '/nonexistent/exp.yaml'"));
}

TEST_F(Cli, AConfigPathThatIsADirectoryOrAnEmptyFileIsNamedAsSuch) {
  Outcome o = run(std::string(PSAR_BIN) + " train " + dir_.string());
  EXPECT_EQ(o.code, 2);
  EXPECT_THAT(o.output, HasSubstr("config file '" + dir_.string() + "' is a directory"));
  o = run(std::string(PSAR_BIN) + " train " + config(""));
  EXPECT_EQ(o.code, 2);
  EXPECT_THAT(o.output, HasSubstr("config file '" + (dir_ / "c.yaml").string() + "' is empty"));
}

TEST_F(Cli, HelpAndVersion) {
  for (const char* args : {" --help", " -h"}) {
    const Outcome o = run(std::string(PSAR_BIN) + args);
    EXPECT_EQ(o.code, 0);
    EXPECT_THAT(o.output, HasSubstr("usage: psar <command>"));
  }
  Outcome o = run(std::string(PSAR_BIN) + " train --help");
  EXPECT_EQ(o.code, 0);
  EXPECT_THAT(o.output, HasSubstr("--overwrite"));
  EXPECT_THAT(o.output, HasSubstr("--resume RUN_DIR"));
  o = run(std::string(PSAR_BIN) + " --version");
  EXPECT_EQ(o.code, 0);
  EXPECT_THAT(o.output, ::testing::MatchesRegex("psar [0-9]+\\.[0-9]+\\.[0-9]+\n"));
}

TEST_F(Cli, ADurationOrBandwidthWithoutAUnitIsRefused) {
  Outcome o = train(kGood, "--set net.latency=5");
  EXPECT_EQ(o.code, 2);
  EXPECT_THAT(o.output, HasSubstr("'5' has no unit"));
  o = train(kGood, "--set net.bandwidth=10");
  EXPECT_EQ(o.code, 2);
  EXPECT_THAT(o.output, HasSubstr("'10' has no unit"));
}

// An existing run in --out: refused, every file as it was; --overwrite
// replaces it whole (a file the new run does not write is gone).
TEST_F(Cli, AnExistingRunIsRefusedAndLeftAsItWasUnlessOverwritten) {
  const std::string out = (dir_ / "run").string();
  ASSERT_EQ(train(kGood, "--quiet").code, 0);
  std::ofstream(dir_ / "run" / "trace.json") << "{}";
  std::map<std::string, std::pair<std::string, fs::file_time_type>> before;
  for (const auto& e : fs::directory_iterator(out)) {
    std::ifstream in(e.path());
    std::stringstream ss;
    ss << in.rdbuf();
    before[e.path().filename()] = {ss.str(), fs::last_write_time(e.path())};
  }
  Outcome o = run(std::string(PSAR_BIN) + " train " + config(kGood) + " --out " + out +
                  " --set train.steps=2");
  EXPECT_EQ(o.code, 2);
  EXPECT_THAT(o.output, HasSubstr("--out " + out + " already holds a run"));
  for (const auto& e : fs::directory_iterator(out)) {
    std::ifstream in(e.path());
    std::stringstream ss;
    ss << in.rdbuf();
    const auto it = before.find(e.path().filename());
    ASSERT_NE(it, before.end()) << e.path() << " appeared";
    EXPECT_EQ(it->second.first, ss.str()) << e.path() << " changed";
    EXPECT_EQ(it->second.second, fs::last_write_time(e.path())) << e.path() << " touched";
  }
  EXPECT_EQ(before.size(), static_cast<size_t>(std::distance(fs::directory_iterator(out),
                                                             fs::directory_iterator())));
  o = run(std::string(PSAR_BIN) + " train " + config(kGood) + " --out " + out +
          " --quiet --overwrite --set train.steps=2");
  EXPECT_EQ(o.code, 0) << o.output;
  EXPECT_FALSE(fs::exists(dir_ / "run" / "trace.json"));
  EXPECT_TRUE(fs::exists(dir_ / "run" / "summary.csv"));
}

// Default run names carry the --set overrides that tell runs apart, and a
// second identical run gets a fresh directory beside the first.
TEST_F(Cli, DefaultRunNamesAreUniqueAndCarryTheOverrides) {
  const std::string cmd = "cd " + dir_.string() + " && " + PSAR_BIN + " train " + config(kGood) +
                          " --quiet --set optimizer.lr=0.2";
  ASSERT_EQ(run(cmd).code, 0);
  ASSERT_EQ(run(cmd).code, 0);
  EXPECT_TRUE(fs::exists(dir_ / "results/runs/run_naive_n1_lr0.2/summary.csv"));
  EXPECT_TRUE(fs::exists(dir_ / "results/runs/run_naive_n1_lr0.2-2/summary.csv"));
}

TEST_F(Cli, AutoWithoutATuningTableSaysWhatToSet) {
  const Outcome o = train(kGood, "--sync auto");
  EXPECT_EQ(o.code, 2);
  EXPECT_THAT(o.output, HasSubstr("sync.backend auto needs a tuning table: set sync.tuning"));
  const Outcome missing = train(kGood, "--sync auto --set sync.tuning=/nonexistent/t.csv");
  EXPECT_EQ(missing.code, 2);
  EXPECT_THAT(missing.output, HasSubstr("cannot open the tuning table '/nonexistent/t.csv'"));
}

TEST_F(Cli, TuneNeedsItsOutputTable) {
  const Outcome o = run(std::string(PSAR_BIN) + " tune -b 4K -e 8K");
  EXPECT_EQ(o.code, 2);
  EXPECT_THAT(o.output, HasSubstr("psar tune: --out TABLE is required"));
}

TEST_F(Cli, UnknownSyncBackendListsTheChoices) {
  const Outcome o = train(kGood, "--sync rnig");
  EXPECT_EQ(o.code, 2);
  EXPECT_THAT(o.output, HasSubstr("sync.backend: 'rnig' is not one of"));
  EXPECT_THAT(o.output, HasSubstr("ring"));
}

TEST_F(Cli, StepsAndEpochsTogetherInAFileAreRejected) {
  const Outcome o = train(
      "model: {type: mlp, hidden: [8]}\n"
      "data: {dataset: synthetic, synthetic_samples: 256, synthetic_features: 6}\n"
      "train: {steps: 3, epochs: 1, batch_size: 16}\n");
  EXPECT_EQ(o.code, 2);
  EXPECT_THAT(o.output, HasSubstr("set exactly one of train.steps and train.epochs"));
}

TEST_F(Cli, SettingEpochsOnTheCommandLineReplacesTheFilesSteps) {
  const Outcome o = train(kGood, "--set train.epochs=0.25 --quiet");
  EXPECT_EQ(o.code, 0) << o.output;
  std::ifstream in(dir_ / "run" / "summary.csv");
  std::string header, row;
  std::getline(in, header);
  std::getline(in, row);
  // 256 samples / 16 per batch = 16 steps per epoch; a quarter epoch = 4 steps.
  EXPECT_THAT(row, HasSubstr(",4,0.25,"));
}

TEST_F(Cli, AWorldSizeTheConfigCannotUseIsRejected) {
  // 16 samples per batch cannot be split over 3 ranks.
  const std::string out = (dir_ / "run").string();
  const Outcome o = run(std::string(PSAR_MPIRUN) + " --allow-run-as-root --oversubscribe -np 3 " +
                        PSAR_BIN + " train " + config(kGood) + " --out " + out);
  EXPECT_NE(o.code, 0);
  EXPECT_THAT(o.output, HasSubstr("train.batch_size 16 is not divisible by d·m = 3·1 = 3 (3 data-parallel replicas"));
  EXPECT_FALSE(fs::exists(out));
}

TEST_F(Cli, BackupWorkersUnderMpirunDropExactlyBPushesPerStep) {
  // 1 shard + 3 workers, b = 1, world rank 3 (worker 2) three times slow:
  // every step exactly one push is dropped (one chunk), whoever was late.
  const std::string out = (dir_ / "run").string();
  const Outcome o = run(std::string(PSAR_MPIRUN) + " --allow-run-as-root --oversubscribe -np 4 " +
                        PSAR_BIN + " train " + config(kGood) + " --out " + out +
                        " --set sync.backend=ps --set train.batch_size=48 --set train.steps=12"
                        " --set ps.backup_workers=1 --set hetero.slow_ranks=[3]"
                        " --set hetero.slow_factor=3");
  ASSERT_EQ(o.code, 0) << o.output;
  std::ifstream in(dir_ / "run" / "steps.csv");
  std::string line;
  std::getline(in, line);
  ASSERT_THAT(line, HasSubstr(",injected_s,pushes_dropped,workers"));
  int rows = 0;
  long dropped = 0;
  while (std::getline(in, line)) {
    std::vector<std::string> cells;
    std::stringstream ss(line);
    for (std::string c; std::getline(ss, c, ',');) cells.push_back(c);
    ASSERT_EQ(cells.size(), 16u) << line;
    EXPECT_EQ(cells[14] + "," + cells[15], "0,none") << line;  // the modes' defaults
    EXPECT_EQ(cells[13], "2") << line;  // each clock averaged N = 3 - b workers
    const double compute = std::stod(cells[5]), injected = std::stod(cells[11]);
    if (cells[0] == "2") {
      EXPECT_NEAR(injected, 2 * compute, 1e-8 * compute) << line;
    } else {
      EXPECT_EQ(injected, 0) << line;
    }
    dropped += std::stol(cells[12]);
    ++rows;
  }
  EXPECT_EQ(rows, 36);
  EXPECT_EQ(dropped, 12);
}

TEST_F(Cli, AHeteroRankOutsideTheWorldIsRejected) {
  const std::string out = (dir_ / "run").string();
  const Outcome o = run(std::string(PSAR_MPIRUN) + " --allow-run-as-root --oversubscribe -np 2 " +
                        PSAR_BIN + " train " + config(kGood) + " --out " + out +
                        " --set hetero.slow_ranks=[2]");
  EXPECT_NE(o.code, 0);
  EXPECT_THAT(o.output, HasSubstr("hetero.slow_ranks: rank 2 is outside the world [0, 2)"));
  EXPECT_FALSE(fs::exists(out));
}

TEST_F(Cli, ARankGivenADifferentSetEndsTheJobNamingTheRankAndTheKey) {
  // Two ranks with the config as is, a third with another learning rate (MPMD).
  const std::string out = (dir_ / "run").string();
  const std::string train = std::string(PSAR_BIN) + " train " + config(kGood) + " --out " + out;
  const Outcome o = run(std::string(PSAR_MPIRUN) + " --allow-run-as-root --oversubscribe -np 2 " +
                        train + " : -np 1 " + train + " --set optimizer.lr=0.5");
  EXPECT_NE(o.code, 0);
  EXPECT_THAT(o.output, HasSubstr("start-up agreement: rank 2 differs from rank 0 in the "
                                  "configuration: optimizer.lr = 0.1 in rank 0, 0.5 in rank 2"));
  EXPECT_FALSE(fs::exists(out));
}

TEST_F(Cli, ARankGivenAnotherOutEndsTheJobBeforeAnythingIsWritten) {
  const std::string train = std::string(PSAR_BIN) + " train " + config(kGood) + " --out ";
  const std::string a = (dir_ / "a").string(), b = (dir_ / "b").string();
  const Outcome o = run(std::string(PSAR_MPIRUN) + " --allow-run-as-root --oversubscribe -np 2 " +
                        train + a + " : -np 1 " + train + b);
  EXPECT_EQ(o.code, 2);
  EXPECT_THAT(o.output, HasSubstr("start-up agreement: rank 2 differs from rank 0 in the run "
                                  "directory (--out): '" + a + "' on rank 0, '" + b + "' on rank 2"));
  EXPECT_FALSE(fs::exists(a));
  EXPECT_FALSE(fs::exists(b));
}

TEST_F(Cli, ResumeNeedsACheckpoint) {
  ASSERT_EQ(train(kGood, "--quiet").code, 0);
  const Outcome o = run(std::string(PSAR_BIN) + " train " + config(kGood) + " --resume " +
                        (dir_ / "run").string());
  EXPECT_EQ(o.code, 2);
  EXPECT_THAT(o.output, HasSubstr("no complete checkpoint"));
}

// The row of a --volume-csv file whose first column is `algo`, as column → value.
std::map<std::string, std::string> csv_row(const fs::path& path, const std::string& algo) {
  std::ifstream in(path);
  std::string header, line;
  std::getline(in, header);
  auto split = [](const std::string& text) {
    std::vector<std::string> out;
    std::stringstream ss(text);
    for (std::string cell; std::getline(ss, cell, ',');) out.push_back(cell);
    return out;
  };
  const auto names = split(header);
  while (std::getline(in, line)) {
    const auto cells = split(line);
    if (cells.empty() || cells[0] != algo) continue;
    std::map<std::string, std::string> row;
    for (size_t i = 0; i < names.size() && i < cells.size(); ++i) row[names[i]] = cells[i];
    return row;
  }
  ADD_FAILURE() << "no row '" << algo << "' in " << path;
  return {};
}

// The textbook volumes of docs/theory.md through the benchmarks' --volume-csv: exact byte counts.
TEST_F(Cli, BenchVolumeCsvsCountExactlyTheFormulaBytes) {
  const std::string mpirun = std::string(PSAR_MPIRUN) + " --allow-run-as-root --oversubscribe -np 3 ";
  // Two workers and one shard; M = 256 KiB in 64 KiB chunks (4 per push, 4 per pull).
  const fs::path ps = dir_ / "ps.csv";
  Outcome o = run(mpirun + PSAR_BIN + " bench ps --servers 1 -b 256K -e 256K -n 1 -w 0 "
                  "--set ps.chunk_bytes=64K --volume-csv " + ps.string());
  ASSERT_EQ(o.code, 0) << o.output;
  auto row = csv_row(ps, "ps");
  EXPECT_EQ(row["ranks"], "2");
  EXPECT_EQ(row["bytes_sent_total"], std::to_string(2 * 2 * 262144));   // 2·N·M
  EXPECT_EQ(row["bytes_sent_max_rank"], std::to_string(2 * 262144));    // the shard: N·M
  EXPECT_EQ(row["messages_sent_total"], std::to_string(2 * 2 * 4));     // N·chunks each way
  // Three ranks, M = 12 KiB: ring 2(N−1)·M, naive N(N−1)·M.
  const fs::path ar = dir_ / "ar.csv";
  o = run(mpirun + PSAR_BIN + " bench allreduce --algos ring,naive -b 12K -e 12K -n 1 -w 0 "
          "--volume-csv " + ar.string());
  ASSERT_EQ(o.code, 0) << o.output;
  EXPECT_EQ(csv_row(ar, "ring")["bytes_sent_total"], std::to_string(2 * 2 * 12288));
  EXPECT_EQ(csv_row(ar, "naive")["bytes_sent_total"], std::to_string(3 * 2 * 12288));
  EXPECT_EQ(csv_row(ar, "naive")["bytes_sent_max_rank"], std::to_string(2 * 12288));
  // ZeRO's collectives (--zero), each checked against the double-precision
  // sum (exit 0), in layers of 4K — each inside one owner's piece of 4K: a
  // reduce-scatter and an all-gather move the allreduce's (N−1)·M in all,
  // stage 3's extra all-gather half of it again, however the layers fall.
  const fs::path zero = dir_ / "zero.csv";
  o = run(mpirun + PSAR_BIN + " bench allreduce --algos ring --zero 1,2,3 -b 12K -e 12K -n 1 "
          "-w 0 --set sync.bucket_bytes=4K --volume-csv " + zero.string());
  ASSERT_EQ(o.code, 0) << o.output;
  EXPECT_THAT(o.output, HasSubstr("Out of bounds values : 0 OK"));
  for (const char* stage : {"ring zero1", "ring zero2"})
    EXPECT_EQ(csv_row(zero, stage)["bytes_sent_total"], std::to_string(2 * 2 * 12288)) << stage;
  EXPECT_EQ(csv_row(zero, "ring zero3")["bytes_sent_total"], std::to_string(3 * 2 * 12288));
  EXPECT_EQ(csv_row(zero, "ring zero3")["bytes_sent_max_rank"], std::to_string(3 * 8192));
}

TEST_F(Cli, BenchAllreduceZeroRejectsWhatItCannotRun) {
  Outcome o = run(std::string(PSAR_BIN) + " bench allreduce --zero 4");
  EXPECT_EQ(o.code, 2);
  EXPECT_THAT(o.output, HasSubstr("--zero takes stages 1, 2 and 3, got 4"));
  o = run(std::string(PSAR_BIN) + " bench allreduce --algos tree --zero 1");
  EXPECT_EQ(o.code, 2);
  EXPECT_THAT(o.output, HasSubstr("tree"));
}

TEST_F(Cli, BenchPsRejectsWhatItCannotRun) {
  Outcome o = run(std::string(PSAR_BIN) + " bench ps --servers 1");
  EXPECT_EQ(o.code, 2);
  EXPECT_THAT(o.output, HasSubstr("no --servers value leaves a worker among 1 ranks"));
  o = run(std::string(PSAR_BIN) + " bench ps -b 6");
  EXPECT_EQ(o.code, 2);
  EXPECT_THAT(o.output, HasSubstr("-b must be a positive multiple of 4 bytes"));
  o = run(std::string(PSAR_BIN) + " bench ps --volume-csv");
  EXPECT_EQ(o.code, 2);
  EXPECT_THAT(o.output, HasSubstr("--volume-csv needs a value"));
}

TEST_F(Cli, UnknownCommandAndMissingSetValue) {
  EXPECT_EQ(run(std::string(PSAR_BIN) + " trian").code, 2);
  EXPECT_EQ(run(std::string(PSAR_BIN) + " train " + config(kGood) + " --set").code, 2);
}

}  // namespace
