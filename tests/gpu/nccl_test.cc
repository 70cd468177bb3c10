// nccl allreduce against MPI_Allreduce (the peer) and a double reference,
// bitwise identical on every rank. Needs one CUDA device per rank (CTest runs
// it with as many ranks as devices, tests/gpu/per_device.sh); skips cleanly
// where there are fewer, and checks the error a user would see without one.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "allreduce/allreducer.h"
#include "allreduce/program.h"
#include "allreduce/sharded.h"
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

// Why this run cannot put NCCL on every rank ("" when it can). NCCL refuses
// two ranks on one GPU unless each rank has its own NCCL_HOSTID
// (tests/gpu/per_device.sh --shared): they then talk over sockets.
std::string nccl_skip_reason() {
  if (!have_device()) return "no CUDA device visible: nothing to run nccl on";
  const int ranks = testing::mpi_world().size();
  if (device_count() < ranks && std::getenv("NCCL_HOSTID") == nullptr)
    return std::to_string(ranks) + " ranks need " + std::to_string(ranks) + " CUDA devices, " +
           std::to_string(device_count()) + " visible (NCCL refuses two ranks on one GPU)";
  return "";
}
#define PSAR_NEED_NCCL_RANKS()                                       \
  do {                                                               \
    if (const std::string why = nccl_skip_reason(); !why.empty())    \
      GTEST_SKIP() << why;                                           \
  } while (0)

// Rank r's test vector of `count` floats (normal, its own stream).
std::vector<float> rank_vector(size_t count, int r) {
  std::vector<float> v(count);
  Philox::fill_normal(v, 1.0f, 7, static_cast<uint64_t>(r));
  return v;
}

