// The allreduce family under mpirun (np 2, 3, 4 and 8 oversubscribed): every
// algorithm of the registry, `mpi` included as the cross-check, against the
// double-precision reference with identical bits on every rank; the byte
// counters over the MPI transport; sizes that disagree across ranks.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <set>

#include "tests/common/mpi_world.h"
#include "allreduce/allreducer.h"
#include "allreduce/collectives.h"
#include "comm/mpi_comm.h"
#include "core/errors.h"
#include "tests/allreduce/allreduce_test_util.h"

namespace psar {
namespace {

using ::testing::HasSubstr;
using testing::count_wrong;
using testing::make_input;

MpiComm& world() { return testing::mpi_world(); }

// FNV-1a of the bits, to compare results across ranks without shipping them.
uint64_t fingerprint(const std::vector<float>& v) {
  uint64_t h = 1469598103934665603ull;
  const auto* p = reinterpret_cast<const unsigned char*>(v.data());
  for (size_t i = 0; i < v.size() * sizeof(float); ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

bool identical_on_every_rank(Comm& comm, const std::vector<float>& v) {
  const uint64_t mine = fingerprint(v);
  const auto all = comm.allgather_bytes(std::as_bytes(std::span<const uint64_t>(&mine, 1)));
  for (const auto& bytes : all)
    if (std::memcmp(bytes.data(), &mine, sizeof mine) != 0) return false;
  return true;
}

class EveryAllreduceUnderMpi : public ::testing::TestWithParam<std::string> {};

TEST_P(EveryAllreduceUnderMpi, SumsLikeTheReferenceWithIdenticalBitsOnEveryRank) {
  MpiComm comm(MPI_COMM_WORLD);  // fresh context per test
  comm.set_timeout(60);
  const int n = comm.size();
  AllreduceOptions options;
  options.segment_bytes = 64 * 1024;
  auto algo = make_allreducer(GetParam(), options);
  for (int64_t count : std::set<int64_t>{0, 1, n - 1, n + 1, 100003, int64_t{1} << 20}) {
    const uint64_t seed = 1000 + static_cast<uint64_t>(count);
    auto data = make_input(seed, comm.rank(), count);
    algo->allreduce(comm, data);
    // Identical bits everywhere, so checking rank 0 checks every rank.
    EXPECT_TRUE(identical_on_every_rank(comm, data)) << count << " floats";
    if (comm.rank() == 0) {
      EXPECT_EQ(count_wrong(data, seed, n), 0) << count << " floats";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Allreduce, EveryAllreduceUnderMpi,
                         ::testing::ValuesIn(allreducer_names()),
                         [](const auto& info) { return info.param; });

TEST(AllreduceUnderMpi, CustomAlgorithmsAgreeWithMpiAllreduce) {
  MpiComm comm(MPI_COMM_WORLD);
  constexpr int64_t kCount = 77777;
  auto reference = make_input(9, comm.rank(), kCount);
  make_allreducer("mpi")->allreduce(comm, reference);
  for (const auto& name : allreducer_names()) {
    auto data = make_input(9, comm.rank(), kCount);
    make_allreducer(name)->allreduce(comm, data);
    int64_t far = 0;
    for (int64_t i = 0; i < kCount; ++i) {
      double magnitude = 0;
      for (int r = 0; r < comm.size(); ++r)
        magnitude += std::fabs(testing::input_value(9, r, i));
      far += std::fabs(data[i] - reference[i]) > 2e-6 * magnitude;
    }
    EXPECT_EQ(far, 0) << name << " vs mpi";
  }
}

TEST(AllreduceUnderMpi, RingByteCountersMatchTheChunkLayout) {
  MpiComm comm(MPI_COMM_WORLD);
  const int n = comm.size(), r = comm.rank();
  constexpr int64_t kCount = 100003;
  auto ring = make_allreducer("ring");
  std::vector<float> data(kCount, 1.0f);
  comm.reset_counters();
  ring->allreduce(comm, data);
  const int64_t own = testing::chunk_size(kCount, n, r),
                next = testing::chunk_size(kCount, n, (r + 1) % n);
  EXPECT_EQ(comm.counters().bytes_sent, 4 * (2 * kCount - own - next));
  EXPECT_EQ(comm.allreduce_sum(static_cast<double>(comm.counters().bytes_sent)),
            2.0 * (n - 1) * kCount * 4);
}

class SizesDisagreeUnderMpi : public ::testing::TestWithParam<std::string> {};

TEST_P(SizesDisagreeUnderMpi, EveryRankEndsInACommErrorNamingTheOperation) {
  MpiComm comm(MPI_COMM_WORLD);
  comm.set_timeout(1.5);  // ranks left waiting give up quickly
  // Small vectors: eager messages, so nothing is left pending in MPI after the error.
  const int64_t count = comm.rank() == comm.size() - 1 ? 101 : 100;
  auto data = make_input(2, comm.rank(), count);
  std::string error;
  try {
    make_allreducer(GetParam())->allreduce(comm, data);
  } catch (const CommError& e) {
    error = e.what();
  }
  EXPECT_THAT(error, HasSubstr("allreduce: ")) << "rank " << comm.rank();
  EXPECT_THAT(error, HasSubstr(" rank ")) << "rank " << comm.rank();
  world().barrier();
}

std::vector<std::string> custom_algorithms() {
  auto names = allreducer_names();
  std::erase(names, "mpi");
  return names;
}

INSTANTIATE_TEST_SUITE_P(Allreduce, SizesDisagreeUnderMpi, ::testing::ValuesIn(custom_algorithms()),
                         [](const auto& info) { return info.param; });

TEST(RingCollectivesUnderMpi, ReduceScatterThenAllGatherMatchesTheReference) {
  MpiComm comm(MPI_COMM_WORLD);
  constexpr int64_t kCount = 100003;
  auto data = make_input(4, comm.rank(), kCount);
  RingReduceScatter().reduce_scatter(comm, data);
  RingAllGather().all_gather(comm, data);
  EXPECT_TRUE(identical_on_every_rank(comm, data));
  if (comm.rank() == 0) {
    EXPECT_EQ(count_wrong(data, 4, comm.size()), 0);
  }
}

}  // namespace
}  // namespace psar
