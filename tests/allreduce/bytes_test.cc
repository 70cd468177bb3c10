// Byte accounting (docs/algorithms.md, "bytes sent"): the Comm counters of one
// allreduce must equal the registered formula of each algorithm exactly, on
// every rank. M = count·4 bytes; p2 = the largest power of two ≤ N, e = N - p2
// the ranks folded in and out.

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "allreduce/allreducer.h"
#include "allreduce/collectives.h"
#include "comm/inproc_comm.h"
#include "tests/allreduce/allreduce_test_util.h"

namespace psar {
namespace {

using testing::chunk_size;

struct Volume {
  std::vector<int64_t> sent, recv;  // per rank
  int64_t total_sent() const { return std::accumulate(sent.begin(), sent.end(), int64_t{0}); }
  int64_t total_recv() const { return std::accumulate(recv.begin(), recv.end(), int64_t{0}); }
};

// Counters of one call of the collective on every rank. `make` builds each
// rank's own callable; it runs once before counting, so that the second call
// runs on a reused plan.
template <typename Make>
Volume measure(int ranks, Make make) {
  Volume v{std::vector<int64_t>(ranks), std::vector<int64_t>(ranks)};
  run_inproc(ranks, [&](Comm& comm) {
    auto fn = make();
    fn(comm);
    comm.barrier();
    comm.reset_counters();
    fn(comm);
    v.sent[comm.rank()] = comm.counters().bytes_sent;
    v.recv[comm.rank()] = comm.counters().bytes_recv;
  });
  return v;
}

Volume measure_allreduce(const std::string& algo, int ranks, int64_t count) {
  AllreduceOptions options;
  options.segment_bytes = 4096;  // many segments: must not change the volume
  return measure(ranks, [&] {
    return [a = make_allreducer(algo, options), count](Comm& comm) {
      std::vector<float> data(static_cast<size_t>(count), 1.0f);
      a->allreduce(comm, data);
    };
  });
}

struct Shape {
  int ranks;
  int64_t count;
};

class Volumes : public ::testing::TestWithParam<Shape> {};

// Every algorithm whose bytes pass through Comm states them per rank in the
// registry (docs/algorithms.md has the same formulas in words); here they meet
// the counters. A host algorithm registered without its count fails.
TEST_P(Volumes, EveryRegisteredAlgorithmSendsWhatItsFormulaSaysOnEveryRank) {
  const auto [n, count] = GetParam();
  for (const auto& entry : allreducer_registry()) {
    if (entry.device || entry.needs_mpi) continue;  // bytes outside psar's Comm counters
    ASSERT_NE(entry.sent_bytes, nullptr) << entry.name << " registers no byte count";
    const Volume v = measure_allreduce(entry.name, n, count);
    for (int r = 0; r < n; ++r)
      EXPECT_EQ(v.sent[r], entry.sent_bytes(r, n, count)) << entry.name << ", rank " << r;
    EXPECT_EQ(v.total_sent(), entry.sent_bytes_total(n, count)) << entry.name;
    EXPECT_EQ(*std::max_element(v.sent.begin(), v.sent.end()), entry.sent_bytes_busiest(n, count))
        << entry.name;
  }
}

TEST_P(Volumes, ReduceScatterAndAllGatherEachMoveAllButOneChunk) {
  const auto [n, count] = GetParam();
  const Volume rs = measure(n, [&] {
    return [c = std::make_shared<RingReduceScatter>(), count](Comm& comm) {
      std::vector<float> data(static_cast<size_t>(count), 1.0f);
      c->reduce_scatter(comm, data);
    };
  });
  const Volume ag = measure(n, [&] {
    return [c = std::make_shared<RingAllGather>(), count](Comm& comm) {
      std::vector<float> data(static_cast<size_t>(count), 1.0f);
      c->all_gather(comm, data);
    };
  });
  for (int r = 0; r < n && n > 1; ++r) {
    EXPECT_EQ(rs.sent[r], 4 * (count - chunk_size(count, n, r))) << "rank " << r;
    EXPECT_EQ(ag.sent[r], 4 * (count - chunk_size(count, n, (r + 1) % n))) << "rank " << r;
  }
  EXPECT_EQ(rs.total_sent(), (n - 1) * count * 4);
  EXPECT_EQ(ag.total_sent(), (n - 1) * count * 4);
}

TEST_P(Volumes, EveryByteSentIsReceived) {
  const auto [n, count] = GetParam();
  for (const auto& algo : testing::inproc_algorithms()) {
    const Volume v = measure_allreduce(algo, n, count);
    EXPECT_EQ(v.total_sent(), v.total_recv()) << algo;
  }
}

std::vector<Shape> shapes() {
  std::vector<Shape> s;
  for (int n : {1, 2, 3, 4, 5, 7, 8})
    for (int64_t count : {int64_t{0}, int64_t{5}, int64_t{1000}, int64_t{1001}, int64_t{65536 + 3}})
      s.push_back({n, count});
  return s;
}

INSTANTIATE_TEST_SUITE_P(Allreduce, Volumes, ::testing::ValuesIn(shapes()),
                         [](const auto& info) {
                           return std::to_string(info.param.ranks) + "ranks_" +
                                  std::to_string(info.param.count) + "floats";
                         });

// nccl's traffic bypasses Comm; the allreducer adds 2(N−1)/N·M per rank
// (docs/gpu.md), which over N ranks is the ring's exact total, 2(N−1)·M.
TEST(Bytes, NcclFormulaIsTheRingVolumePerRank) {
  const AllreducerEntry& ring = find_allreducer("ring");
  for (int N = 1; N <= 9; ++N)
    for (int64_t count : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{1000003}}) {
      const int64_t per_rank = nccl_bytes_per_rank(N, count);
      const long double exact = 2.0L * (N - 1) * 4.0L * static_cast<long double>(count) / N;
      EXPECT_LE(static_cast<long double>(per_rank), exact) << N << " " << count;
      EXPECT_GT(static_cast<long double>(per_rank) + 1, exact) << N << " " << count;
      const int64_t ring_total = ring.sent_bytes_total(N, count);
      EXPECT_EQ(ring_total, 2 * (N - 1) * 4 * count) << N << " " << count;
      EXPECT_LE(ring_total - per_rank * N, N) << N << " " << count;
    }
}

}  // namespace
}  // namespace psar
