// The CNN through the real trainer, in-process: after 10 steps plain data
// parallelism and the hybrid scheme (conv data-parallel, FC tensor-parallel)
// at n = 2 and 4 end with the serial model's parameters (‖Δθ‖/‖θ‖ ≤ 1e-5)
// and its loss curve (1e-5 relative per step); the per-axis floats in
// axes.csv equal the closed forms of docs/cnn.md exactly; bad hybrid and
// conv configurations are ConfigErrors naming their keys.

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "comm/inproc_comm.h"
#include "core/errors.h"
#include "tests/trainer/cnn_fixture.h"
#include "tests/trainer/train_fixture.h"
#include "trainer/trainer.h"

namespace psar {
namespace {

using testing::cnn_config;

std::vector<TrainResult> train_ranks(int n, const Config& cfg, const std::string& dir = "") {
  std::vector<TrainResult> results(static_cast<size_t>(n));
  run_inproc(n, [&](Comm& c) { results[static_cast<size_t>(c.rank())] = train(c, cfg, {dir}); });
  return results;
}

struct Scheme {
  bool hybrid;
  int n;
  bool replicated = false;  // parallel.hybrid_fc: replicated
};

Config scheme_config(const Scheme& s) {
  return cnn_config(s.hybrid, {std::string("parallel.hybrid_fc=") +
                               (s.replicated ? "replicated" : "tensor")});
}

std::string scheme_name(const Scheme& s) {
  return std::string(s.hybrid ? (s.replicated ? "hybrid_replicated" : "hybrid") : "dp") + "_n" +
         std::to_string(s.n);
}

class CnnEquivalence : public ::testing::TestWithParam<Scheme> {};

TEST_P(CnnEquivalence, EndsWhereTheSerialModelEnds) {
  const Scheme s = GetParam();
  const TrainResult serial = train_ranks(1, cnn_config(false))[0];
  ASSERT_EQ(serial.losses.size(), 10u);
  // The comparison means something: the 10 steps moved every part of the
  // model well beyond the tolerance (after 1 step vs after 10).
  const TrainResult one = train_ranks(1, cnn_config(false, {"train.steps=1"}))[0];
  EXPECT_GT(testing::relative_difference(serial.params, one.params), 1e-2) << "training moved";
  const auto conv_end = static_cast<std::ptrdiff_t>(testing::kCnnConvParams);
  EXPECT_GT(testing::relative_difference({serial.params.begin(), serial.params.begin() + conv_end},
                                         {one.params.begin(), one.params.begin() + conv_end}),
            1e-2)
      << "the convolutions trained";
  const auto ranks = train_ranks(s.n, scheme_config(s));
  for (int r = 0; r < s.n; ++r) {
    const TrainResult& got = ranks[static_cast<size_t>(r)];
    ASSERT_EQ(got.params.size(), serial.params.size());
    EXPECT_LE(testing::relative_difference(serial.params, got.params), 1e-5) << "rank " << r;
    EXPECT_EQ(got.params, ranks[0].params) << "the ranks' gathered models differ (rank " << r << ")";
    if (s.hybrid) {  // every rank holds the whole batch's loss
      ASSERT_EQ(got.losses.size(), serial.losses.size());
      for (size_t k = 0; k < got.losses.size(); ++k)
        EXPECT_NEAR(got.losses[k], serial.losses[k], 1e-5 * serial.losses[k]) << "step " << k + 1;
    }
  }
  EXPECT_NEAR(ranks[0].final_loss, serial.final_loss, 1e-5 * serial.final_loss);
}

INSTANTIATE_TEST_SUITE_P(Schemes, CnnEquivalence,
                         ::testing::Values(Scheme{false, 2}, Scheme{false, 4}, Scheme{true, 2},
                                           Scheme{true, 4}, Scheme{true, 4, true}),
                         [](const auto& info) { return scheme_name(info.param); });

TEST(CnnEquivalence, HybridWithTwoMicrobatchesAndMpiSync) {
  const TrainResult serial = train_ranks(1, cnn_config(false))[0];
  const auto ranks =
      train_ranks(2, cnn_config(true, {"parallel.microbatches=2", "sync.backend=tree"}));
  EXPECT_LE(testing::relative_difference(serial.params, ranks[0].params), 1e-5);
}

// ---- axes.csv --------------------------------------------------------------

class CnnAxes : public ::testing::TestWithParam<Scheme> {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("psar_cnn_" + std::to_string(::getpid()) + "_" + scheme_name(GetParam()));
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::vector<std::map<std::string, std::string>> csv(const std::string& file) const {
    return testing::read_csv_rows(dir_ / file);
  }
  static int64_t num(const std::map<std::string, std::string>& row, const std::string& key) {
    return std::stoll(row.at(key));
  }
  std::filesystem::path dir_;
};

TEST_P(CnnAxes, MeasuredFloatsEqualTheForms) {
  const Scheme s = GetParam();
  train_ranks(s.n, scheme_config(s), dir_.string());
  const auto rows = csv("axes.csv");
  ASSERT_EQ(rows.size(), static_cast<size_t>(10 * s.n));
  using namespace testing;
  const int64_t B = kCnnBatch, F = kCnnFeatures;
  for (const auto& r : rows) {
    if (s.replicated) {
      // DP: the conv parameters; the features gathered; no FC collectives.
      EXPECT_EQ(num(r, "dp_floats"), kCnnConvParams);
      EXPECT_EQ(num(r, "dp_floats_formula"), kCnnConvParams);
      EXPECT_EQ(num(r, "tp_gather_floats"), B * F);
      EXPECT_EQ(num(r, "tp_gather_floats_formula"), B * F);
      EXPECT_EQ(num(r, "tp_floats"), 0);
      EXPECT_EQ(num(r, "tp_floats_formula"), 0);
    } else if (s.hybrid) {
      // DP: the conv parameters; the features gathered, B·F, and their
      // gradient back in f's all-reduce (B·F), plus g's B·classes.
      EXPECT_EQ(num(r, "dp_floats"), kCnnConvParams);
      EXPECT_EQ(num(r, "dp_floats_formula"), kCnnConvParams);
      EXPECT_EQ(num(r, "tp_gather_floats"), B * F);
      EXPECT_EQ(num(r, "tp_gather_floats_formula"), B * F);
      EXPECT_EQ(num(r, "tp_allreduces"), 2);
      EXPECT_EQ(num(r, "tp_floats"), B * F + B * kCnnClasses);
      EXPECT_EQ(num(r, "tp_floats_formula"), B * F + B * kCnnClasses);
      EXPECT_GT(num(r, "tp_bytes_sent"), 0);
    } else {
      EXPECT_EQ(num(r, "dp_floats"), kCnnConvParams + kCnnFcParams);
      EXPECT_EQ(num(r, "dp_floats_formula"), kCnnConvParams + kCnnFcParams);
      EXPECT_EQ(num(r, "tp_floats"), 0);
      EXPECT_EQ(num(r, "tp_gather_floats"), 0);
      EXPECT_EQ(num(r, "tp_bytes_sent"), 0);
    }
    // A ring all-reduce of the DP floats sends 2(n−1)/n of them per rank
    // (the ring splits n floats into n near-equal chunks).
    EXPECT_GT(num(r, "dp_bytes_sent"), 0);
    EXPECT_LE(num(r, "dp_bytes_sent"),
              2 * (num(r, "dp_floats") / s.n + 1) * (s.n - 1) * static_cast<int64_t>(sizeof(float)));
  }
}

INSTANTIATE_TEST_SUITE_P(Schemes, CnnAxes,
                         ::testing::Values(Scheme{false, 2}, Scheme{true, 2}, Scheme{true, 4},
                                           Scheme{true, 4, true}),
                         [](const auto& info) { return scheme_name(info.param); });

// ---- bad input -----------------------------------------------------------------

TEST(CnnConfig, HybridFcWidthNotDivisibleByTheRanks) {
  const std::string e =
      testing::train_config_error(4, cnn_config(true, {"model.hidden=[6]"}));
  EXPECT_NE(e.find("model.hidden"), std::string::npos) << e;
  EXPECT_NE(e.find("divisible by 4"), std::string::npos) << e;
}

TEST(CnnConfig, KernelThatDoesNotFitTheImage) {
  const std::string e = testing::train_config_error(
      1, cnn_config(false, {"model.kernel=5", "model.padding=0"}));
  EXPECT_NE(e.find("model.kernel"), std::string::npos) << e;
  EXPECT_NE(e.find("model.image"), std::string::npos) << e;
}

TEST(CnnConfig, PoolThatDoesNotFitTheImage) {
  const std::string e =
      testing::train_config_error(1, cnn_config(false, {"model.conv=[4, 8, 8, 8]"}));
  EXPECT_NE(e.find("model.pool"), std::string::npos) << e;
}

TEST(CnnConfig, ImageThatDoesNotMatchTheData) {
  const std::string e =
      testing::train_config_error(1, cnn_config(false, {"model.image=[1, 8, 9]"}));
  EXPECT_NE(e.find("model.image"), std::string::npos) << e;
}

TEST(CnnConfig, HybridBatchNotDivisibleByTheRanks) {
  const std::string e =
      testing::train_config_error(4, cnn_config(true, {"train.batch_size=18"}));
  EXPECT_NE(e.find("parallel.hybrid"), std::string::npos) << e;
}

TEST(CnnConfig, HybridNeedsAnAllreduceBackendAndNoTensorParallelism) {
  EXPECT_NE(testing::train_config_error(2, cnn_config(true, {"parallel.tp=2"}))
                .find("parallel.tp = 1"),
            std::string::npos);
  EXPECT_NE(testing::train_config_error(2, cnn_config(false, {"parallel.tp=2"}))
                .find("parallel.hybrid"),
            std::string::npos);
  EXPECT_NE(testing::train_config_error(2, cnn_config(true, {"sync.overlap=true"}))
                .find("sync.overlap"),
            std::string::npos);
  EXPECT_NE(testing::train_config_error(2, cnn_config(true, {"sync.backend=ps"}))
                .find("sync.backend ps"),
            std::string::npos);
  EXPECT_NE(testing::train_config_error(2, cnn_config(false, {"parallel.hybrid_fc=replicated"}))
                .find("parallel.hybrid: true"),
            std::string::npos);
}

}  // namespace
}  // namespace psar
