// The Comm contract on the MPI transport (run under mpirun -np 2 and 4).

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>

#include "comm/mpi_comm.h"
#include "comm/netem.h"
#include "tests/common/mpi_world.h"
#include "core/timer.h"
#include "core/errors.h"

namespace psar {
namespace {

using ::testing::HasSubstr;

MpiComm& world() { return testing::mpi_world(); }

TEST(MpiComm, RingExchangeDeliversAndCounts) {
  Comm& c = world();
  c.reset_counters();
  const int n = c.size(), r = c.rank();
  std::vector<float> out(1000, static_cast<float>(r)), in(1000, -1);
  c.sendrecv((r + 1) % n, std::span<const float>(out), (r + n - 1) % n, std::span<float>(in), 3);
  for (float v : in) ASSERT_EQ(v, static_cast<float>((r + n - 1) % n));
  EXPECT_EQ(c.counters().bytes_sent, 4000);
  EXPECT_EQ(c.counters().messages_recv, 1);
}

TEST(MpiComm, LargerMessageThanPostedIsACommError) {
  Comm& c = world();
  if (c.rank() < 2) {
    std::vector<char> buf(c.rank() == 0 ? 64 : 32);
    if (c.rank() == 0) {
      c.send(1, std::span<const char>(buf), 11);
    } else {
      try {
        c.recv(0, std::span<char>(buf), 11);
        ADD_FAILURE() << "no error";
      } catch (const CommError& e) {
        EXPECT_THAT(e.what(), HasSubstr("recv from rank 0"));
      }
    }
  }
  c.barrier();
}

TEST(MpiComm, SmallerMessageThanPostedIsACommError) {
  Comm& c = world();
  if (c.rank() < 2) {
    std::vector<char> buf(c.rank() == 0 ? 16 : 32);
    if (c.rank() == 0) {
      c.send(1, std::span<const char>(buf), 12);
    } else {
      try {
        c.recv(0, std::span<char>(buf), 12);
        ADD_FAILURE() << "no error";
      } catch (const CommError& e) {
        EXPECT_THAT(e.what(), HasSubstr("expected 32 bytes, got 16"));
      }
    }
  }
  c.barrier();
}

TEST(MpiComm, MissingSenderTimesOutNamingThePeer) {
  Comm& c = world();
  if (c.rank() == 1) {
    const double saved = c.timeout();
    c.set_timeout(0.3);
    float x;
    try {
      Comm::OpScope op(c, "test op");
      c.recv(0, std::span<float>(&x, 1), 77);
      ADD_FAILURE() << "no timeout";
    } catch (const TimeoutError& e) {
      EXPECT_THAT(e.what(), HasSubstr("test op: recv from rank 0 (tag 77"));
    }
    c.set_timeout(saved);
  }
  c.barrier();
}

TEST(MpiComm, SplitAndControlPlane) {
  Comm& c = world();
  auto sub = c.split(c.rank() % 2, c.rank());
  EXPECT_EQ(sub->size(), (c.size() + 1 - c.rank() % 2) / 2);
  double expect = 0;
  for (int r = c.rank() % 2; r < c.size(); r += 2) expect += r;
  EXPECT_EQ(sub->allreduce_sum(c.rank()), expect);
  EXPECT_EQ(c.allreduce_max(c.rank()), c.size() - 1);
}

TEST(MpiComm, EmulatedNetworkDeliversOnTheModelsSchedule) {
  // 1 MiB from rank 0 to rank 1 over a 1 Gbit/s, 50 µs NIC: delivered n/B + L
  // after the post (best of 5 attempts within 10% + 2 ms; see netem_test.cc).
  Comm& plain = world();
  MpiComm net(MPI_COMM_WORLD);
  net.set_network(std::make_shared<Nic>(NetModel{1.25e8, 50e-6}));
  const size_t n = 1 << 20;
  const double model = n / 1.25e8 + 50e-6;
  std::vector<std::byte> buf(n);
  double best = 1e9;
  for (int attempt = 0; attempt < 5; ++attempt) {
    plain.barrier();
    if (net.rank() == 0) {
      double posted = now_seconds();
      net.send(1, std::span<const std::byte>(buf));
      plain.send(1, std::span<const double>(&posted, 1));  // outside the emulation
    } else if (net.rank() == 1) {
      net.recv(0, std::span<std::byte>(buf));
      const double done = now_seconds();
      double posted = 0;
      plain.recv(0, std::span<double>(&posted, 1));
      EXPECT_GE(done - posted, model - 100e-6) << "faster than the wire allows";
      best = std::min(best, done - posted);
    }
  }
  if (net.rank() == 1) EXPECT_LE(best, model * 1.10 + 2e-3) << "model " << model << " s";
  plain.barrier();
}

TEST(MpiComm, TheProcessesOfANodeShareItsNicInSharedMemory) {
  // Nodes of 2 processes: both ranks of a node post a message of n bytes on
  // the node's NIC at the same model time t; it carries them one after the
  // other, so one leaves at t + n/B and the other at t + 2n/B, whichever
  // comes first (model times, no clock involved). Each rank's links inside
  // the node are its own. The control plane runs on `plain`, so that only
  // these messages pass through the NICs.
  MpiComm net(MPI_COMM_WORLD);
  MpiComm& plain = world();
  NetModel m{1.25e8, 50e-6};
  m.node_size = 2;
  m.intra_bandwidth = 5e8;
  apply_network_model(net, m);
  ASSERT_TRUE(net.network() && net.intra_network());
  const size_t n = 1 << 20;
  const double t = 1000.0, once = n / m.bandwidth;
  std::vector<double> left;
  for (const auto& v : plain.allgather_bytes(std::as_bytes(std::span<const double>(
           std::array<double, 1>{net.network()->depart(n, t)}))))
    left.push_back(*reinterpret_cast<const double*>(v.data()));
  for (int node = 0; node < net.size() / 2; ++node) {
    const double a = std::min(left[2 * node], left[2 * node + 1]);
    const double b = std::max(left[2 * node], left[2 * node + 1]);
    EXPECT_DOUBLE_EQ(a, t + once) << "node " << node;
    EXPECT_DOUBLE_EQ(b, t + 2 * once) << "node " << node << ": its NIC did not serialize";
  }
  EXPECT_DOUBLE_EQ(net.intra_network()->depart(n, t), t + n / m.intra_bandwidth);
  // The ingress too: both ranks' arrivals of n at t fill one busy interval.
  plain.barrier();
  std::vector<double> in;
  for (const auto& v : plain.allgather_bytes(std::as_bytes(std::span<const double>(
           std::array<double, 1>{net.network()->arrive(n, t)}))))
    in.push_back(*reinterpret_cast<const double*>(v.data()));
  for (int node = 0; node < net.size() / 2; ++node) {
    EXPECT_DOUBLE_EQ(std::min(in[2 * node], in[2 * node + 1]), t + m.latency) << "node " << node;
    EXPECT_DOUBLE_EQ(std::max(in[2 * node], in[2 * node + 1]), t + m.latency + once)
        << "node " << node << ": its ingress did not serialize";
  }
  // Nodes known; a rank alone on its node (odd sizes) has a NIC of its own.
  std::vector<int> expect(static_cast<size_t>(net.size()));
  for (int r = 0; r < net.size(); ++r) expect[static_cast<size_t>(r)] = r / 2;
  EXPECT_EQ(net.nodes(), expect);
}

TEST(MpiComm, OneRankPerNodeHasANicOfItsOwn) {
  MpiComm net(MPI_COMM_WORLD);
  NetModel m{1.25e8, 50e-6};
  m.node_size = 1;
  apply_network_model(net, m);
  EXPECT_TRUE(net.network() && net.intra_network());
  EXPECT_DOUBLE_EQ(net.network()->depart(1000, 5.0), 5.0 + 1000 / m.bandwidth);
  std::vector<int> expect(static_cast<size_t>(net.size()));
  for (int r = 0; r < net.size(); ++r) expect[static_cast<size_t>(r)] = r;
  EXPECT_EQ(net.nodes(), expect);
}

}  // namespace
}  // namespace psar
