// Spare servers (S ≥ N): one push_pull replayed on the emulated clock — the
// client's send order (send_order) through every worker's and every shard's
// Nic (comm/netem.h), times given, no sockets and no sleeping — takes the
// busiest NIC's bytes in one direction plus the pipeline fill, the closed form
// of ps_cost (docs/theory.md), within 10 %; and ps_cost against that closed
// form written out by hand.

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comm/netem.h"
#include "core/errors.h"
#include "core/timer.h"
#include "ps/cost.h"
#include "ps/on_the_wire.h"
#include "ps/sharding.h"

namespace psar::ps {
namespace {

constexpr double kGbit = 125e6;  // bytes per second
constexpr double kLatency = 50e-6;

// Replays one push_pull of `count` floats by `workers` workers over `shards`
// shards in chunks of `chunk_floats`, as the parameter server runs it under
// emulation: every worker posts all its requests at time 0 in send_order
// (Client::round), so they leave its egress back to back; a shard takes the
// requests in the order they left their senders (ps/on_the_wire.h), each at
// its ingress slot (Nic::arrive), and once a chunk has every worker's push
// it answers them in arrival order, each reply leaving its egress from then
// on (Server::answer_parked answers parked pulls in arrival order, then the
// completing push's own); a worker takes the replies in the order they left.
// `stagger` false sends every worker's chunks in worker 0's order (shard 0
// first for all). Returns when the last reply is delivered.
double replay(int workers, int shards, int64_t count, int64_t chunk_floats, bool stagger) {
  NetModel net;
  net.bandwidth = kGbit;
  net.latency = kLatency;
  const std::vector<KeyRange> plan = plan_shards(count, shards);
  std::vector<ShardLayout> layouts;
  std::vector<int64_t> chunks;
  for (int s = 0; s < shards; ++s) {
    layouts.push_back({s, plan[static_cast<size_t>(s)], chunk_floats});
    chunks.push_back(layouts.back().chunks());
  }
  std::vector<std::unique_ptr<Nic>> worker_nic, shard_nic;
  for (int w = 0; w < workers; ++w) worker_nic.push_back(std::make_unique<Nic>(net));
  for (int s = 0; s < shards; ++s) shard_nic.push_back(std::make_unique<Nic>(net));

  struct Message {
    double sent_at;
    int worker;
    int64_t chunk;
    size_t bytes;
  };
  std::vector<std::vector<Message>> to_shard(static_cast<size_t>(shards));
  for (int w = 0; w < workers; ++w)
    for (const ChunkRef& r : send_order(stagger ? w : 0, chunks)) {
      const size_t bytes = 4 * static_cast<size_t>(layouts[static_cast<size_t>(r.shard)]
                                                       .chunk(static_cast<int>(r.chunk))
                                                       .size());
      to_shard[static_cast<size_t>(r.shard)].push_back(
          {worker_nic[static_cast<size_t>(w)]->depart(bytes, 0.0), w, r.chunk, bytes});
    }
  std::vector<std::vector<Message>> to_worker(static_cast<size_t>(workers));
  for (int s = 0; s < shards; ++s) {
    auto& in = to_shard[static_cast<size_t>(s)];
    std::stable_sort(in.begin(), in.end(),
                     [](const Message& a, const Message& b) { return a.sent_at < b.sent_at; });
    Nic& nic = *shard_nic[static_cast<size_t>(s)];
    std::vector<std::vector<int>> arrived(static_cast<size_t>(chunks[static_cast<size_t>(s)]));
    double now = 0;  // the shard's own clock: it takes one request after another
    for (const Message& m : in) {
      now = std::max(now, nic.arrive(m.bytes, m.sent_at));
      auto& got = arrived[static_cast<size_t>(m.chunk)];
      got.push_back(m.worker);
      if (static_cast<int>(got.size()) < workers) continue;
      for (int w : got)
        to_worker[static_cast<size_t>(w)].push_back({nic.depart(m.bytes, now), w, m.chunk, m.bytes});
    }
  }
  double last = 0;
  for (int w = 0; w < workers; ++w) {
    auto& in = to_worker[static_cast<size_t>(w)];
    std::stable_sort(in.begin(), in.end(),
                     [](const Message& a, const Message& b) { return a.sent_at < b.sent_at; });
    for (const Message& m : in)
      last = std::max(last, worker_nic[static_cast<size_t>(w)]->arrive(m.bytes, m.sent_at));
  }
  return last;
}

struct SpareCase {
  int workers, shards;
  int64_t bytes, chunk_bytes;
};

class SpareServers : public ::testing::TestWithParam<SpareCase> {};

// With S ≥ N a push_pull of n bytes takes n/B plus the pipeline fill (the
// last chunk's max(N, S) replies) and two latencies — not the 2n/B of a NIC
// that sends and receives by turns, nor the ring's 2(N−1)/N·n/B.
TEST_P(SpareServers, PushPullTakesTheBusiestNicPlusTheFill) {
  const auto [workers, shards, bytes, chunk_bytes] = GetParam();
  const int64_t chunk = chunk_bytes / 4;
  const double t = replay(workers, shards, bytes / 4, chunk, /*stagger=*/true);
  const double closed =
      (static_cast<double>(bytes) + std::max(workers, shards) * static_cast<double>(chunk_bytes)) /
          kGbit +
      2 * kLatency;
  EXPECT_NEAR(t, closed, 0.10 * closed) << workers << " workers, " << shards << " shards";
  EXPECT_GE(t, static_cast<double>(bytes) / kGbit) << "faster than one NIC direction";
  const PsCost cost = ps_cost(workers, shards, bytes, chunk_bytes, /*shard_chunks=*/1);
  EXPECT_NEAR(t, cost.time(kLatency, 1 / kGbit), 0.10 * t);
}

INSTANTIATE_TEST_SUITE_P(Layouts, SpareServers,
                         ::testing::Values(SpareCase{4, 4, 16 << 20, 256 << 10},
                                           SpareCase{4, 4, 16 << 20, 1 << 20},
                                           SpareCase{8, 8, 16 << 20, 256 << 10},
                                           SpareCase{2, 4, 4 << 20, 128 << 10},
                                           SpareCase{3, 3, 6 << 20, 256 << 10}),
                         [](const ::testing::TestParamInfo<SpareCase>& p) {
                           return "N" + std::to_string(p.param.workers) + "_S" +
                                  std::to_string(p.param.shards) + "_" +
                                  std::to_string(p.param.bytes >> 20) + "MiB_chunk" +
                                  std::to_string(p.param.chunk_bytes >> 10) + "KiB";
                         });

// The control: when every worker sends in the same shard order, all N
// chunks of a round hit one shard's ingress at once and the last chunk's
// queue adds about (N − 1) chunks to the fill (23 instead of 20 chunk times
// for 16 MiB in 1 MiB chunks over 4 + 4).
TEST(SpareServers, StaggeredOrderBeatsEveryWorkerStartingAtShardZero) {
  const int64_t count = (16 << 20) / 4, chunk = (1 << 20) / 4;
  const double staggered = replay(4, 4, count, chunk, true);
  const double aligned = replay(4, 4, count, chunk, false);
  EXPECT_GT(aligned, 1.1 * staggered);
}

// A held message takes its ingress slot once the wire can have delivered
// it, and release() returns at once while the slot lasts (the holder goes on
// sending meanwhile), keeping the slot's message ahead of one handed over
// later though sent earlier; each comes out once its slot has ended.
TEST(OnTheWire, ReleaseNeverSleepsAndKeepsTheMessageInItsSlotFirst) {
  NetModel net;
  net.bandwidth = 1e6;  // 100 kB take 0.1 s of ingress
  net.latency = 0;
  Nic nic(net);
  OnTheWire<int> wire(&nic);
  double next = -1;
  EXPECT_FALSE(wire.release(next));
  EXPECT_EQ(next, 0) << "nothing held";
  const double sent = now_seconds();
  wire.hold(sent, 100000, 1);
  wire.hold(sent, 100000, 2);  // the same ingress right after the first: until sent + 0.1
  std::optional<int> first = wire.release(next);
  ASSERT_TRUE(first);
  EXPECT_EQ(*first, 1);
  EXPECT_FALSE(wire.release(next)) << "released before its ingress slot ended";
  EXPECT_GT(next, now_seconds()) << "release() slept through the slot";
  EXPECT_NEAR(next, sent + 0.1, 1e-9);
  wire.hold(sent - 1.0, 100000, 3);  // sent earlier, handed over later
  std::vector<int> order;
  for (double deadline = now_seconds() + 5; order.size() < 2 && now_seconds() < deadline;) {
    if (std::optional<int> m = wire.release(next)) order.push_back(*m);
    else wait_until(next);
  }
  EXPECT_EQ(order, (std::vector<int>{2, 3}));
  EXPECT_GE(now_seconds(), sent + 0.1);
}

TEST(SendOrder, RoundsOfOneChunkPerShardStartingAtTheWorkersOwnShard) {
  const std::vector<int64_t> chunks{2, 1, 2};
  EXPECT_EQ(send_order(1, chunks),
            (std::vector<ChunkRef>{{1, 0}, {2, 0}, {0, 0}, {2, 1}, {0, 1}}));
  EXPECT_EQ(send_order(3, chunks), send_order(0, chunks));
  // Every chunk exactly once.
  for (int w = 0; w < 5; ++w) EXPECT_EQ(send_order(w, chunks).size(), 5u);
}

// ps_cost against its closed form (docs/theory.md):
// 2α + (max(N·n_s, K·n) + max(N, S)·c)·β with c the job's chunk.
TEST(PsCost, MatchesTheClosedForm) {
  const int64_t n = 16 << 20, c = 1 << 20;
  for (int N : {1, 2, 4, 8})
    for (int S : {1, 2, 4, 8}) {
      const PsCost cost = ps_cost(N, S, n, c, 1);
      const double shard = static_cast<double>(n) / S;
      EXPECT_EQ(cost.alpha, 2.0);
      EXPECT_DOUBLE_EQ(cost.beta, std::max(N * shard, static_cast<double>(n)) +
                                      std::max(N, S) * std::min(static_cast<double>(c), shard))
          << N << " " << S;
      EXPECT_EQ(cost.sent_total, 2 * N * n);
      EXPECT_EQ(cost.sent_busiest, std::max<int64_t>(n, N * n / S));
    }
  // S = N: n/B plus N chunks; the ring takes 2(N − 1)/N·n/B.
  EXPECT_DOUBLE_EQ(ps_cost(4, 4, n, 256 << 10, 1).beta, n + 4.0 * (256 << 10));
  // Two workers per NIC double the worker's side.
  EXPECT_DOUBLE_EQ(ps_cost(4, 4, n, c, 1, 2).beta, 2.0 * n + 4.0 * c);
  // A shard smaller than a chunk is one message: c = n_s.
  EXPECT_DOUBLE_EQ(ps_cost(2, 4, 1 << 20, c, 1).beta, (1 << 20) + 4.0 * (256 << 10));
  // The automatic chunk rule with one worker: 16 MiB streams as 16 chunks of 1 MiB.
  EXPECT_EQ(ps_cost(1, 1, n, 4 << 20, 0).chunk_bytes, 1 << 20);
  EXPECT_THROW(ps_cost(0, 1, n, c, 1), ConfigError);
  EXPECT_THROW(ps_cost(2, 0, n, c, 1), ConfigError);
  EXPECT_THROW(ps_cost(2, 1, 6, c, 1), ConfigError);
  EXPECT_THROW(ps_cost(2, 1, n, c, 1, 3), ConfigError);
}

}  // namespace
}  // namespace psar::ps