// The sum over ranks in double precision.
std::vector<double> double_sum(size_t count, int ranks) {
  std::vector<double> ref(count, 0.0);
  for (int r = 0; r < ranks; ++r) {
    const auto other = rank_vector(count, r);
    for (size_t i = 0; i < count; ++i) ref[i] += other[i];
  }
  return ref;
}

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
  PSAR_NEED_NCCL_RANKS();
  Comm& world = testing::mpi_world();
  auto nccl = make_allreducer("nccl");
  auto mpi = make_allreducer("mpi");
  for (size_t count : {size_t{0}, size_t{1}, size_t{1000003}, size_t{1} << 22}) {
    const std::vector<float> mine = rank_vector(count, world.rank());
    std::vector<float> a = mine, b = mine;
    nccl->allreduce(world, a);
    mpi->allreduce(world, b);
    const std::vector<double> ref = double_sum(count, world.size());
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

// In place on device memory (what train.device: cuda hands it: the gradient
// arena), twice in a row on one communicator (the second call must wait for
// the first to be enqueued), against the double-precision sum.
TEST(Nccl, AllreducesDeviceMemoryInPlaceCallAfterCall) {
  PSAR_NEED_NCCL_RANKS();
#ifdef PSAR_HAVE_CUDA
  Comm& world = testing::mpi_world();
  auto nccl = make_allreducer("nccl");
  const size_t count = 300007;
  const std::vector<float> mine = rank_vector(count, world.rank());
  float* device = nullptr;
  ASSERT_EQ(cudaMalloc(&device, count * sizeof(float)), cudaSuccess);
  std::vector<float> out(count);
  std::vector<double> ref = double_sum(count, world.size());
  for (int call = 0; call < 2; ++call) {
    ASSERT_EQ(cudaMemcpy(device, mine.data(), count * sizeof(float), cudaMemcpyHostToDevice),
              cudaSuccess);
    const int64_t sent = world.counters().bytes_sent;
    nccl->allreduce(world, {device, count});
    EXPECT_EQ(world.counters().bytes_sent - sent,
              nccl_bytes_per_rank(world.size(), static_cast<int64_t>(count)));
    ASSERT_EQ(cudaMemcpy(out.data(), device, count * sizeof(float), cudaMemcpyDeviceToHost),
              cudaSuccess);
    for (size_t i = 0; i < count; ++i)
      ASSERT_NEAR(out[i], ref[i], 1e-5 * (1 + std::abs(ref[i]))) << "call " << call << " i " << i;
  }
  cudaFree(device);
#endif
}

// The sharded optimizer's pair (sync.zero): reduce-scatter then all-gather
// over equal pieces (one ncclReduceScatter / ncclAllGather) and unequal ones
// (grouped ncclReduce / ncclBroadcast), host buffers: each rank's own piece
// against the double-precision sum and MPI's pair, the gathered vector bit
// for bit on every rank, and the bytes counted: the vector less its piece.
TEST(Nccl, ShardedPairMatchesMpiAndADoubleReference) {
  PSAR_NEED_NCCL_RANKS();
  Comm& world = testing::mpi_world();
  const int n = world.size();
  auto nccl = make_sharded_collectives("nccl", {});
  auto mpi = make_sharded_collectives("mpi", {});
  struct Case {
    size_t count;
    std::vector<int64_t> split;  // empty: the even partition
  };
  std::vector<Case> cases = {{0, {}}, {1, {}}, {static_cast<size_t>(n) * 4099, {}},
                             {1000003, {}}};
  // Unequal pieces: rank r owns (r + 1)·1000 + 17 floats.
  std::vector<int64_t> split = {0};
  for (int r = 0; r < n; ++r) split.push_back(split.back() + (r + 1) * 1000 + 17);
  cases.push_back({static_cast<size_t>(split.back()), split});
  for (const Case& c : cases) {
    ProgramShape shape;
    shape.ranks = n;
    shape.count = static_cast<int64_t>(c.count);
    shape.split = c.split;
    const auto begin = static_cast<size_t>(shape.piece_offset(world.rank()));
    const auto size = static_cast<size_t>(shape.piece_size(world.rank()));
    std::vector<float> a = rank_vector(c.count, world.rank()), b = a;
    const int64_t sent = world.counters().bytes_sent;
    nccl->reduce_scatter(world, a, c.split);
    if (n > 1 && c.count > 0) {
      EXPECT_EQ(world.counters().bytes_sent - sent,
                static_cast<int64_t>((c.count - size) * sizeof(float)))
          << "count " << c.count;
    }
    mpi->reduce_scatter(world, b, c.split);
    const std::vector<double> ref = double_sum(c.count, n);
    for (size_t i = begin; i < begin + size; ++i) {
      ASSERT_NEAR(a[i], ref[i], 1e-5 * (1 + std::abs(ref[i]))) << "count " << c.count << " i " << i;
      ASSERT_NEAR(a[i], b[i], 1e-5 * (1 + std::abs(b[i]))) << "nccl vs mpi, i " << i;
    }
    // All-gather: every rank's piece of `a` (its sums) to every rank; the
    // other pieces are poisoned first.
    for (size_t i = 0; i < c.count; ++i)
      if (i < begin || i >= begin + size) a[i] = std::numeric_limits<float>::quiet_NaN();
    const std::vector<float> owned(a.begin() + static_cast<std::ptrdiff_t>(begin),
                                   a.begin() + static_cast<std::ptrdiff_t>(begin + size));
    nccl->all_gather(world, a, c.split);
    const auto all = world.allgather_bytes(std::as_bytes(std::span<const float>(owned)));
    for (int r = 0; r < n; ++r) {
      const auto at = static_cast<size_t>(shape.piece_offset(r));
      ASSERT_EQ(all[static_cast<size_t>(r)].size(),
                static_cast<size_t>(shape.piece_size(r)) * sizeof(float));
      EXPECT_EQ(std::memcmp(all[static_cast<size_t>(r)].data(), a.data() + at,
                            all[static_cast<size_t>(r)].size()),
                0)
          << "piece " << r << " of count " << c.count;
    }
  }
}

}  // namespace
}  // namespace psar
