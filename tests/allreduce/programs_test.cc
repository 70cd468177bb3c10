// Programs (allreduce/program.h) as data: every program of the registries is
// well formed for every world size and count (each send matched by a receive
// of the same size in the same round, slices inside the vector), its rounds
// are the α coefficient of the algorithm's cost form where that counts
// steps, and a malformed program is caught. The engine runs a program it has
// never seen (a test's own star) correctly, which is what makes adding an
// algorithm a program and nothing else.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>

#include "core/errors.h"

#include "allreduce/algorithms.h"
#include "allreduce/allreducer.h"
#include "allreduce/collectives.h"
#include "allreduce/engine.h"
#include "allreduce/heap_tree.h"
#include "allreduce/program.h"
#include "comm/inproc_comm.h"
#include "tests/allreduce/allreduce_test_util.h"
#include "tests/allreduce/forwarding_comm.h"

namespace psar {
namespace {

struct Shape {
  int ranks;
  int64_t count;
};

class Programs : public ::testing::TestWithParam<Shape> {};

ProgramShape shape_of(int ranks, int64_t count, ElementType dtype = ElementType::kFp32) {
  ProgramShape s;
  s.ranks = ranks;
  s.count = count;
  s.segment_bytes = 4096;  // several segments at the larger counts
  s.dtype = dtype;
  return s;
}

TEST_P(Programs, EveryProgramIsWellFormed) {
  const auto [n, count] = GetParam();
  for (ElementType t : {ElementType::kFp32, ElementType::kBf16, ElementType::kFp16}) {
    ProgramShape s = shape_of(n, count, t);
    for (const auto& e : allreducer_registry())
      if (e.program) {
        EXPECT_NO_THROW(e.program(s).validate()) << e.name;
      }
    for (const auto& c : collective_registry())
      for (int root : {0, n - 1}) {
        s.root = root;
        EXPECT_NO_THROW(c.program(s).validate()) << c.name << " root " << root;
      }
  }
}

// Where the cost form's α coefficient counts steps (all but naive, whose
// N-1 messages leave in one step and serialize on the sender's link), the
// program has that many rounds.
TEST_P(Programs, RoundsEqualTheCostFormsLatencyTerm) {
  const auto [n, count] = GetParam();
  if (n == 1 || count == 0) return;
  AllreduceOptions o;
  o.segment_bytes = 4096;
  for (const auto& e : allreducer_registry()) {
    if (!e.program || std::string(e.name) == "naive") continue;
    EXPECT_EQ(static_cast<double>(e.program_for(n, count, o).rounds()), e.cost(n, count * 4, o).alpha)
        << e.name;
  }
}

// The tree's two streams overlap: the root broadcasts segment j in the round
// after it has summed it (D+j), and an inner rank receives segment 0 from
// above before the last segment from below, so each link carries both
// directions at once instead of the broadcast waiting for the last sum.
TEST(TreeProgram, TheBroadcastOfASegmentLeavesAsSoonAsTheRootHasItsSum) {
  const ProgramShape s = shape_of(4, 8 * 1024);  // D = 2, S = 8 segments of 4 KiB
  const Program p = tree_program(s);
  ASSERT_EQ(p.rounds(), 2 * 2 + 8 - 1);
  const auto first = [&](int rank, StepKind kind) {
    const auto& st = p.steps[static_cast<size_t>(rank)];
    for (size_t i = 0; i < st.size(); ++i)
      if (st[i].kind == kind) return static_cast<int>(i);
    return -1;
  };
  const auto last = [&](int rank, StepKind kind) {
    const auto& st = p.steps[static_cast<size_t>(rank)];
    for (size_t i = st.size(); i-- > 0;)
      if (st[i].kind == kind) return static_cast<int>(i);
    return -1;
  };
  const Step& root_send = p.steps[0][static_cast<size_t>(first(0, StepKind::kSend))];
  EXPECT_EQ(root_send.round, 2);  // D + 0
  EXPECT_EQ(root_send.offset, 0);
  EXPECT_LT(first(0, StepKind::kSend), last(0, StepKind::kRecvReduce));
  EXPECT_LT(first(1, StepKind::kRecv), last(1, StepKind::kRecvReduce));
}

// Across hosts the tree is paced (Program::paced: a send waits until it is
// at most Engine::kLead rounds ahead of the rank's next step); on one host
// it is not. The paced engine still sums like the reference, with identical
// bits on every rank, in every element type and at every N of the sweep: a
// bound that held back a send some later step needs would stall the run.
TEST(TreeProgram, AcrossHostsItIsPacedAndStillSumsLikeTheReference) {
  for (int n : {2, 3, 4, 5, 7, 8})
    for (int64_t count : {int64_t{1}, int64_t{30001}})
      for (ElementType t : {ElementType::kFp32, ElementType::kBf16}) {
        ProgramShape s = shape_of(n, count, t);
        EXPECT_FALSE(tree_program(s).paced);
        for (int r = 0; r < n; ++r) s.node.push_back(r);  // a host per rank
        const Program p = tree_program(s);
        ASSERT_TRUE(p.paced);
        std::vector<std::vector<float>> out(static_cast<size_t>(n));
        run_inproc(n, [&](Comm& comm) {
          Engine engine;
          engine.plan(p, comm.rank(), {.segment_bytes = s.segment_bytes, .dtype = t,
                                       .accumulate_in_dtype = false, .tag = 78});
          auto data = testing::make_input(5, comm.rank(), count);
          engine.run(comm, data);
          out[static_cast<size_t>(comm.rank())] = std::move(data);
        });
        EXPECT_EQ(testing::count_wrong(out[0], 5, n, 0, testing::tolerance(t, n)), 0)
            << "N = " << n << ", count " << count;
        for (int r = 1; r < n; ++r) EXPECT_TRUE(testing::same_bits(out[static_cast<size_t>(r)], out[0]));
      }
}

// Counts, per rank of one world, the sends posted and not yet received: a
// send adds one to its sender's count when it is posted, and its receive takes
// one off when it completes, so the count is never below the sends truly in
// flight; each rank keeps its peak. Everything else goes to the real
// communicator.
struct SendsInFlight {
  explicit SendsInFlight(int ranks) : now(static_cast<size_t>(ranks)), peak(static_cast<size_t>(ranks)) {}
  std::vector<std::atomic<int>> now;
  std::vector<int> peak;  // written by its rank's thread only
};

class CountingComm final : public testing::ForwardingComm {
 public:
  CountingComm(Comm& inner, SendsInFlight& count) : ForwardingComm(inner), count_(count) {}

