// hierarchical allreduce with the nodes given in-process (Comm::set_nodes,
// as net.node_size does): the allreduce sweep (world sizes × counts against
// the double reference, identical bits on every rank) for node sizes 1, 2
// and 4; the bytes its program sends inside and between nodes equal the
// closed form of allreduce/hierarchical.cc, re-derived here from the chunk
// sizes, and the Comm counters count exactly the program's bytes.

#include <gtest/gtest.h>

#include <set>

#include "allreduce/allreducer.h"
#include "comm/inproc_comm.h"
#include "tests/allreduce/allreduce_test_util.h"
#include "tests/allreduce/forwarding_comm.h"

namespace psar {
namespace {

using testing::chunk_size;
using testing::count_wrong;
using testing::make_input;
using testing::same_bits;

struct Case {
  int node_size, ranks;
  int64_t count;
};

std::vector<int> nodes_of(int ranks, int node_size) {
  std::vector<int> nodes;
  for (int r = 0; r < ranks; ++r) nodes.push_back(r / node_size);
  return nodes;
}

// Nodes of unequal size: the flat ring.
bool falls_back_to_ring(int ranks, int node_size) {
  return ranks > node_size && ranks % node_size != 0;
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  return "node" + std::to_string(info.param.node_size) + "_" + std::to_string(info.param.ranks) +
         "ranks_" + std::to_string(info.param.count) + "floats";
}

class Hierarchical : public ::testing::TestWithParam<Case> {};

TEST_P(Hierarchical, SumsLikeTheDoubleReferenceWithIdenticalBitsOnEveryRank) {
  const Case& c = GetParam();
  AllreduceOptions options;
  options.segment_bytes = 16 * 1024;  // large slices stream in several segments
  std::vector<std::vector<float>> results(static_cast<size_t>(c.ranks));
  constexpr uint64_t kSeed = 13;
  run_inproc(c.ranks, [&](Comm& comm) {
    comm.set_nodes(nodes_of(c.ranks, c.node_size));
    auto algo = make_allreducer("hierarchical", options);
    auto data = make_input(kSeed, comm.rank(), c.count);
    algo->allreduce(comm, data);
    results[static_cast<size_t>(comm.rank())] = std::move(data);
  });
  EXPECT_EQ(count_wrong(results[0], kSeed, c.ranks), 0);
  for (int r = 1; r < c.ranks; ++r)
    EXPECT_TRUE(same_bits(results[static_cast<size_t>(r)], results[0])) << "rank " << r;
  const Program p = find_allreducer("hierarchical")
                        .program_for(c.ranks, c.count, options, nodes_of(c.ranks, c.node_size));
  EXPECT_EQ(p.name.find("flat ring") != std::string::npos, falls_back_to_ring(c.ranks, c.node_size))
      << p.name;
}

std::vector<Case> sweep() {
  std::vector<Case> cases;
  for (int l : {1, 2, 4})
    for (int n : {1, 2, 3, 4, 5, 7, 8}) {
      const std::set<int64_t> counts = {0, 1, n - 1, n + 1, 100003, int64_t{1} << 20};
      for (int64_t c : counts) cases.push_back({l, n, c});
    }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Allreduce, Hierarchical, ::testing::ValuesIn(sweep()),
                         case_name);

// Per rank, in elements: 2·count − c_j − c_{j+1} inside the node, 2·c_j −
// P_M.size(k) − P_M.size(k+1) between nodes (0 for one node), for local rank
// j of node k; the program's sends split by whether the peer shares the node.
class HierarchicalBytes : public ::testing::TestWithParam<Case> {};

TEST_P(HierarchicalBytes, EachLevelMovesExactlyItsFormula) {
  const Case& c = GetParam();
  const int L = std::min(c.node_size, c.ranks), M = c.ranks / L;
  ASSERT_EQ(M * L, c.ranks) << "the formula is for nodes of equal size";
  AllreduceOptions options;
  options.segment_bytes = 4096;  // many segments: must not change the volume
  const std::vector<int> node = nodes_of(c.ranks, c.node_size);
  const Program p = find_allreducer("hierarchical").program_for(c.ranks, c.count, options, node);
  std::vector<CommCounters> totals(static_cast<size_t>(c.ranks));
  run_inproc(c.ranks, [&](Comm& comm) {
    comm.set_nodes(node);
    auto algo = make_allreducer("hierarchical", options);
    std::vector<float> data(static_cast<size_t>(c.count), 1.0f);
    algo->allreduce(comm, data);  // plans
    comm.barrier();
    comm.reset_counters();
    algo->allreduce(comm, data);
    totals[static_cast<size_t>(comm.rank())] = comm.counters();
  });
  int64_t intra_total = 0, inter_total = 0;
  for (int r = 0; r < c.ranks; ++r) {
    const int j = r % L, k = r / L;
    const int64_t cj = chunk_size(c.count, L, j);
    const int64_t intra = L == 1 ? 0 : 2 * c.count - cj - chunk_size(c.count, L, (j + 1) % L);
    const int64_t inter =
        M == 1 ? 0 : 2 * cj - chunk_size(cj, M, k) - chunk_size(cj, M, (k + 1) % M);
    int64_t inside = 0, between = 0;
    for (const Step& s : p.steps[static_cast<size_t>(r)])
      if (s.sends()) (node[static_cast<size_t>(s.peer)] == node[static_cast<size_t>(r)] ? inside : between) += s.count;
    EXPECT_EQ(inside, intra) << "rank " << r;
    EXPECT_EQ(between, inter) << "rank " << r;
    EXPECT_EQ(totals[static_cast<size_t>(r)].bytes_sent, 4 * (intra + inter))
        << "the caller's communicator counts both levels, rank " << r;
    intra_total += inside;
    inter_total += between;
  }
  // In all: 2(L-1)·n per node inside, 2(M-1)·n/L per slice ring between nodes.
  EXPECT_EQ(intra_total, int64_t{M} * 2 * (L - 1) * c.count);
  EXPECT_EQ(inter_total, 2 * (M - 1) * c.count);
}

std::vector<Case> even_shapes() {
  std::vector<Case> cases;
  for (int l : {1, 2, 4})
    for (int n : {1, 2, 4, 6, 8})
      if (n <= l || n % l == 0)
        for (int64_t count : {int64_t{0}, int64_t{5}, int64_t{1001}, int64_t{65536 + 3}})
          cases.push_back({l, n, count});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Allreduce, HierarchicalBytes, ::testing::ValuesIn(even_shapes()),
                         case_name);

// The pairwise exchanges travel whole on one host and in segments across
// hosts (below a TCP transport's eager limit, docs/algorithms.md,
// "Segments"): more messages, the same bytes (each rank its program's) and
// the same sum on every rank.
TEST(PairwiseExchanges, SegmentAcrossNodesOnlyWithTheSameBytesAndSum) {
  constexpr int kRanks = 4;
  constexpr int64_t kCount = 64 * 1024;  // 256 KiB: 16 segments of 16 KiB
  constexpr uint64_t kSeed = 29;
  AllreduceOptions options;
  options.segment_bytes = 16 * 1024;
  for (const char* name : {"naive", "butterfly", "halving_doubling"}) {
    CommCounters one_node, two_nodes;
    for (const std::vector<int>& node :
         {std::vector<int>{0, 0, 0, 0}, std::vector<int>{0, 0, 1, 1}}) {
      std::vector<std::vector<float>> results(kRanks);
      std::vector<CommCounters> counters(kRanks);
      run_inproc(kRanks, [&](Comm& comm) {
        comm.set_nodes(node);
        auto algo = make_allreducer(name, options);
        auto data = make_input(kSeed, comm.rank(), kCount);
        const CommCounters before = comm.counters();
        algo->allreduce(comm, data);
        const CommCounters after = comm.counters();
        counters[static_cast<size_t>(comm.rank())] = {
            after.bytes_sent - before.bytes_sent, 0,
            after.messages_sent - before.messages_sent, 0, 0};
        results[static_cast<size_t>(comm.rank())] = std::move(data);
      });
      // Every rank's sum (not rank 0's alone), and every rank's bytes as its
      // program says (the closed form, not only the same in both layouts).
      const Program program = find_allreducer(name).program_for(kRanks, kCount, options, node);
      for (int r = 0; r < kRanks; ++r) {
        EXPECT_EQ(count_wrong(results[static_cast<size_t>(r)], kSeed, kRanks), 0)
            << name << ", rank " << r;
        EXPECT_EQ(counters[static_cast<size_t>(r)].bytes_sent,
                  program.sent_bytes(r, ElementType::kFp32))
            << name << ", rank " << r;
      }
      CommCounters& total = node[2] == 0 ? one_node : two_nodes;
      for (const CommCounters& c : counters) {
        total.bytes_sent += c.bytes_sent;
        total.messages_sent += c.messages_sent;
      }
    }
    EXPECT_EQ(two_nodes.bytes_sent, one_node.bytes_sent) << name;
    EXPECT_GT(two_nodes.messages_sent, 4 * one_node.messages_sent) << name;
  }
}

// An algorithm's node map is found once per communicator (NodeMapCache):
// over a communicator whose nodes nobody set, the first call asks every
// rank's hostname on the control plane (one host here: every rank on node
// 0), the next calls post nothing, a communicator of its own asks again, and
// an algorithm that reads no nodes never asks.
TEST(NodeMapCache, AsksForTheHostnamesOncePerCommunicator) {
  struct Posts final : testing::ForwardingComm {
    using ForwardingComm::ForwardingComm;
    void on_post(Post, int) override { ++posted; }
    int posted = 0;
  };
  constexpr int kRanks = 3;
  run_inproc(kRanks, [](Comm& world) {
    Posts a(world), b(world);
    NodeMapCache tree(find_allreducer("tree"), "tree allreduce");
    EXPECT_EQ(tree.get(a), std::vector<int>(kRanks, 0));
    const int asked = a.posted;
    EXPECT_GT(asked, 0);
    EXPECT_EQ(tree.get(a), std::vector<int>(kRanks, 0));
    EXPECT_EQ(a.posted, asked);
    EXPECT_EQ(tree.get(b), std::vector<int>(kRanks, 0));
    EXPECT_EQ(b.posted, asked);
    NodeMapCache ring(find_allreducer("ring"), "ring allreduce");
    EXPECT_TRUE(ring.get(a).empty());
    EXPECT_EQ(a.posted, asked);
  });
}

}  // namespace
}  // namespace psar
