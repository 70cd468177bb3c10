// The Comm contract on the in-process transport: ordering, exact sizes,
// deadlines that name the peer, failure propagation, split, control plane.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <numeric>
#include <thread>

#include "comm/inproc_comm.h"
#include "core/errors.h"
#include "core/timer.h"

namespace psar {
namespace {

using ::testing::HasSubstr;

TEST(InProcComm, MessagesBetweenAPairArriveInOrderPerTag) {
  run_inproc(2, [](Comm& c) {
    if (c.rank() == 0) {
      for (int i = 0; i < 100; ++i) c.send(1, std::span<const int>(&i, 1), i % 3);
    } else {
      // Receive tag 2 first: per-tag FIFO, tags independent.
      for (int tag : {2, 0, 1})
        for (int i = tag; i < 100; i += 3) {
          int v = -1;
          c.recv(0, std::span<int>(&v, 1), tag);
          EXPECT_EQ(v, i);
        }
    }
  });
}

TEST(InProcComm, PostedReceivesMatchInPostOrder) {
  run_inproc(2, [](Comm& c) {
    if (c.rank() == 1) {
      int a = 0, b = 0;
      Request ra = c.irecv(0, std::span<int>(&a, 1));
      Request rb = c.irecv(0, std::span<int>(&b, 1));
      c.send(0, std::span<const int>(&a, 1), 9);  // go
      rb.wait();
      ra.wait();
      EXPECT_EQ(a, 1);
      EXPECT_EQ(b, 2);
    } else {
      int go = 0;
      c.recv(1, std::span<int>(&go, 1), 9);
      for (int v : {1, 2}) c.send(1, std::span<const int>(&v, 1));
    }
  });
}

TEST(InProcComm, SizeMismatchIsACommErrorNamingPeerAndSizes) {
  std::string error;
  try {
    run_inproc(2, [](Comm& c) {
      std::vector<float> v(c.rank() == 0 ? 10 : 12);
      if (c.rank() == 0) c.send(1, std::span<const float>(v));
      else c.recv(0, std::span<float>(v));
    });
  } catch (const CommError& e) {
    error = e.what();
  }
  EXPECT_THAT(error, HasSubstr("recv from rank 0"));
  EXPECT_THAT(error, HasSubstr("expected 48 bytes, got 40"));
}

TEST(InProcComm, WaitPastTheDeadlineIsATimeoutNamingOperationAndPeer) {
  InProcOptions o;
  o.timeout_s = 0.2;
  std::string error;
  const Stopwatch clock;
  try {
    run_inproc(2, [](Comm& c) {
      Comm::OpScope op(c, "test collective");
      if (c.rank() == 1) {
        float x;
        c.recv(0, std::span<float>(&x, 1), 5);  // rank 0 never sends
      } else {
        std::this_thread::sleep_for(std::chrono::milliseconds(600));
      }
    }, o);
  } catch (const TimeoutError& e) {
    error = e.what();
  }
  EXPECT_THAT(error, HasSubstr("test collective"));
  EXPECT_THAT(error, HasSubstr("recv from rank 0 (tag 5"));
  EXPECT_THAT(error, HasSubstr("timed out"));
  EXPECT_LT(clock.seconds(), 5.0);
}

TEST(InProcComm, APeerThatFailsWakesItsWaitersAtOnce) {
  InProcOptions o;
  o.timeout_s = 30;  // far longer than the test may take
  const Stopwatch clock;
  std::string error;
  try {
    run_inproc(3, [](Comm& c) {
      if (c.rank() == 2) throw std::runtime_error("simulated crash");
      float x;
      c.recv(2, std::span<float>(&x, 1));
    }, o);
  } catch (const std::exception& e) {
    error = e.what();
  }
  EXPECT_EQ(error, "simulated crash");  // the root cause is what surfaces
  EXPECT_LT(clock.seconds(), 5.0);
}

TEST(InProcComm, WaitersOnAFailedPeerSeeItsName) {
  auto comms = make_inproc_world(2);
  inproc_fail(*comms[1], 1, "killed by test");
  float x;
  try {
    comms[0]->recv(1, std::span<float>(&x, 1));
    FAIL();
  } catch (const CommError& e) {
    EXPECT_THAT(e.what(), HasSubstr("peer rank 1 failed: killed by test"));
  }
}

TEST(InProcComm, SplitGroupsByColorAndOrdersByKey) {
  run_inproc(6, [](Comm& c) {
    // colors: even/odd ranks; key reverses the order
    auto sub = c.split(c.rank() % 2, -c.rank());
    EXPECT_EQ(sub->size(), 3);
    const int expected_rank = 2 - c.rank() / 2;
    EXPECT_EQ(sub->rank(), expected_rank);
    // The sub-communicator carries traffic of its own.
    const double sum = sub->allreduce_sum(c.rank());
    EXPECT_EQ(sum, c.rank() % 2 ? 1 + 3 + 5 : 0 + 2 + 4);
  });
}

TEST(InProcComm, ControlPlaneCollectivesAgreeAndAreNotCounted) {
  run_inproc(5, [](Comm& c) {
    c.barrier();
    std::vector<int> mine(static_cast<size_t>(c.rank()), c.rank());
    const auto all = c.allgather_bytes(std::as_bytes(std::span<const int>(mine)));
    ASSERT_EQ(all.size(), 5u);
    for (int r = 0; r < 5; ++r) EXPECT_EQ(all[r].size(), sizeof(int) * r);
    int v = c.rank() == 3 ? 42 : 0;
    c.broadcast_bytes(std::as_writable_bytes(std::span<int>(&v, 1)), 3);
    EXPECT_EQ(v, 42);
    EXPECT_EQ(c.allreduce_max(c.rank()), 4);
    EXPECT_EQ(c.counters().bytes_sent, 0);
    EXPECT_EQ(c.counters().messages_recv, 0);
  });
}

// tolerate_failures: rank 3 takes part once, then goes silent (as a killed
// process does). Rank 0 gives up on it after one deadline; the others' sums,
// maxima, gathers and barriers go on over ranks 0..2 and cost no second
// deadline. Without it, the same silence is a TimeoutError.
TEST(InProcComm, AToleratingControlPlaneGoesOnWithoutASilentRank) {
  InProcOptions o;
  o.timeout_s = 1.0;
  std::vector<double> later_s(3);
  run_inproc(4, [&](Comm& c) {
    c.tolerate_failures(true);
    EXPECT_EQ(c.allreduce_sum(c.rank() + 1), 1 + 2 + 3 + 4);
    if (c.rank() == 3) return;
    EXPECT_EQ(c.allreduce_sum(c.rank() + 1), 1 + 2 + 3);
    EXPECT_EQ(c.allreduce_max(c.rank()), 2);
    const Stopwatch clock;
    c.barrier();
    const int mine = c.rank();
    const auto all = c.allgather_bytes(std::as_bytes(std::span<const int>(&mine, 1)));
    ASSERT_EQ(all.size(), 4u);
    for (int r = 0; r < 3; ++r) EXPECT_EQ(all[r].size(), sizeof(int));
    EXPECT_TRUE(all[3].empty());
    later_s[c.rank()] = clock.seconds();
    if (c.rank() == 0) EXPECT_EQ(c.dead(), std::vector<int>{3});
    else EXPECT_TRUE(c.dead().empty());
  }, o);
  for (const double s : later_s) EXPECT_LT(s, 1.0);  // the dead rank is not waited for again

  std::string error;
  try {
    run_inproc(3, [](Comm& c) {
      if (c.rank() == 2) return;
      c.allreduce_sum(1.0);
    }, o);
  } catch (const TimeoutError& e) {
    error = e.what();
  }
  EXPECT_THAT(error, HasSubstr("timed out"));
}

TEST(InProcComm, CountersRecordBytesAndMessages) {
  run_inproc(2, [](Comm& c) {
    std::vector<float> v(100);
    c.sendrecv(1 - c.rank(), std::span<const float>(v), 1 - c.rank(), std::span<float>(v));
    EXPECT_EQ(c.counters().bytes_sent, 400);
    EXPECT_EQ(c.counters().bytes_recv, 400);
    EXPECT_EQ(c.counters().messages_sent, 1);
    EXPECT_EQ(c.counters().messages_recv, 1);
  });
}

TEST(InProcComm, ZeroByteMessagesAndSelfSends) {
  run_inproc(1, [](Comm& c) {
    int x = 7, y = 0;
    c.sendrecv(0, std::span<const int>(&x, 1), 0, std::span<int>(&y, 1));
    EXPECT_EQ(y, 7);
    c.sendrecv(0, std::span<const int>(), 0, std::span<int>());
  });
}

TEST(InProcComm, OutOfRangePeerIsAnError) {
  run_inproc(2, [](Comm& c) {
    int x = 0;
    EXPECT_THROW(c.send(2, std::span<const int>(&x, 1)), CommError);
  });
}

}  // namespace
}  // namespace psar