 protected:
  void on_post(Post post, int) override {
    if (post != Post::kSend) return;
    const auto me = static_cast<size_t>(rank());
    count_.peak[me] = std::max(count_.peak[me], ++count_.now[me]);
  }
  void on_received(int peer) override { --count_.now[static_cast<size_t>(peer)]; }

 private:
  SendsInFlight& count_;
};

// Pacing bounds the sends in flight. A leaf of the tree at depth d sends
// segment j up in round (D-d)+j and receives segment i of the sum in round
// D+d-1+i (the program's rounds, read below). Paced, its send of round u is
// posted only while its next receive is at round u - kLead or later; that
// receive (segment i) comes after the root has summed segments 0..i-1, so
// its parent has received the leaf's first i segments: at most
// (D+d-1+kLead) - (D-d) + 1 = 2d + kLead of its sends are ever unreceived,
// whatever the segment count S. Unpaced, a leaf's sends need nothing it
// receives and all S leave at once. Checked on a running world (every
// leaf's peak), and on a leaf whose world never answers: paced it posts
// exactly its bound and stops; with the same program unpaced it posts all S.
TEST(TreeProgram, APacedLeafHasNoMoreSendsInFlightThanItsLeadAllows) {
  for (int n : {4, 7}) {
    ProgramShape s = shape_of(n, 48 * 1024);  // S = 48 segments of 4 KiB
    for (int r = 0; r < n; ++r) s.node.push_back(r);  // a host per rank: paced
    const Program paced = tree_program(s);
    ASSERT_TRUE(paced.paced);
    const int64_t segments = s.segments(s.count);
    const EngineOptions options{.segment_bytes = s.segment_bytes, .tag = 79};
    const HeapTree tree{n, 0};
    // Each leaf's bound, from its first send's and first receive's rounds.
    std::vector<int> bound(static_cast<size_t>(n), -1);
    for (int r = 0; r < n; ++r) {
      if (tree.child(r, 0) >= 0) continue;
      const auto& steps = paced.steps[static_cast<size_t>(r)];
      const auto first = [&](StepKind kind) {
        return std::find_if(steps.begin(), steps.end(), [&](const Step& t) { return t.kind == kind; })
            ->round;
      };
      bound[static_cast<size_t>(r)] = first(StepKind::kRecv) + Engine::kLead - first(StepKind::kSend) + 1;
      ASSERT_EQ(bound[static_cast<size_t>(r)], 2 * tree.depth(r) + Engine::kLead) << "rank " << r;
      ASSERT_LT(bound[static_cast<size_t>(r)], segments);  // so the bound says something
    }

    SendsInFlight running(n);
    std::vector<std::vector<float>> out(static_cast<size_t>(n));
    run_inproc(n, [&](Comm& world) {
      CountingComm comm(world, running);
      Engine engine;
      engine.plan(paced, comm.rank(), options);
      auto data = testing::make_input(6, comm.rank(), s.count);
      engine.run(comm, data);
      out[static_cast<size_t>(comm.rank())] = std::move(data);
    });
    EXPECT_EQ(testing::count_wrong(out[0], 6, n), 0) << "N = " << n;
    for (int r = 0; r < n; ++r)
      if (bound[static_cast<size_t>(r)] >= 0)
        EXPECT_LE(running.peak[static_cast<size_t>(r)], bound[static_cast<size_t>(r)])
            << "N = " << n << ", leaf " << r;

    const Program unpaced = [&] {
      Program p = paced;
      p.paced = false;
      return p;
    }();
    const int leaf = n - 1;  // the deepest
    for (const Program* p : {&paced, &unpaced}) {
      auto world = make_inproc_world(n, {.timeout_s = 0.05});
      SendsInFlight stalled(n);
      CountingComm comm(*world[static_cast<size_t>(leaf)], stalled);
      Engine engine;
      engine.plan(*p, leaf, options);
      auto data = testing::make_input(6, leaf, s.count);
      EXPECT_THROW(engine.run(comm, data), TimeoutError);  // the sum never comes
      EXPECT_EQ(stalled.peak[static_cast<size_t>(leaf)],
                p->paced ? bound[static_cast<size_t>(leaf)] : segments)
          << "N = " << n << (p->paced ? ", paced" : ", unpaced");
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

INSTANTIATE_TEST_SUITE_P(Allreduce, Programs, ::testing::ValuesIn(shapes()), [](const auto& info) {
  return std::to_string(info.param.ranks) + "ranks_" + std::to_string(info.param.count) + "floats";
});

// A program whose two ends disagree is refused before anything runs.
TEST(ProgramValidation, ASendWithoutItsReceiveOrOfAnotherSizeIsNamed) {
  Program p("broken", 2, 10);
  p.transfer(0, 0, 1, 0, 10, true);
  p.steps[1].back().count = 9;  // received as 9 of the 10 sent
  try {
    p.validate();
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("received as 9 elements"));
  }
  Program q("unmatched", 2, 10);
  q.transfer(0, 0, 1, 0, 10, true);
  q.steps[1].clear();
  EXPECT_THROW(q.validate(), Error);
  Program r("outside", 2, 10);
  r.transfer(0, 0, 1, 5, 6, false);
  EXPECT_THROW(r.validate(), Error);
}

// A star (everyone to rank 0, added in rank order, the sum back), written
// here as a program: the engine runs it and sums like the reference, with
// identical bits, in every element type.
Program star(int ranks, int64_t count) {
  Program p("star", ranks, count);
  for (int r = 1; r < ranks; ++r) p.transfer(0, r, 0, 0, count, true);
  for (int r = 1; r < ranks; ++r) p.transfer(1, 0, r, 0, count, false);
  p.finish();
  return p;
}

TEST(Engine, RunsAProgramWrittenInATest) {
  for (ElementType t : {ElementType::kFp32, ElementType::kBf16, ElementType::kFp16})
    for (int n : {1, 2, 5})
      for (int64_t count : {int64_t{0}, int64_t{3}, int64_t{70001}}) {
        const Program p = star(n, count);
        p.validate();
        std::vector<std::vector<float>> out(static_cast<size_t>(n));
        run_inproc(n, [&](Comm& comm) {
          Engine engine;
          engine.plan(p, comm.rank(), {.segment_bytes = 8192, .dtype = t, .accumulate_in_dtype = false, .tag = 77});
          auto data = testing::make_input(4, comm.rank(), count);
          engine.run(comm, data);
          out[static_cast<size_t>(comm.rank())] = std::move(data);
        });
        EXPECT_EQ(testing::count_wrong(out[0], 4, n, 0, testing::tolerance(t, n)), 0);
        for (int r = 1; r < n; ++r) EXPECT_TRUE(testing::same_bits(out[static_cast<size_t>(r)], out[0]));
      }
}

}  // namespace
}  // namespace psar
