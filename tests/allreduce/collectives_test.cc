// The collectives other than allreduce: ring reduce-scatter and all-gather,
// each rank's piece of Partition{count, N} against a double-precision
// reference (reduce-scatter) and against the exact concatenation
// (all-gather), in place and out of place; tree broadcast and reduce from
// every root, against the root's exact vector (rounded to the element type
// on the wire) and the reference sum. World sizes and counts at the edges.

#include <gtest/gtest.h>

#include <set>

#include "allreduce/collectives.h"
#include "comm/inproc_comm.h"
#include "tests/allreduce/allreduce_test_util.h"

namespace psar {
namespace {

using testing::chunk_size;
using testing::count_wrong;
using testing::make_input;

struct Case {
  int ranks;
  int64_t count;
};

class RingCollectives : public ::testing::TestWithParam<Case> {};

int64_t piece_offset(int64_t count, int n, int r) {
  int64_t off = 0;
  for (int i = 0; i < r; ++i) off += chunk_size(count, n, i);
  return off;
}

TEST_P(RingCollectives, ReduceScatterLeavesEachRankTheSumOfItsPiece) {
  const auto [n, count] = GetParam();
  std::vector<std::vector<float>> in_place(n), out_of_place(n);
  run_inproc(n, [&](Comm& comm) {
    RingReduceScatter rs(CollectiveOptions{.segment_bytes = 2048});
    const int r = comm.rank();
    auto data = make_input(21, r, count);
    const auto input = data;
    rs.reduce_scatter(comm, data);
    const int64_t off = piece_offset(count, n, r), size = chunk_size(count, n, r);
    in_place[r].assign(data.begin() + off, data.begin() + off + size);
    std::vector<float> out(static_cast<size_t>(size), -1.0f);
    rs.reduce_scatter(comm, std::span<const float>(input), std::span<float>(out));
    EXPECT_EQ(input, make_input(21, r, count)) << "out-of-place input was modified";
    out_of_place[r] = std::move(out);
  });
  for (int r = 0; r < n; ++r) {
    const int64_t off = piece_offset(count, n, r);
    EXPECT_EQ(static_cast<int64_t>(in_place[r].size()), chunk_size(count, n, r));
    EXPECT_EQ(count_wrong(in_place[r], 21, n, off), 0) << "rank " << r;
    EXPECT_EQ(out_of_place[r], in_place[r]) << "rank " << r;
  }
}

TEST_P(RingCollectives, AllGatherGivesEveryRankEveryPieceExactly) {
  const auto [n, count] = GetParam();
  // Piece r of the expected vector is rank r's input piece.
  std::vector<float> expect(static_cast<size_t>(count));
  for (int r = 0; r < n; ++r) {
    const auto x = make_input(31, r, count);
    const int64_t off = piece_offset(count, n, r);
    for (int64_t i = off; i < off + chunk_size(count, n, r); ++i) expect[i] = x[i];
  }
  std::vector<std::vector<float>> in_place(n), out_of_place(n);
  run_inproc(n, [&](Comm& comm) {
    RingAllGather ag(CollectiveOptions{.segment_bytes = 2048});
    const int r = comm.rank();
    const int64_t off = piece_offset(count, n, r), size = chunk_size(count, n, r);
    auto data = make_input(31, r, count);  // only piece r is meaningful
    const std::vector<float> mine(data.begin() + off, data.begin() + off + size);
    for (int64_t i = 0; i < count; ++i)
      if (i < off || i >= off + size) data[i] = -7.0f;  // must all be overwritten
    ag.all_gather(comm, data);
    in_place[r] = std::move(data);
    std::vector<float> out(static_cast<size_t>(count), -7.0f);
    ag.all_gather(comm, std::span<const float>(mine), std::span<float>(out));
    out_of_place[r] = std::move(out);
  });
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(in_place[r], expect) << "rank " << r;
    EXPECT_EQ(out_of_place[r], expect) << "rank " << r;
  }
}

// Reduce-scatter followed by all-gather is an allreduce: bitwise identical
// on every rank, and equal to the reference.
TEST_P(RingCollectives, ReduceScatterThenAllGatherIsAnAllreduce) {
  const auto [n, count] = GetParam();
  std::vector<std::vector<float>> results(n);
  run_inproc(n, [&](Comm& comm) {
    auto data = make_input(41, comm.rank(), count);
    RingReduceScatter().reduce_scatter(comm, data);
    RingAllGather().all_gather(comm, data);
    results[comm.rank()] = std::move(data);
  });
  EXPECT_EQ(count_wrong(results[0], 41, n), 0);
  for (int r = 1; r < n; ++r) EXPECT_TRUE(testing::same_bits(results[r], results[0]));
}

TEST_P(RingCollectives, BroadcastGivesEveryRankTheRootsVectorInTheWireType) {
  const auto [n, count] = GetParam();
  for (ElementType t : {ElementType::kFp32, ElementType::kBf16, ElementType::kFp16})
    for (int root : std::set<int>{0, n / 2, n - 1}) {
      std::vector<float> expect = make_input(51, root, count);
      for (float& x : expect)  // the reference rounding, not the engine's
        x = t == ElementType::kBf16   ? bf16_to_float(float_to_bf16(x))
            : t == ElementType::kFp16 ? fp16_to_float(float_to_fp16(x))
                                      : x;
      std::vector<std::vector<float>> got(static_cast<size_t>(n));
      run_inproc(n, [&](Comm& comm) {
        TreeBroadcast b(CollectiveOptions{.segment_bytes = 2048, .dtype = t});
        auto data = make_input(comm.rank() == root ? 51 : 52, comm.rank(), count);
        b.broadcast(comm, data, root);
        got[static_cast<size_t>(comm.rank())] = std::move(data);
      });
      for (int r = 0; r < n; ++r)
        EXPECT_TRUE(testing::same_bits(got[static_cast<size_t>(r)], expect))
            << "rank " << r << ", root " << root << ", " << element_type_name(t);
    }
}

TEST_P(RingCollectives, ReduceLeavesTheRootTheSum) {
  const auto [n, count] = GetParam();
  for (ElementType t : {ElementType::kFp32, ElementType::kBf16})
    for (int root : std::set<int>{0, n / 2, n - 1}) {
      std::vector<float> at_root;
      run_inproc(n, [&](Comm& comm) {
        TreeReduce reduce(CollectiveOptions{.segment_bytes = 2048, .dtype = t});
        auto data = make_input(61, comm.rank(), count);
        reduce.reduce(comm, data, root);
        if (comm.rank() == root) at_root = std::move(data);
      });
      EXPECT_EQ(count_wrong(at_root, 61, n, 0, testing::tolerance(t, n)), 0)
          << "root " << root << ", " << element_type_name(t);
    }
}

std::vector<Case> cases() {
  std::vector<Case> c;
  for (int n : {1, 2, 3, 4, 5, 7, 8})
    for (int64_t count : std::set<int64_t>{0, 1, n - 1, n + 1, 100003}) c.push_back({n, count});
  return c;
}

INSTANTIATE_TEST_SUITE_P(Ring, RingCollectives, ::testing::ValuesIn(cases()),
                         [](const auto& info) {
                           return std::to_string(info.param.ranks) + "ranks_" +
                                  std::to_string(info.param.count) + "floats";
                         });

}  // namespace
}  // namespace psar
