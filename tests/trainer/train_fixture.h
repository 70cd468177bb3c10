#pragma once
// Small training configurations shared by the trainer tests.

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "comm/inproc_comm.h"
#include "core/config.h"
#include "core/errors.h"
#include "trainer/schema.h"
#include "trainer/trainer.h"

namespace psar::testing {

// Trains on `ranks` in-process threads and returns the first worker's
// result, after checking that every worker returned bitwise the same whole
// model and the same test loss (a dedicated server rank returns neither).
inline TrainResult train_result(int ranks, const Config& cfg, const std::string& out = "") {
  TrainResult first;
  std::mutex mu;
  run_inproc(ranks, [&](Comm& c) {
    TrainOptions o;
    o.out_dir = out;
    TrainResult r = train(c, cfg, o);
    std::lock_guard<std::mutex> lock(mu);
    if (r.server) return;
    if (first.params.empty()) {
      first = std::move(r);
      return;
    }
    EXPECT_EQ(r.params, first.params) << "rank " << c.rank() << ": not bitwise identical";
    EXPECT_EQ(r.test_loss, first.test_loss) << "rank " << c.rank();
  });
  return first;
}

// A 2-hidden-layer MLP on seeded synthetic data: fast, and every rank of any
// world size gets whole slices of the 48-sample batch (1, 2, 3, 4, 6, 8 ranks).
inline Config small_mlp_config(const std::string& sync, int steps = 20,
                               const std::string& optimizer = "sgd") {
  return Config::load_string(
      "model: {type: mlp, hidden: [32, 16]}\n"
      "data: {dataset: synthetic, synthetic_samples: 960, synthetic_features: 20, synthetic_classes: 5}\n"
      "optimizer: {type: " + optimizer + ", lr: 0.05, momentum: 0.9}\n"
      "train: {steps: " + std::to_string(steps) + ", batch_size: 48, seed: 3, log_every: 1000}\n"
      "sync: {backend: " + sync + ", timeout: 20s}\n",
      config_schema());
}

// The MLP of the overlap tests: three hidden layers, so that small buckets
// cut it into several, 20 steps of a 48-sample batch (1, 2, 3, 4, 6, 8 ranks).
inline Config overlap_mlp_config(const std::vector<std::string>& overrides = {}) {
  return Config::load_string(
      "model: {type: mlp, hidden: [64, 32, 16]}\n"
      "data: {dataset: synthetic, synthetic_samples: 960, synthetic_features: 20, "
      "synthetic_classes: 5, test_limit: 100}\n"
      "optimizer: {type: sgd, lr: 0.05, momentum: 0.9}\n"
      "train: {steps: 20, batch_size: 48, seed: 3, log_every: 1000, eval_every: 0}\n"
      "sync: {backend: ring, timeout: 20s}\n",
      config_schema(), overrides);
}

// The ConfigError message of training `cfg` on `ranks` in-process ranks (a
// test failure if it trains).
inline std::string train_config_error(int ranks, const Config& cfg) {
  std::string message;
  std::mutex mu;
  run_inproc(ranks, [&](Comm& c) {
    try {
      train(c, cfg);
      ADD_FAILURE() << "no error";
    } catch (const ConfigError& e) {
      std::lock_guard<std::mutex> lock(mu);
      message = e.what();
    }
  }, {20.0});
  return message;
}

// A run's CSV file as rows of named fields.
inline std::vector<std::map<std::string, std::string>> read_csv_rows(
    const std::filesystem::path& file) {
  std::ifstream in(file);
  std::string line;
  std::getline(in, line);
  std::vector<std::string> names;
  std::stringstream hs(line);
  for (std::string x; std::getline(hs, x, ',');) names.push_back(x);
  std::vector<std::map<std::string, std::string>> rows;
  while (std::getline(in, line)) {
    std::stringstream ls(line);
    rows.emplace_back();
    size_t k = 0;
    for (std::string x; std::getline(ls, x, ',') && k < names.size(); ++k)
      rows.back()[names[k]] = x;
  }
  return rows;
}

// ‖a − b‖₂ / ‖a‖₂
inline double relative_difference(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (double{a[i]} - b[i]) * (double{a[i]} - b[i]);
    den += double{a[i]} * a[i];
  }
  return std::sqrt(num / den);
}

}  // namespace psar::testing
