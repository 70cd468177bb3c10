// The reduce-scatter and all-gather pairs of the registry (allreduce/sharded.h)
// that run in-process (ring, halving_doubling, hierarchical — on one node the
// flat ring, on nodes given in-process its two levels; mpi:
// allreduce_mpi_test):
// each rank's piece of the reduce-scatter against a double-precision
// reference, the all-gather against the exact concatenation, for
// Partition{count, N} and for a given split with empty and uneven pieces;
// each program's bytes against its closed form; world sizes and counts at
// the edges (halving_doubling: powers of two; others are a ConfigError).

#include <gtest/gtest.h>

#include "allreduce/algorithms.h"
#include "allreduce/sharded.h"
#include "comm/inproc_comm.h"
#include "core/errors.h"
#include "tests/allreduce/allreduce_test_util.h"

namespace psar {
namespace {

using testing::count_wrong;
using testing::make_input;

struct ShardCase {
  std::string algorithm;
  int ranks;
  int64_t count;
  bool skewed;  // a split with empty and uneven pieces instead of Partition
};

// Boundaries piling the first half of the vector onto the last rank, an
// empty piece for rank 0 — the layout a bucket gets when it straddles
// owners of a flat shard.
std::vector<int64_t> skewed_split(int64_t count, int n) {
  std::vector<int64_t> split(static_cast<size_t>(n) + 1, 0);
  for (int r = 1; r < n; ++r) split[static_cast<size_t>(r)] = (count / 2) * (r - 1) / std::max(1, n - 1);
  split[static_cast<size_t>(n)] = count;
  return split;
}

class ShardedPairs : public ::testing::TestWithParam<ShardCase> {};

// Runs `algorithm`'s pair on `shape` (its nodes given to the Comm): each
// rank's reduce-scattered piece against the double reference, and its
// all-gather of rank-tagged pieces against their exact concatenation.
void expect_pair_sums_and_gathers(const std::string& algorithm, const ProgramShape& shape) {
  const int n = shape.ranks;
  const int64_t count = shape.count;
  std::vector<std::vector<float>> pieces(static_cast<size_t>(n)), gathered(static_cast<size_t>(n));
  run_inproc(n, [&](Comm& comm) {
    if (!shape.node.empty()) comm.set_nodes(shape.node);
    auto pair = make_sharded_collectives(algorithm, {.segment_bytes = 1024});
    const int r = comm.rank();
    auto data = make_input(33, r, count);
    pair->reduce_scatter(comm, data, shape.split);
    const int64_t off = shape.piece_offset(r), size = shape.piece_size(r);
    pieces[static_cast<size_t>(r)].assign(data.begin() + off, data.begin() + off + size);
    // All-gather: each rank's piece is its own rank-tagged values.
    std::vector<float> mine(static_cast<size_t>(count), -1.0f);
    for (int64_t i = off; i < off + size; ++i) mine[static_cast<size_t>(i)] = static_cast<float>(r * 100000 + i);
    pair->all_gather(comm, mine, shape.split);
    gathered[static_cast<size_t>(r)] = std::move(mine);
  });
  std::vector<float> want(static_cast<size_t>(count));
  for (int q = 0; q < n; ++q)
    for (int64_t i = shape.piece_offset(q); i < shape.piece_offset(q) + shape.piece_size(q); ++i)
      want[static_cast<size_t>(i)] = static_cast<float>(q * 100000 + i);
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(count_wrong(pieces[static_cast<size_t>(r)], 33, n, shape.piece_offset(r)), 0)
        << "rank " << r;
    EXPECT_EQ(gathered[static_cast<size_t>(r)], want) << "rank " << r;
  }
}

TEST_P(ShardedPairs, ReduceScatterSumsEachPieceAndAllGatherCopiesItExactly) {
  const ShardCase c = GetParam();
  expect_pair_sums_and_gathers(
      c.algorithm, {.ranks = c.ranks, .count = c.count,
                    .split = c.skewed ? skewed_split(c.count, c.ranks) : std::vector<int64_t>{}});
}

// Rank r's reduce-scatter sends every piece but its own (each algorithm
// gives away all it does not keep); the ring's all-gather every piece but
// its right neighbour's.
TEST_P(ShardedPairs, ReduceScatterSendsEverythingButTheRanksOwnPiece) {
  const ShardCase c = GetParam();
  const AllreducerEntry& e = find_allreducer(c.algorithm);
  const ProgramShape shape{.ranks = c.ranks, .count = c.count,
                           .split = c.skewed ? skewed_split(c.count, c.ranks) : std::vector<int64_t>{}};
  const Program rs = e.reduce_scatter(shape), ag = e.all_gather(shape);
  rs.validate();
  ag.validate();
  for (int r = 0; r < c.ranks; ++r) {
    EXPECT_EQ(rs.sent_elements(r), c.count - shape.piece_size(r)) << "rank " << r;
    if (c.algorithm != "halving_doubling")  // hierarchical on one node: the ring
      EXPECT_EQ(ag.sent_elements(r), c.count - shape.piece_size((r + 1) % c.ranks)) << "rank " << r;
  }
}

std::vector<ShardCase> shard_cases() {
  std::vector<ShardCase> cases;
  for (const char* a : {"ring", "halving_doubling", "hierarchical"})
    for (int n : {1, 2, 3, 4, 5, 8}) {
      if (std::string(a) == "halving_doubling" && (n & (n - 1)) != 0) continue;
      for (int64_t count : {0, 1, 7, 1000})
        for (bool skewed : {false, true}) cases.push_back({a, n, count, skewed});
    }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Registry, ShardedPairs, ::testing::ValuesIn(shard_cases()),
                         [](const auto& info) {
                           return info.param.algorithm + "_n" + std::to_string(info.param.ranks) +
                                  "_count" + std::to_string(info.param.count) +
                                  (info.param.skewed ? "_skewed" : "");
                         });

// hierarchical on nodes of L consecutive ranks (Comm::set_nodes, as
// net.node_size does): each piece against the double reference, the
// all-gather exact, and the bytes each rank sends inside its node and
// between nodes, counted from the program's messages, against the closed
// form of allreduce/hierarchical.cc re-derived here (rank r = kL + j,
// C_j = Σ_k' |P_(k'L+j)|).
struct NodeCase {
  int node_size, ranks;
  int64_t count;
  bool skewed;
};

class HierarchicalPair : public ::testing::TestWithParam<NodeCase> {};

TEST_P(HierarchicalPair, SumsEachPieceAndSendsTheClosedFormInsideAndBetweenNodes) {
  const NodeCase c = GetParam();
  const int L = c.node_size, N = c.ranks, M = N / L;
  const std::vector<int64_t> split = c.skewed ? skewed_split(c.count, N) : std::vector<int64_t>{};
  std::vector<int> node;
  for (int r = 0; r < N; ++r) node.push_back(r / L);
  const ProgramShape shape{.ranks = N, .count = c.count, .node = node, .split = split};
  expect_pair_sums_and_gathers("hierarchical", shape);
  // The bytes, from the programs' matched messages.
  const AllreducerEntry& e = find_allreducer("hierarchical");
  const Program rs = e.reduce_scatter(shape), ag = e.all_gather(shape);
  rs.validate();
  ag.validate();
  auto sent = [&](const Program& p, int r, bool between) {
    int64_t n = 0;
    for (const auto& round : p.transfers())
      for (const Transfer& t : round)
        if (t.src == r && (node[static_cast<size_t>(t.dst)] != node[static_cast<size_t>(r)]) == between)
          n += t.count;
    return n;
  };
  auto column = [&](int j) {
    int64_t n = 0;
    for (int k = 0; k < M; ++k) n += shape.piece_size(k * L + j);
    return n;
  };
  for (int r = 0; r < N; ++r) {
    const int k = r / L, j = r % L;
    EXPECT_EQ(sent(rs, r, false), c.count - column(j)) << "rank " << r;
    EXPECT_EQ(sent(rs, r, true), column(j) - shape.piece_size(r)) << "rank " << r;
    EXPECT_EQ(rs.sent_elements(r), c.count - shape.piece_size(r)) << "the flat ring's, rank " << r;
    EXPECT_EQ(sent(ag, r, false), c.count - column((j + 1) % L)) << "rank " << r;
    EXPECT_EQ(sent(ag, r, true), column(j) - shape.piece_size(((k + 1) % M) * L + j)) << "rank " << r;
  }
}

INSTANTIATE_TEST_SUITE_P(Nodes, HierarchicalPair,
                         ::testing::Values(NodeCase{2, 4, 1000, false}, NodeCase{2, 4, 7, true},
                                           NodeCase{2, 6, 1000, true}, NodeCase{3, 6, 1000, false},
                                           NodeCase{4, 8, 1000, true}, NodeCase{2, 8, 3, false},
                                           NodeCase{2, 8, 0, false}),
                         [](const auto& info) {
                           return "node" + std::to_string(info.param.node_size) + "_n" +
                                  std::to_string(info.param.ranks) + "_count" +
                                  std::to_string(info.param.count) +
                                  (info.param.skewed ? "_skewed" : "");
                         });

TEST(ShardedPairsRefused, AnAlgorithmWithoutThePairOrAGroupItCannotSplitIsAConfigError) {
  EXPECT_THROW(make_sharded_collectives("tree", {}), ConfigError);
  EXPECT_THROW(check_shards("naive", 4), ConfigError);
  EXPECT_THROW(check_shards("halving_doubling", 6), ConfigError);
  EXPECT_NO_THROW(check_shards("halving_doubling", 8));
  EXPECT_NO_THROW(check_shards("ring", 7));
}

}  // namespace
}  // namespace psar
