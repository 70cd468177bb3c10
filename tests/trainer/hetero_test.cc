// Injected heterogeneity (trainer/hetero.h): the delays are the seeded
// draws, recomputed here from the Philox block; a training run records
// every one in steps.csv; a 3x slow rank under BSP sets every rank's step
// time; bad hetero keys are ConfigErrors naming the key.

#include "trainer/hetero.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>

#include <gtest/gtest.h>

#include "comm/netem.h"
#include "core/rng.h"
#include "core/timer.h"
#include "tests/trainer/train_fixture.h"

namespace psar {
namespace {

using testing::small_mlp_config;
using testing::train_config_error;

Config hetero_config(const std::vector<std::string>& overrides) {
  return Config::load_string("data: {dataset: synthetic}\n", config_schema(), overrides);
}

// The test's own reading of the definition in trainer/hetero.h.
double reference_delay(const std::string& dist, uint64_t seed, int rank, int64_t step, double mean,
                       double alpha) {
  const uint32_t word = Philox::block(seed, fnv1a("hetero.delay") + rank, step)[0];
  const double u = (word + 0.5) / 4294967296.0;
  if (dist == "fixed") return mean;
  if (dist == "exponential") return mean * -std::log(u);
  const double xm = mean * (alpha - 1) / alpha;  // pareto
  return xm / std::pow(u, 1 / alpha);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

TEST(Hetero, DelaysAreTheSeededDrawsOfEachRanksOwnStream) {
  for (const std::string dist : {"fixed", "exponential", "pareto"}) {
    const HeteroPlan plan = HeteroPlan::from_config(
        hetero_config({"hetero.seed=11", "hetero.delay.distribution=" + dist,
                       "hetero.delay.mean=4ms", "hetero.delay.pareto_shape=1.5"}),
        8);
    for (int r = 0; r < 8; ++r)
      for (int64_t k = 0; k < 50; ++k)
        ASSERT_DOUBLE_EQ(plan.delay(r, k), reference_delay(dist, 11, r, k, 4e-3, 1.5))
            << dist << " rank " << r << " step " << k;
  }
}

// The quantile at p of each distribution, closed forms: exponential
// −m ln(1 − p), pareto x_m (1 − p)^(−1/α).
double quantile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(p * static_cast<double>(v.size() - 1))];
}

TEST(Hetero, DrawsFollowTheirDistributionsQuantiles) {
  const int n = 20001;
  const double m = 1e-2, alpha = 2.5, xm = m * (alpha - 1) / alpha;
  for (const std::string dist : {"exponential", "pareto"}) {
    const HeteroPlan plan = HeteroPlan::from_config(
        hetero_config({"hetero.delay.distribution=" + dist, "hetero.delay.mean=10ms",
                       "hetero.delay.pareto_shape=2.5"}),
        1);
    std::vector<double> draws;
    for (int64_t k = 0; k < n; ++k) draws.push_back(plan.delay(0, k));
    for (const double p : {0.5, 0.9, 0.99}) {
      const double want =
          dist == "exponential" ? -m * std::log(1 - p) : xm * std::pow(1 - p, -1 / alpha);
      EXPECT_NEAR(quantile(draws, p), want, 0.08 * want) << dist << " quantile " << p;
    }
  }
}

TEST(Hetero, OnlyChosenRanksAreSlowedOrDelayed) {
  const HeteroPlan plan =
      HeteroPlan::from_config(hetero_config({"hetero.slow_ranks=[1]", "hetero.slow_factor=3",
                                             "hetero.delay.distribution=fixed",
                                             "hetero.delay.mean=2ms", "hetero.delay.ranks=[2]"}),
                              4);
  EXPECT_DOUBLE_EQ(plan.injected(0, 5, 0.1), 0);
  EXPECT_DOUBLE_EQ(plan.injected(1, 5, 0.1), 0.2);
  EXPECT_DOUBLE_EQ(plan.injected(2, 5, 0.1), 2e-3);
  EXPECT_FALSE(HeteroPlan::from_config(hetero_config({}), 4).active());
}

TEST(Hetero, BadKeysAreConfigErrorsNamingTheKey) {
  const auto error = [](const std::vector<std::string>& overrides, int world = 4) {
    try {
      HeteroPlan::from_config(hetero_config(overrides), world);
      net_model_of_rank(hetero_config(overrides), 0, world);
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(error({"hetero.slow_ranks=[4]"}).find("hetero.slow_ranks: rank 4 is outside the world"),
            std::string::npos);
  EXPECT_NE(error({"hetero.slow_ranks=[-1]"}).find("hetero.slow_ranks"), std::string::npos);
  EXPECT_NE(error({"hetero.delay.distribution=fixed", "hetero.delay.ranks=[0, 9]"})
                .find("hetero.delay.ranks: rank 9"),
            std::string::npos);
  EXPECT_NE(error({"hetero.slow_factor=0.5"}).find("hetero.slow_factor"), std::string::npos);
  EXPECT_NE(error({"hetero.delay.distribution=pareto", "hetero.delay.pareto_shape=1"})
                .find("hetero.delay.pareto_shape"),
            std::string::npos);
  EXPECT_NE(error({"hetero.delay.mean=1ms"}).find("hetero.delay.distribution is none"),
            std::string::npos);
  EXPECT_NE(error({"net.bandwidth=1Gbit", "hetero.nic_ranks=[5]", "hetero.nic_bandwidth=100Mbit"})
                .find("hetero.nic_ranks: rank 5 is outside"),
            std::string::npos);
  EXPECT_NE(error({"hetero.nic_ranks=[1]", "hetero.nic_bandwidth=100Mbit"}).find("net.bandwidth"),
            std::string::npos);
  EXPECT_NE(error({"net.bandwidth=1Gbit", "hetero.nic_ranks=[1]"}).find("hetero.nic_bandwidth"),
            std::string::npos);
  EXPECT_EQ(error({"hetero.slow_ranks=[3]"}), "no error");  // the control
  // In a run: before any work, from every rank.
  Config cfg = small_mlp_config("ring", 2);
  cfg.set("hetero.slow_ranks=[3]");
  EXPECT_NE(
      train_config_error(3, cfg).find("hetero.slow_ranks: rank 3 is outside the world [0, 3)"),
      std::string::npos);
}

TEST(Hetero, ChosenRanksGetTheirOwnNicBandwidth) {
  const Config cfg = hetero_config(
      {"net.bandwidth=1Gbit", "hetero.nic_ranks=[0, 2]", "hetero.nic_bandwidth=100Mbit"});
  EXPECT_DOUBLE_EQ(net_model_of_rank(cfg, 0, 3).bandwidth, 100e6 / 8);
  EXPECT_DOUBLE_EQ(net_model_of_rank(cfg, 1, 3).bandwidth, 1e9 / 8);
  EXPECT_DOUBLE_EQ(net_model_of_rank(cfg, 2, 3).bandwidth, 100e6 / 8);
  // What each rank's communicator gets, the one the trainer and the PS use.
  std::vector<double> got(3);
  run_inproc(3, [&](Comm& comm) {
    apply_network_model(comm, cfg);
    got[static_cast<size_t>(comm.rank())] = comm.network()->model().bandwidth;
  });
  EXPECT_EQ(got, (std::vector<double>{100e6 / 8, 1e9 / 8, 100e6 / 8}));
}

// steps.csv as rank -> step -> column -> value; the one text column (the
// run's recompute mode) is left out.
using Rows = std::map<int, std::map<int64_t, std::map<std::string, double>>>;
Rows read_steps(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  std::vector<std::string> header;
  for (std::stringstream ss(line); std::getline(ss, line, ',');) header.push_back(line);
  Rows rows;
  while (std::getline(in, line)) {
    std::map<std::string, double> row;
    std::stringstream ss(line);
    std::string cell;
    for (size_t c = 0; std::getline(ss, cell, ','); ++c)
      if (header.at(c) != "recompute") row[header.at(c)] = std::stod(cell);
    rows[static_cast<int>(row["rank"])][static_cast<int64_t>(row["step"])] = row;
  }
  return rows;
}

std::string temp_dir(const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() /
                   (name + "_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
                    "_" + std::to_string(now_seconds()));
  std::filesystem::remove_all(dir);
  return dir.string();
}

TEST(Hetero, EveryInjectedDelayIsInStepsCsvAndLeavesTheMathAlone) {
  const std::string dir = temp_dir("psar_hetero_csv");
  const int steps = 6;
  Config cfg = small_mlp_config("ring", steps);
  const auto run = [&](const Config& c, const std::string& out) {
    std::vector<float> params;
    run_inproc(3, [&](Comm& comm) {
      TrainOptions o;
      o.out_dir = out;
      const TrainResult r = train(comm, c, o);
      if (comm.rank() == 0) params = r.params;
    });
    return params;
  };
  const std::vector<float> plain = run(cfg, "");
  cfg.set("train.trace=true");
  for (const std::string a : {"hetero.seed=5", "hetero.slow_ranks=[1]", "hetero.slow_factor=3",
                              "hetero.delay.distribution=exponential", "hetero.delay.mean=3ms",
                              "hetero.delay.ranks=[0, 2]"})
    cfg.set(a);
  const std::vector<float> slowed = run(cfg, dir);
  EXPECT_EQ(plain, slowed);  // a delay changes when, never what

  const Rows rows = read_steps(dir + "/steps.csv");
  ASSERT_EQ(rows.size(), 3u);
  for (const auto& [rank, by_step] : rows) {
    ASSERT_EQ(by_step.size(), static_cast<size_t>(steps));
    for (const auto& [step, row] : by_step) {
      const double injected = row.at("injected_s");
      if (rank == 1) {
        EXPECT_NEAR(injected, 2 * row.at("compute_s"), 1e-8 * row.at("compute_s"));
      } else {
        EXPECT_EQ(injected, reference_delay("exponential", 5, rank, step - 1, 3e-3, 0))
            << "rank " << rank << " step " << step;
      }
      EXPECT_GE(row.at("step_s"), row.at("compute_s") + injected);
    }
  }
  // The trace: one "injected" span per row, with the row's exact value.
  std::ifstream trace(dir + "/trace.json");
  const std::regex span(
      R"re("name":"injected".*"pid":(\d+).*"args":\{"step":(\d+),"injected_s":([^}]+)\})re");
  int spans = 0;
  for (std::string line; std::getline(trace, line);) {
    std::smatch m;
    if (!std::regex_search(line, m, span)) continue;
    ++spans;
    EXPECT_EQ(std::stod(m[3]), rows.at(std::stoi(m[1])).at(std::stoll(m[2])).at("injected_s"))
        << line;
  }
  EXPECT_EQ(spans, 3 * steps);
  std::filesystem::remove_all(dir);
}

// The timed synthetic workload: compute is a wait of a known length, so the
// check does not depend on how busy the host's cores are.
Config timed_config(int steps) {
  return Config::load_string(
      "model: {type: synthetic_stages, layers: 2, forward_time: 4ms, backward_time: 4ms, "
      "weight_grad_time: 4ms, activation_bytes: 1K}\n"
      "data: {dataset: synthetic, synthetic_samples: 256}\n"
      "train: {steps: " +
          std::to_string(steps) +
          ", batch_size: 48, log_every: 1000}\n"
          "sync: {backend: ring, timeout: 20s}\n",
      config_schema());
}

// The fast workers' median step time over 3 x their median compute plus the
// slow worker's median sync (its sync never waits for anyone). Worker 1 is
// the slow one: world rank 1 of the ring's 3, world rank 2 of the PS's 1
// shard + 3 workers.
double step_over_prediction(const std::string& backend, bool slow,
                            const std::vector<std::string>& extra = {}) {
  const int steps = 12, ranks = backend == "ps" ? 4 : 3;
  const std::string dir = temp_dir("psar_hetero_bsp");
  Config cfg = timed_config(steps);
  cfg.set("sync.backend=" + backend);
  if (slow) {
    cfg.set("hetero.slow_ranks=[" + std::to_string(ranks - 2) + "]");
    cfg.set("hetero.slow_factor=3");
  }
  for (const auto& a : extra) cfg.set(a);
  run_inproc(ranks, [&](Comm& comm) {
    TrainOptions o;
    o.out_dir = dir;
    train(comm, cfg, o);
  });
  const Rows rows = read_steps(dir + "/steps.csv");
  std::filesystem::remove_all(dir);
  std::vector<double> fast_step, fast_compute, slow_sync;
  for (const auto& [rank, by_step] : rows)
    for (const auto& [step, row] : by_step) {
      if (step == 1) continue;  // the first step also waits for the others' start
      if (rank == 1) {
        slow_sync.push_back(row.at("sync_s"));
      } else {
        fast_step.push_back(row.at("step_s"));
        fast_compute.push_back(row.at("compute_s"));
      }
    }
  return median(fast_step) / (3 * median(fast_compute) + median(slow_sync));
}

// Under BSP a 3x slow worker sets everyone's step time: within 10 % of the
// prediction. Without the slow worker the same prediction is 3x too long
// (the control: the check can fail).
class SlowRank : public ::testing::TestWithParam<std::string> {};

TEST_P(SlowRank, ThreeTimesSlowRankSetsTheBspStepTime) {
  EXPECT_NEAR(step_over_prediction(GetParam(), true), 1.0, 0.10);
  EXPECT_LT(step_over_prediction(GetParam(), false), 0.5);
}

INSTANTIATE_TEST_SUITE_P(Backends, SlowRank, ::testing::Values("ring", "ps"));

// With one backup worker the fast two no longer wait for the slow one.
TEST(BackupWorkers, TheFastWorkersDoNotWaitForTheSlowOne) {
  EXPECT_LT(step_over_prediction("ps", true, {"ps.backup_workers=1"}), 0.6);
}

// Backup workers in a training run: 1 server and 3 workers, b = 1, worker 2
// (world rank 3) four times slow. Every clock drops exactly b pushes (one
// shard of one chunk: the small MLP fits one ps.chunk_bytes), whoever was
// late; the run ends.
TEST(BackupWorkers, EveryClockDropsBPushesInTraining) {
  const std::string dir = temp_dir("psar_backup_train");
  const int steps = 10;
  Config cfg = small_mlp_config("ps", steps);
  for (const std::string a :
       {"ps.backup_workers=1", "hetero.slow_ranks=[3]", "hetero.slow_factor=4"})
    cfg.set(a);
  run_inproc(4, [&](Comm& comm) {
    TrainOptions o;
    o.out_dir = dir;
    train(comm, cfg, o);
  });
  const Rows rows = read_steps(dir + "/steps.csv");
  std::filesystem::remove_all(dir);
  ASSERT_EQ(rows.size(), 3u);
  double dropped = 0;
  for (const auto& [rank, by_step] : rows)
    for (const auto& [step, row] : by_step) {
      dropped += row.at("pushes_dropped");
      EXPECT_EQ(row.at("workers"), 2) << "rank " << rank << " step " << step;  // N, not N + b
    }
  EXPECT_EQ(dropped, steps);
}

// Training `backend` for 2 steps on `ranks` ranks with `sets` is refused
// before any work with a ConfigError whose message holds `what`.
void expect_refused(int ranks, const std::string& backend, const std::vector<std::string>& sets,
                    const std::string& what) {
  Config cfg = small_mlp_config(backend, 2);
  for (const std::string& s : sets) cfg.set(s);
  const std::string message = train_config_error(ranks, cfg);
  EXPECT_NE(message.find(what), std::string::npos) << "got: " << message;
}

TEST(BackupWorkers, BadCountsAndBackendsAreConfigErrorsNamingTheKey) {
  expect_refused(3, "ring", {"ps.backup_workers=1"},
                 "ps.backup_workers: sync.backend ring cannot spare");
  // 1 server + 2 workers: N = 1.
  expect_refused(3, "ps", {"ps.backup_workers=1"}, "ps.backup_workers: b = 1 of 2 workers");
  expect_refused(3, "mpi", {"ps.on_worker_failure=continue"},
                 "ps.on_worker_failure: continue needs sync.backend ps");
  expect_refused(4, "ps", {"ps.backup_workers=1", "ps.consistency=ssp"},
                 "ps.backup_workers needs ps.consistency: bsp");
}

// The injected failure and continue's own refusals, before any work starts.
TEST(WorkerFailure, BadKillsAndContinueSettingsAreConfigErrorsNamingTheKey) {
  expect_refused(3, "ring", {"hetero.kill_rank=3"},
                 "hetero.kill_rank: rank 3 is outside the world [0, 3)");
  expect_refused(3, "ring", {"hetero.kill_rank=1", "hetero.kill_step=2"},
                 "hetero.kill_step 2 is past the run's 2 steps");
  expect_refused(3, "ps", {"ps.on_worker_failure=continue", "sync.timeout=5s", "ps.timeout=5s"},
                 "continue needs sync.timeout (5 s) below ps.timeout (5 s)");
  expect_refused(3, "ps",
                 {"ps.on_worker_failure=continue", "sync.timeout=1s", "ps.timeout=2s",
                  "train.checkpoint_every=1"},
                 "train.checkpoint_every with ps.on_worker_failure: continue");
}

}  // namespace
}  // namespace psar
