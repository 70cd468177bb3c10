// Training on a CUDA device (train.device: cuda) against the same run on the
// CPU: the MLP of the trainer tests, 20 steps, parameters within 1e-4
// (‖Δθ‖/‖θ‖; the GEMMs sum in another order), serial and data-parallel over
// in-process ranks sharing the device (host algorithms staged through pinned
// memory, with and without overlap). Without a device the runs skip; the
// errors a user sees are checked instead.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <mutex>

#include "comm/inproc_comm.h"
#include "core/device.h"
#include "core/ops.h"
#include "tests/trainer/train_fixture.h"
#include "trainer/trainer.h"

namespace psar {
namespace {

using testing::relative_difference;

#define PSAR_NEED_CUDA()                                                              \
  do {                                                                                \
    const std::string why = device_unavailable_reason(Device::kCuda);                 \
    if (!why.empty()) GTEST_SKIP() << "CUDA check not run: " << why;                  \
  } while (0)

Config mlp(const std::string& device, const std::string& sync, const std::string& optimizer,
           const std::vector<std::string>& more = {}) {
  std::vector<std::string> overrides = {"train.device=" + device, "sync.backend=" + sync,
                                        "optimizer.type=" + optimizer};
  overrides.insert(overrides.end(), more.begin(), more.end());
  return testing::overlap_mlp_config(overrides);
}

std::vector<float> train_ranks(int ranks, const Config& cfg) {
  std::vector<float> params;
  std::mutex mu;
  run_inproc(ranks, [&](Comm& c) {
    TrainResult r = train(c, cfg);
    std::lock_guard<std::mutex> lock(mu);
    if (c.rank() == 0) params = std::move(r.params);
  });
  return params;
}

TEST(TrainCuda, WithoutADeviceTrainDeviceCudaIsAConfigErrorNamingIt) {
  if (device_unavailable_reason(Device::kCuda).empty()) GTEST_SKIP() << "a CUDA device is present";
  const std::string error = testing::train_config_error(1, mlp("cuda", "ring", "sgd"));
  EXPECT_THAT(error, ::testing::HasSubstr("train.device"));
  EXPECT_THAT(error, ::testing::HasSubstr(cuda_built() ? "no CUDA device" : "without CUDA"));
}

TEST(TrainCuda, UnknownDeviceIsRejectedByTheSchema) {
  EXPECT_THROW(mlp("gpu", "ring", "sgd"), ConfigError);
}

TEST(TrainCuda, WhatDoesNotRunOnCudaYetIsAConfigErrorNamingIt) {
  PSAR_NEED_CUDA();
  const std::string error =
      testing::train_config_error(1, mlp("cuda", "ring", "sgd", {"train.checkpoint_every=5"}));
  EXPECT_THAT(error, ::testing::HasSubstr("train.device"));
  EXPECT_THAT(error, ::testing::HasSubstr("checkpoint"));
}

class TrainCudaOptimizers : public ::testing::TestWithParam<std::string> {
 protected:
  static void SetUpTestSuite() { ops::set_blas_threads(1); }
};

TEST_P(TrainCudaOptimizers, SerialMlpMatchesTheCpuRun) {
  PSAR_NEED_CUDA();
  const auto cpu = train_ranks(1, mlp("cpu", "ring", GetParam()));
  const auto cuda = train_ranks(1, mlp("cuda", "ring", GetParam()));
  ASSERT_EQ(cpu.size(), cuda.size());
  EXPECT_LE(relative_difference(cpu, cuda), 1e-4);
  // Training moved the parameters: the comparison can fail.
  const auto start = train_ranks(1, mlp("cpu", "ring", GetParam(), {"train.steps=1"}));
  EXPECT_GT(relative_difference(cpu, start), 1e-2);
}

// Two ranks on one device: ring and tree staged through host memory, with and
// without overlap, against one CPU rank on the whole batch.
TEST_P(TrainCudaOptimizers, DataParallelHostAlgorithmsStagedMatchTheCpuRun) {
  PSAR_NEED_CUDA();
  const auto cpu = train_ranks(1, mlp("cpu", "ring", GetParam()));
  for (const std::string algo : {"ring", "tree", "butterfly", "naive"})
    for (const std::string overlap : {"false", "true"}) {
      const auto cuda = train_ranks(
          2, mlp("cuda", algo, GetParam(), {"sync.overlap=" + overlap, "sync.bucket_bytes=4K"}));
      EXPECT_LE(relative_difference(cpu, cuda), 1e-4) << algo << " overlap " << overlap;
    }
}

INSTANTIATE_TEST_SUITE_P(Optimizers, TrainCudaOptimizers, ::testing::Values("sgd", "adam"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace psar
