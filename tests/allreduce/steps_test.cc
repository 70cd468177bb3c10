// Step lists (allreduce/steps.h) against the algorithms they describe: each
// list, run by the plain step executor, computes the sum on every rank; its
// per-rank bytes equal both the Comm counters of the algorithm's own
// (optimized) executor and the registry's exact byte formula; its rounds
// equal the α coefficient of the registry's cost form where that counts steps.

#include <gtest/gtest.h>

#include <memory>

#include "allreduce/allreducer.h"
#include "allreduce/collectives.h"
#include "allreduce/partition.h"
#include "allreduce/steps.h"
#include "comm/inproc_comm.h"
#include "tests/allreduce/allreduce_test_util.h"

namespace psar {
namespace {

struct Shape {
  int ranks;
  int64_t count;
};

class Steps : public ::testing::TestWithParam<Shape> {};

AllreduceOptions options() {
  AllreduceOptions o;
  o.segment_bytes = 4096;  // several tree segments at the larger counts
  return o;
}

// Bytes each rank's Comm counted in one call (after a warm-up call).
template <typename Make>
std::vector<int64_t> counted(int ranks, Make make) {
  std::vector<int64_t> sent(static_cast<size_t>(ranks));
  run_inproc(ranks, [&](Comm& comm) {
    auto call = make();
    call(comm);
    comm.barrier();
    comm.reset_counters();
    call(comm);
    sent[static_cast<size_t>(comm.rank())] = comm.counters().bytes_sent;
  });
  return sent;
}

TEST(StepsRegistry, EveryAlgorithmWhoseBytesCommCountsEmitsAStepList) {
  for (const auto& e : allreducer_registry())
    if (e.sent_bytes) {
      EXPECT_NE(e.steps, nullptr) << e.name;
    }
}

TEST_P(Steps, ListBytesEqualTheCountersAndTheFormulaOnEveryRank) {
  const auto [n, count] = GetParam();
  for (const auto& e : allreducer_registry()) {
    if (!e.steps) continue;
    const StepList list = e.steps(n, count, options());
    const auto measured = counted(n, [&, name = std::string(e.name)] {
      return [a = std::shared_ptr<Allreducer>(make_allreducer(name, options())), count](Comm& c) {
        std::vector<float> data(static_cast<size_t>(count), 1.0f);
        a->allreduce(c, data);
      };
    });
    for (int r = 0; r < n; ++r) {
      EXPECT_EQ(list.sent_bytes(r), measured[static_cast<size_t>(r)]) << e.name << " rank " << r;
      EXPECT_EQ(list.sent_bytes(r), e.sent_bytes(r, n, count)) << e.name << " rank " << r;
    }
  }
}

TEST_P(Steps, RingReduceScatterAndAllGatherListsMatchTheirCounters) {
  const auto [n, count] = GetParam();
  const StepList rs = ring_reduce_scatter_steps(n, count), ag = ring_all_gather_steps(n, count);
  const auto rs_sent = counted(n, [&] {
    return [c = std::make_shared<RingReduceScatter>(), count](Comm& comm) {
      std::vector<float> data(static_cast<size_t>(count), 1.0f);
      c->reduce_scatter(comm, data);
    };
  });
  const auto ag_sent = counted(n, [&] {
    return [c = std::make_shared<RingAllGather>(), count](Comm& comm) {
      std::vector<float> data(static_cast<size_t>(count), 1.0f);
      c->all_gather(comm, data);
    };
  });
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(rs.sent_bytes(r), rs_sent[static_cast<size_t>(r)]) << "rank " << r;
    EXPECT_EQ(ag.sent_bytes(r), ag_sent[static_cast<size_t>(r)]) << "rank " << r;
  }
}

TEST_P(Steps, TheStepExecutorComputesTheSumOnEveryRank) {
  const auto [n, count] = GetParam();
  for (const auto& e : allreducer_registry()) {
    if (!e.steps) continue;
    const StepList list = e.steps(n, count, options());
    std::vector<std::vector<float>> out(static_cast<size_t>(n));
    run_inproc(n, [&](Comm& comm) {
      auto data = testing::make_input(7, comm.rank(), count);
      run_steps(comm, list, data);
      out[static_cast<size_t>(comm.rank())] = std::move(data);
    });
    for (int r = 0; r < n; ++r)
      EXPECT_EQ(testing::count_wrong(out[static_cast<size_t>(r)], 7, n), 0)
          << e.name << " rank " << r;
  }
}

TEST_P(Steps, ReduceScatterListLeavesEachRankItsSummedPiece) {
  const auto [n, count] = GetParam();
  const StepList list = ring_reduce_scatter_steps(n, count);
  const Partition pieces{count, n};
  run_inproc(n, [&](Comm& comm) {
    auto data = testing::make_input(3, comm.rank(), count);
    run_steps(comm, list, data);
    const int r = comm.rank();
    const std::vector<float> mine(data.begin() + pieces.offset(r),
                                  data.begin() + pieces.offset(r) + pieces.size(r));
    EXPECT_EQ(testing::count_wrong(mine, 3, n, pieces.offset(r)), 0) << "rank " << r;
  });
}

// Where the cost form's α coefficient counts steps (all but naive, whose
// N-1 messages leave in one step and serialize on the sender's link), the
// list has that many rounds.
TEST_P(Steps, RoundsEqualTheCostFormsLatencyTerm) {
  const auto [n, count] = GetParam();
  if (n == 1 || count == 0) return;
  for (const auto& e : allreducer_registry()) {
    if (!e.steps || std::string(e.name) == "naive") continue;
    const StepList list = e.steps(n, count, options());
    EXPECT_EQ(static_cast<double>(list.rounds.size()), e.cost(n, count * 4, options()).alpha)
        << e.name;
  }
}

// The hierarchical list on M nodes of L ranks computes the sum, and each
// rank sends the bytes hierarchical.cc states exactly: 4·(2·count − c_j −
// c_(j+1) mod L) inside its node, 4·(2·c_j − P_M.size(k) − P_M.size((k+1)
// mod M)) between nodes (c_j = Partition{count, L}.size(j), P_M =
// Partition{c_j, M}).
TEST(HierarchicalSteps, ComputeTheSumAndSendTheStatedBytes) {
  for (int M : {1, 2, 3})
    for (int L : {1, 2, 4})
      for (int64_t count : {int64_t{0}, int64_t{7}, int64_t{1001}}) {
        const int n = M * L;
        const StepList list = hierarchical_steps(M, L, count);
        std::vector<std::vector<float>> out(static_cast<size_t>(n));
        run_inproc(n, [&](Comm& comm) {
          auto data = testing::make_input(5, comm.rank(), count);
          run_steps(comm, list, data);
          out[static_cast<size_t>(comm.rank())] = std::move(data);
        });
        const Partition local{count, L};
        for (int r = 0; r < n; ++r) {
          EXPECT_EQ(testing::count_wrong(out[static_cast<size_t>(r)], 5, n), 0)
              << M << "x" << L << " rank " << r;
          const int k = r / L, j = r % L;
          const int64_t cj = local.size(j);
          const Partition across{cj, M};
          const int64_t inside = L > 1 ? 4 * (2 * count - cj - local.size((j + 1) % L)) : 0;
          const int64_t between =
              M > 1 ? 4 * (2 * cj - across.size(k) - across.size((k + 1) % M)) : 0;
          EXPECT_EQ(list.sent_bytes(r), inside + between) << M << "x" << L << " rank " << r;
        }
      }
}

std::vector<Shape> shapes() {
  std::vector<Shape> s;
  for (int n : {1, 2, 3, 4, 5, 7, 8})
    for (int64_t count : {int64_t{0}, int64_t{1}, int64_t{5}, int64_t{1001}, int64_t{4099}})
      s.push_back({n, count});
  return s;
}

INSTANTIATE_TEST_SUITE_P(Allreduce, Steps, ::testing::ValuesIn(shapes()), [](const auto& info) {
  return std::to_string(info.param.ranks) + "ranks_" + std::to_string(info.param.count) + "floats";
});

}  // namespace
}  // namespace psar
