// nccl allreduce against MPI_Allreduce (the peer) and a double reference,
// bitwise identical on every rank. Needs one CUDA device per rank (CTest runs
// it with as many ranks as devices, tests/gpu/per_device.sh); skips cleanly
// where there are fewer, and checks the error a user would see without one.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "allreduce/allreducer.h"
#include "core/errors.h"
#include "core/rng.h"
#include "tests/common/mpi_world.h"

#ifdef PSAR_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace psar {
namespace {

int device_count() {
#ifdef PSAR_HAVE_CUDA
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
#else
  return 0;
#endif
}
bool have_device() { return device_count() > 0; }

TEST(Nccl, WithoutADeviceTheBackendSaysWhy) {
  if (have_device()) GTEST_SKIP() << "a CUDA device is present";
  try {
    auto nccl = make_allreducer("nccl");
    std::vector<float> v(8, 1.0f);
    nccl->allreduce(testing::mpi_world(), v);
    FAIL() << "no error without a device";
  } catch (const ConfigError& e) {
#ifdef PSAR_HAVE_CUDA
    EXPECT_THAT(e.what(), ::testing::HasSubstr("needs a CUDA device"));
#else
    EXPECT_THAT(e.what(), ::testing::HasSubstr("built without CUDA/NCCL"));
#endif
  }
}

TEST(Nccl, MatchesMpiAllreduceAndADoubleReference) {
  if (!have_device()) GTEST_SKIP() << "no CUDA device visible: nothing to run nccl on";
  Comm& world = testing::mpi_world();
  if (device_count() < world.size())
    GTEST_SKIP() << world.size() << " ranks need " << world.size() << " CUDA devices, "
                 << device_count() << " visible (NCCL refuses two ranks on one GPU)";
  auto nccl = make_allreducer("nccl");
  auto mpi = make_allreducer("mpi");
  for (size_t count : {size_t{0}, size_t{1}, size_t{1000003}, size_t{1} << 22}) {
    std::vector<float> mine(count);
    Philox::fill_normal(mine, 1.0f, 7, static_cast<uint64_t>(world.rank()));
    std::vector<float> a = mine, b = mine;
    nccl->allreduce(world, a);
    mpi->allreduce(world, b);
    std::vector<double> ref(count, 0.0);
    for (int r = 0; r < world.size(); ++r) {
      std::vector<float> other(count);
      Philox::fill_normal(other, 1.0f, 7, static_cast<uint64_t>(r));
      for (size_t i = 0; i < count; ++i) ref[i] += other[i];
    }
    for (size_t i = 0; i < count; ++i)
      ASSERT_NEAR(a[i], ref[i], 1e-5 * (1 + std::abs(ref[i]))) << "count " << count << " i " << i;
    // Every rank holds the same bits.
    const auto all = world.allgather_bytes(std::as_bytes(std::span<const float>(a)));
    for (const auto& other : all) EXPECT_TRUE(std::equal(other.begin(), other.end(),
                                                         std::as_bytes(std::span<const float>(a)).begin()));
    // Beside the measured peer: the same sums up to summation order.
    for (size_t i = 0; i < count; ++i)
      ASSERT_NEAR(a[i], b[i], 1e-5 * (1 + std::abs(b[i]))) << "nccl vs mpi, i " << i;
  }
}

}  // namespace
}  // namespace psar
