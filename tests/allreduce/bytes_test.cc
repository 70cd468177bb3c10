// Byte accounting (REPRODUCE.md R1): the Comm counters of one allreduce must
// equal the volume formula of each algorithm exactly, in total and per rank
// where the schedule fixes it. M = count·4 bytes; p2 = the largest power of
// two ≤ N, e = N - p2 the ranks folded in and out.

#include <gtest/gtest.h>

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

int log2_floor(int n) {
  int k = 0;
  while ((2 << k) <= n) ++k;
  return k;
}

struct Shape {
  int ranks;
  int64_t count;
};

class Volumes : public ::testing::TestWithParam<Shape> {};

TEST_P(Volumes, NaiveSendsTheWholeVectorToEveryOtherRank) {
  const auto [n, count] = GetParam();
  const int64_t M = count * 4;
  const Volume v = measure_allreduce("naive", n, count);
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(v.sent[r], (n - 1) * M) << "rank " << r;
    EXPECT_EQ(v.recv[r], (n - 1) * M) << "rank " << r;
  }
  EXPECT_EQ(v.total_sent(), int64_t{n} * (n - 1) * M);
}

TEST_P(Volumes, RingSendsEveryChunkTwiceExceptItsOwnTwo) {
  const auto [n, count] = GetParam();
  const int64_t M = count * 4;
  const Volume v = measure_allreduce("ring", n, count);
  // Rank r reduces all chunks but r (which it ends owning) and forwards all
  // but r+1 (the one it receives last): 2M minus those two chunks.
  for (int r = 0; r < n && n > 1; ++r) {
    const int64_t own = chunk_size(count, n, r), next = chunk_size(count, n, (r + 1) % n),
                  prev = chunk_size(count, n, (r + n - 1) % n);
    EXPECT_EQ(v.sent[r], 2 * M - 4 * (own + next)) << "rank " << r;
    EXPECT_EQ(v.recv[r], 2 * M - 4 * (prev + own)) << "rank " << r;
  }
  EXPECT_EQ(v.total_sent(), 2 * (n - 1) * M);
}

TEST_P(Volumes, TreeSendsTheVectorUpAndDownEachEdgeOnce) {
  const auto [n, count] = GetParam();
  const int64_t M = count * 4;
  const Volume v = measure_allreduce("tree", n, count);
  for (int r = 0; r < n; ++r) {
    const int children = (2 * r + 1 < n) + (2 * r + 2 < n);
    EXPECT_EQ(v.sent[r], M * ((r > 0) + children)) << "rank " << r;
  }
  EXPECT_EQ(v.total_sent(), 2 * (n - 1) * M);
}

TEST_P(Volumes, ButterflySendsTheVectorOncePerRoundPlusTheFold) {
  const auto [n, count] = GetParam();
  const int64_t M = count * 4;
  const int lg = log2_floor(n), p2 = 1 << lg, e = n - p2;
  const Volume v = measure_allreduce("butterfly", n, count);
  for (int r = 0; r < n; ++r) {
    const int64_t expect = r >= p2 ? M : lg * M + (r < e ? M : 0);
    EXPECT_EQ(v.sent[r], expect) << "rank " << r;
  }
  // N·M·log2 N for a power of two; folding adds 2·e·M.
  EXPECT_EQ(v.total_sent(), int64_t{p2} * lg * M + 2 * e * M);
}

TEST_P(Volumes, HalvingDoublingMovesTwiceTheVectorMinusOneShareLikeTheRing) {
  const auto [n, count] = GetParam();
  const int64_t M = count * 4;
  const int p2 = 1 << log2_floor(n), e = n - p2;
  const Volume v = measure_allreduce("halving_doubling", n, count);
  // 2(p2-1)M among the core, 2eM for the fold: 2(N-1)M in all.
  EXPECT_EQ(v.total_sent(), 2 * (p2 - 1) * M + 2 * e * M);
  EXPECT_EQ(v.total_sent(), 2 * (n - 1) * M);
  if (e == 0 && count % n == 0) {  // even pieces: every rank sends 2(N-1)/N·M
    for (int r = 0; r < n; ++r) EXPECT_EQ(v.sent[r], 2 * (n - 1) * M / n) << "rank " << r;
  }
  for (int r = p2; r < n; ++r) EXPECT_EQ(v.sent[r], M) << "extra rank " << r;
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

}  // namespace
}  // namespace psar
