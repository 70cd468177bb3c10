// Network emulation: delivery times of messages of known sizes against the
// model of comm/netem.h (1 Gbit/s, 50 µs per message), measured from the
// moments the senders posted. Tolerance, stated: within 10% + 2 ms of the
// model, in the best of up to 5 attempts (a thread preempted between noting
// its post time and posting, or slow to wake on a loaded 2-core host, only
// ever makes an attempt late); and never earlier than the model allows, less
// 100 µs, in any attempt. Model terms are 2–12 ms, so a lost or doubled n/B
// term cannot pass.

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "comm/inproc_comm.h"
#include "comm/netem.h"
#include "core/timer.h"

namespace psar {
namespace {

constexpr double kBandwidth = 1e9 / 8;  // 1 Gbit/s in bytes/s
constexpr double kLatency = 50e-6;

// One attempt's verdict: every measurement is checked; lateness is noted.
struct Attempt {
  std::mutex mu;
  bool late = false;
  std::string why;
};
thread_local Attempt* current = nullptr;

void expect_time(double measured, double model, const std::string& what) {
  EXPECT_GE(measured, model - 100e-6) << what << ": faster than the wire allows";
  if (measured > model * 1.10 + 2e-3) {
    std::lock_guard<std::mutex> lock(current->mu);
    current->late = true;
    current->why += what + ": measured " + std::to_string(measured) + " s, model " +
                    std::to_string(model) + " s; ";
  }
}

// Post time of each rank's (first) send, recorded just before posting.
using PostTimes = std::array<std::atomic<double>, 8>;

void run_emulated(int n, const std::function<void(Comm&, PostTimes&)>& fn,
                  const NetModel& model = NetModel{kBandwidth, kLatency}) {
  std::string last;
  for (int attempt = 0; attempt < 5; ++attempt) {
    Attempt verdict;
    PostTimes posted{};
    run_inproc(n, [&](Comm& c) {
      current = &verdict;
      apply_network_model(c, model);
      fn(c, posted);
    });
    if (!verdict.late) return;
    last = verdict.why;
  }
  ADD_FAILURE() << "late beyond 10% + 2 ms in all 5 attempts; last: " << last;
}

TEST(NetworkEmulation, ALoneMessageTakesSizeOverBandwidthPlusLatency) {
  const size_t n = 1 << 20;
  run_emulated(2, [&](Comm& c, PostTimes& posted) {
    std::vector<std::byte> buf(n);
    if (c.rank() == 0) {
      posted[0] = now_seconds();
      c.send(1, std::span<const std::byte>(buf));
      expect_time(now_seconds() - posted[0], n / kBandwidth, "send completes when egress is done");
    } else {
      c.recv(0, std::span<std::byte>(buf));
      expect_time(now_seconds() - posted[0], n / kBandwidth + kLatency, "delivery");
    }
  });
}

TEST(NetworkEmulation, BackToBackMessagesSerializeOnTheEgress) {
  const size_t n = 256 << 10;
  run_emulated(2, [&](Comm& c, PostTimes& posted) {
    std::vector<std::byte> a(n), b(n);
    if (c.rank() == 0) {
      posted[0] = now_seconds();
      Request r1 = c.isend(1, std::span<const std::byte>(a));
      Request r2 = c.isend(1, std::span<const std::byte>(b));
      r1.wait();
      r2.wait();
    } else {
      c.recv(0, std::span<std::byte>(a));
      expect_time(now_seconds() - posted[0], n / kBandwidth + kLatency, "first");
      c.recv(0, std::span<std::byte>(b));
      expect_time(now_seconds() - posted[0], 2 * n / kBandwidth + kLatency, "second");
    }
  });
}

TEST(NetworkEmulation, IncastSerializesOnTheReceiversIngress) {
  // Three senders, one receiver: the receiver's NIC is the bottleneck (the
  // parameter server's situation). In post order: D = max(t_i + n/B + L, D + n/B).
  const size_t n = 512 << 10;
  run_emulated(4, [&](Comm& c, PostTimes& posted) {
    std::vector<std::byte> buf(n);
    if (c.rank() != 0) {
      posted[c.rank()] = now_seconds();
      c.send(0, std::span<const std::byte>(buf));
    } else {
      std::vector<std::vector<std::byte>> in(3, std::vector<std::byte>(n));
      std::vector<Request> reqs;
      for (int r = 1; r <= 3; ++r) reqs.push_back(c.irecv(r, std::span<std::byte>(in[r - 1])));
      wait_all(reqs);
      const double done = now_seconds();
      std::vector<double> t = {posted[1], posted[2], posted[3]};
      std::sort(t.begin(), t.end());
      double d = 0;
      for (double ti : t) d = std::max(ti + n / kBandwidth + kLatency, d + n / kBandwidth);
      expect_time(done - t[0], d - t[0], "incast of three");
      // Every actual post came after the first noted one: the ingress must
      // have serialized all three behind it.
      EXPECT_GE(done - t[0], 3 * n / kBandwidth) << "ingress must serialize the three";
    }
  });
}

TEST(NetworkEmulation, EgressAndIngressAreIndependentFullDuplex) {
  const size_t n = 1 << 20;
  run_emulated(2, [&](Comm& c, PostTimes& posted) {
    std::vector<std::byte> out(n), in(n);
    posted[c.rank()] = now_seconds();
    c.sendrecv(1 - c.rank(), std::span<const std::byte>(out), 1 - c.rank(),
               std::span<std::byte>(in));
    // My receive depends on when the peer posted, not on my own send.
    expect_time(now_seconds() - posted[1 - c.rank()], n / kBandwidth + kLatency, "exchange");
  });
}

TEST(NetworkEmulation, SplitCommunicatorsShareTheRanksNic) {
  run_inproc(2, [](Comm& c) {
    c.set_network(std::make_shared<Nic>(NetModel{kBandwidth, kLatency}));
    auto sub = c.split(0, c.rank());
    EXPECT_EQ(sub->network(), c.network());
  });
}

TEST(NetworkEmulation, ModelArithmetic) {
  Nic nic(NetModel{1000.0, 0.5});  // 1000 B/s, 0.5 s
  EXPECT_DOUBLE_EQ(nic.depart(100, 10.0), 10.1);
  EXPECT_DOUBLE_EQ(nic.depart(100, 10.0), 10.2);   // queued behind the first
  EXPECT_DOUBLE_EQ(nic.arrive(100, 10.1), 10.6);   // + latency
  EXPECT_DOUBLE_EQ(nic.arrive(1000, 10.1), 11.6);  // ingress busy: 10.6 + 1.0
  EXPECT_DOUBLE_EQ(nic.arrive(0, 10.1), 10.6);     // empty: occupies nothing
  EXPECT_EQ(NetModel{}.describe(), "off");
  EXPECT_EQ((NetModel{1.25e8, 50e-6}.describe()), "1Gbit, 50us");
}

// A receiver that completes its receives in another order than they arrived
// (rank order, say, while the senders' shifted schedule delivers them in
// reverse) must not serialize them in that order: each takes the idle slot it
// arrived in.
TEST(NetworkEmulation, IngressFollowsArrivalNotCompletionOrder) {
  Nic in_order(NetModel{1000.0, 0.5}), reversed(NetModel{1000.0, 0.5});
  const double sent[] = {11.0, 12.0, 13.0};  // egress ends 1 s apart, 1000 B each
  for (double e : sent) EXPECT_DOUBLE_EQ(in_order.arrive(1000, e), e + 0.5);
  for (int i = 2; i >= 0; --i) EXPECT_DOUBLE_EQ(reversed.arrive(1000, sent[i]), sent[i] + 0.5);
}

TEST(NetworkEmulation, IngressFirstFitSkipsGapsTooSmall) {
  Nic nic(NetModel{1000.0, 0.0});
  EXPECT_DOUBLE_EQ(nic.arrive(1000, 2.0), 2.0);   // busy [1, 2]
  EXPECT_DOUBLE_EQ(nic.arrive(1000, 3.5), 3.5);   // busy [2.5, 3.5]; gap [2, 2.5]
  EXPECT_DOUBLE_EQ(nic.arrive(1000, 2.2), 4.5);   // needs 1 s: only after 3.5
  EXPECT_DOUBLE_EQ(nic.arrive(400, 2.1), 2.4);    // 0.4 s fits the gap [2, 2.5]
  EXPECT_DOUBLE_EQ(nic.arrive(100, 2.0), 2.5);    // what is left of it: [2.4, 2.5]
  EXPECT_DOUBLE_EQ(nic.arrive(100, 0.5), 0.5);    // long before anything: idle
  // Incast of equal messages completed in any order fills back to back.
  Nic incast(NetModel{1000.0, 0.0});
  EXPECT_DOUBLE_EQ(incast.arrive(500, 5.0), 5.0);
  EXPECT_DOUBLE_EQ(incast.arrive(500, 5.0), 5.5);
  EXPECT_DOUBLE_EQ(incast.arrive(500, 5.0), 6.0);
}

// ---- two levels: nodes of 2 ranks, 1 Gbit/s NICs shared by a node's ranks,
// 4 Gbit/s links inside a node (comm/netem.h) ----

constexpr double kIntraBandwidth = 4e9 / 8;
constexpr double kIntraLatency = 10e-6;

NetModel two_level() {
  NetModel m{kBandwidth, kLatency};
  m.node_size = 2;
  m.intra_bandwidth = kIntraBandwidth;
  m.intra_latency = kIntraLatency;
  return m;
}

TEST(TwoLevelNetwork, InsideANodeAMessageTakesTheIntraLinksTime) {
  const size_t n = 1 << 20;  // 2.1 ms inside, 8.4 ms through the NIC
  run_emulated(4, [&](Comm& c, PostTimes& posted) {
    std::vector<std::byte> buf(n);
    if (c.rank() == 0) {
      posted[0] = now_seconds();
      c.send(1, std::span<const std::byte>(buf));
    } else if (c.rank() == 1) {
      c.recv(0, std::span<std::byte>(buf));
      expect_time(now_seconds() - posted[0], n / kIntraBandwidth + kIntraLatency, "inside node 0");
    }
  }, two_level());
}

TEST(TwoLevelNetwork, TheRanksOfANodeShareItsNic) {
  // Ranks 0 and 1 (node 0) each send n to ranks 2 and 3 (node 1) at once:
  // both leave through node 0's NIC, one after the other. Posts t1 ≤ t2:
  // the later delivery is at max(t2, t1 + n/B) + n/B + L.
  const size_t n = 512 << 10;
  std::array<std::atomic<double>, 4> done{};  // receivers' completion times
  run_emulated(4, [&](Comm& c, PostTimes& posted) {
    std::vector<std::byte> buf(n);
    if (c.rank() < 2) {
      posted[c.rank()] = now_seconds();
      c.send(c.rank() + 2, std::span<const std::byte>(buf));
    } else {
      c.recv(c.rank() - 2, std::span<std::byte>(buf));
      done[c.rank()] = now_seconds();
    }
    c.barrier();
    if (c.rank() == 0) {
      const double t1 = std::min<double>(posted[0], posted[1]);
      const double t2 = std::max<double>(posted[0], posted[1]);
      const double last = std::max<double>(done[2], done[3]);
      expect_time(last - t1, std::max(t2, t1 + n / kBandwidth) + n / kBandwidth + kLatency - t1,
                  "two messages out of one node");
      EXPECT_GE(last - t1, 2 * n / kBandwidth) << "node 0's NIC must serialize them";
    }
  }, two_level());
}

TEST(TwoLevelNetwork, TrafficInsideANodeLeavesItsNicFree) {
  // Rank 0 sends n to rank 2 (node 1) while rank 1 sends n to rank 0 (node 0):
  // neither waits for the other.
  const size_t n = 1 << 20;
  run_emulated(4, [&](Comm& c, PostTimes& posted) {
    std::vector<std::byte> out(n), in(n);
    if (c.rank() == 0) {
      posted[0] = now_seconds();
      Request s = c.isend(2, std::span<const std::byte>(out));
      c.recv(1, std::span<std::byte>(in));
      expect_time(now_seconds() - posted[1], n / kIntraBandwidth + kIntraLatency, "inside");
      s.wait();
    } else if (c.rank() == 1) {
      posted[1] = now_seconds();
      c.send(0, std::span<const std::byte>(out));
    } else if (c.rank() == 2) {
      c.recv(0, std::span<std::byte>(in));
      expect_time(now_seconds() - posted[0], n / kBandwidth + kLatency, "between nodes");
    }
  }, two_level());
}

TEST(TwoLevelNetwork, NodesShareOneNicAndEveryRankHasItsOwnLinksInside) {
  // 5 ranks in nodes of 2: {0, 1}, {2, 3}, {4}.
  std::array<std::shared_ptr<Nic>, 5> nics, intra;
  std::array<std::vector<int>, 5> nodes;
  run_inproc(5, [&](Comm& c) {
    apply_network_model(c, two_level());
    nics[c.rank()] = c.network();
    intra[c.rank()] = c.intra_network();
    auto sub = c.split(c.rank() % 2, c.rank());  // {0, 2, 4}, {1, 3}
    nodes[c.rank()] = sub->nodes();
    EXPECT_EQ(sub->network(), c.network());
    EXPECT_EQ(sub->intra_network(), c.intra_network());
  });
  EXPECT_EQ(nics[0], nics[1]);
  EXPECT_EQ(nics[2], nics[3]);
  EXPECT_NE(nics[0], nics[2]);
  EXPECT_NE(nics[4], nics[2]);
  for (int r = 0; r < 5; ++r) {
    ASSERT_TRUE(nics[r] && intra[r]);
    EXPECT_DOUBLE_EQ(nics[r]->model().bandwidth, kBandwidth);
    EXPECT_DOUBLE_EQ(intra[r]->model().bandwidth, kIntraBandwidth);
    for (int q = 0; q < r; ++q) EXPECT_NE(intra[r], intra[q]);
  }
  EXPECT_EQ(nodes[0], (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(nodes[1], (std::vector<int>{0, 1}));
  EXPECT_EQ(two_level().describe(), "1Gbit, 50us; nodes of 2, inside 4Gbit, 10us");
}

TEST(TwoLevelNetwork, NodeSizeWithoutEmulationStillSetsTheNodes) {
  NetModel m;
  m.node_size = 3;
  run_inproc(4, [&](Comm& c) {
    apply_network_model(c, m);
    EXPECT_EQ(c.nodes(), (std::vector<int>{0, 0, 0, 1}));
    EXPECT_EQ(c.network(), nullptr);
  });
}

TEST(TwoLevelNetwork, AnUnlimitedLinkCostsOnlyItsLatency) {
  Nic nic(NetModel{0.0, 0.5});
  EXPECT_DOUBLE_EQ(nic.depart(1000, 10.0), 10.0);
  EXPECT_DOUBLE_EQ(nic.arrive(1000, 10.0), 10.5);
  EXPECT_DOUBLE_EQ(nic.arrive(1000, 10.0), 10.5);  // nothing occupies the ingress
}

}  // namespace
}  // namespace psar
