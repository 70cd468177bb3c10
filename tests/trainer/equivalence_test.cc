// Data-parallel equivalence, in-process: N ranks training on slices of the
// same global batch end with the parameters of 1 rank training on all of it
// (‖Δθ‖/‖θ‖ ≤ 1e-5 after 20 steps), for every allreduce algorithm that runs
// over Comm point-to-point. (`mpi` needs mpirun: trainer_mpi_test covers it.)

#include <gtest/gtest.h>

#include <mutex>

#include "allreduce/allreducer.h"
#include "comm/inproc_comm.h"
#include "core/errors.h"
#include "core/ops.h"
#include "train_fixture.h"
#include "trainer/trainer.h"

namespace psar {
namespace {

using testing::relative_difference;
using testing::small_mlp_config;

std::vector<float> train_inproc(int ranks, const Config& cfg, std::vector<double>* losses = nullptr) {
  std::vector<std::vector<float>> params(static_cast<size_t>(ranks));
  std::mutex mu;
  run_inproc(ranks, [&](Comm& c) {
    TrainResult r = train(c, cfg);
    std::lock_guard<std::mutex> lock(mu);
    params[static_cast<size_t>(c.rank())] = std::move(r.params);
    if (c.rank() == 0 && losses) *losses = r.losses;
  });
  // Replicas never drift apart: every rank holds rank 0's bits (compared
  // once all have finished, whichever finished first).
  EXPECT_FALSE(params[0].empty());
  for (int r = 1; r < ranks; ++r)
    EXPECT_EQ(params[static_cast<size_t>(r)], params[0]) << "rank " << r;
  return params[0];
}

class Equivalence : public ::testing::TestWithParam<std::string> {
 protected:
  static void SetUpTestSuite() { ops::set_blas_threads(1); }
};

TEST_P(Equivalence, FourRanksMatchOneRankAfterTwentySteps) {
  const std::string algo = GetParam();
  const auto serial = train_inproc(1, small_mlp_config(algo));
  const auto parallel = train_inproc(4, small_mlp_config(algo));
  ASSERT_EQ(serial.size(), parallel.size());
  EXPECT_LE(relative_difference(serial, parallel), 1e-5) << algo;
  // The check can fail: training moved the parameters away from their start.
  const auto start = train_inproc(1, small_mlp_config(algo, 1));
  EXPECT_GT(relative_difference(serial, start), 1e-2);
}

TEST_P(Equivalence, ThreeRanksAndAdamToo) {
  const std::string algo = GetParam();
  const auto serial = train_inproc(1, small_mlp_config(algo, 20, "adam"));
  const auto parallel = train_inproc(3, small_mlp_config(algo, 20, "adam"));
  EXPECT_LE(relative_difference(serial, parallel), 1e-5) << algo;
}

std::vector<std::string> point_to_point_algorithms() {
  std::vector<std::string> names;
  for (const auto& n : allreducer_names())
    if (n != "mpi") names.push_back(n);
  return names;
}

INSTANTIATE_TEST_SUITE_P(Algorithms, Equivalence, ::testing::ValuesIn(point_to_point_algorithms()),
                         [](const auto& info) { return info.param; });

TEST(Trainer, LossDecreasesOnTheSyntheticTask) {
  std::vector<double> losses;
  train_inproc(2, small_mlp_config(point_to_point_algorithms().front(), 60), &losses);
  ASSERT_EQ(losses.size(), 60u);
  EXPECT_LT(losses.back(), 0.5 * losses.front());
}

TEST(Trainer, BatchNotDivisibleByRanksIsAConfigError) {
  const Config cfg = small_mlp_config(point_to_point_algorithms().front());
  EXPECT_THROW(run_inproc(5, [&](Comm& c) { train(c, cfg); }), ConfigError);
}

TEST(Trainer, TheMpiBackendOnThreadsIsAClearConfigError) {
  const Config cfg = small_mlp_config("mpi", 1);
  try {
    run_inproc(2, [&](Comm& c) { train(c, cfg); });
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("needs the MPI transport"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace psar
