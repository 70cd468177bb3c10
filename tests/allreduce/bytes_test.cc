// Byte accounting (docs/algorithms.md, "bytes sent"): the Comm counters of one
// allreduce equal the bytes its program sends, exactly, on every rank and for
// every element type; and the program's bytes equal each algorithm's exact
// closed form, derived here independently of its file. M = count elements;
// p2 = the largest power of two ≤ N, e = N - p2 the ranks folded in and out.

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

AllreduceOptions small_segments(ElementType dtype = ElementType::kFp32) {
  AllreduceOptions options;
  options.segment_bytes = 4096;  // many segments: must not change the volume
  options.dtype = dtype;
  return options;
}

Volume measure_allreduce(const std::string& algo, int ranks, int64_t count,
                         ElementType dtype = ElementType::kFp32) {
  const AllreduceOptions options = small_segments(dtype);
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

// The elements rank r of N sends in one allreduce of M elements, by
// algorithm (docs/algorithms.md states the same in words).
int64_t closed_form(const std::string& algo, int r, int N, int64_t M) {
  if (N == 1 || M == 0) return 0;
  int p2 = 1;
  while (p2 * 2 <= N) p2 *= 2;
  const bool extra = r >= p2, partner = r < N - p2;  // folded in / folding partner
  if (algo == "ring" || algo == "hierarchical")  // hierarchical on one node: the ring
    return 2 * M - chunk_size(M, N, r) - chunk_size(M, N, (r + 1) % N);
  if (algo == "tree") return M * ((r > 0) + (2 * r + 1 < N) + (2 * r + 2 < N));
  if (algo == "naive") return (N - 1) * M;
  if (algo == "butterfly") {
    int levels = 0;
    for (int q = 1; q < p2; q *= 2) ++levels;
    return extra ? M : M * (levels + partner);
  }
  if (algo == "halving_doubling") {
    if (extra) return M;
    int64_t sent = partner ? M : 0, held = M;
    for (int d = p2 / 2; d >= 1; d /= 2) {  // the whole held range each halving/doubling pair
      sent += held;
      const int64_t lower = held - held / 2;
      held = (r & d) == 0 ? lower : held / 2;
    }
    return sent;
  }
  return -1;
}

// Every program algorithm's counters equal its program's bytes on every rank,
// with float32 and with bf16 on the wire (exactly half); the built-in ones'
// programs equal their closed forms.
TEST_P(Volumes, EveryProgramSendsWhatItsClosedFormSaysOnEveryRank) {
  const auto [n, count] = GetParam();
  for (const auto& entry : allreducer_registry()) {
    if (!entry.program) continue;  // library peers: bytes outside psar's Comm counters
    const Program program = entry.program_for(n, count, small_segments());
    for (ElementType t : {ElementType::kFp32, ElementType::kBf16}) {
      const Volume v = measure_allreduce(entry.name, n, count, t);
      for (int r = 0; r < n; ++r)
        EXPECT_EQ(v.sent[r], program.sent_bytes(r, t)) << entry.name << ", rank " << r << ", " << element_type_name(t);
      EXPECT_EQ(v.total_sent(), entry.sent_bytes_total(n, count, small_segments(t))) << entry.name;
      EXPECT_EQ(*std::max_element(v.sent.begin(), v.sent.end()),
                entry.sent_bytes_busiest(n, count, small_segments(t)))
          << entry.name;
    }
    for (int r = 0; r < n; ++r) {
      const int64_t form = closed_form(entry.name, r, n, count);
      if (form >= 0) {
        EXPECT_EQ(program.sent_elements(r), form) << entry.name << ", rank " << r;
      }
    }
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
      const int64_t ring_total = ring.sent_bytes_total(N, count, AllreduceOptions{});
      EXPECT_EQ(ring_total, 2 * (N - 1) * 4 * count) << N << " " << count;
      EXPECT_LE(ring_total - per_rank * N, N) << N << " " << count;
    }
}

}  // namespace
}  // namespace psar
