// The parameter server under network emulation (comm/netem.h): every push
// and reply crosses emulated NICs, so a job can never finish faster than the
// model allows — N pushes of M bytes serialize on one shard's ingress (N·M/B)
// and N replies on its egress — and the parameters are still the reference.

#include <gtest/gtest.h>

#include <algorithm>
#include <thread>

#include "core/timer.h"
#include "tests/ps/ps_test_util.h"

namespace psar::ps {
namespace {

using testing::initial_params;
using testing::LocalJob;
using testing::make_grad;

struct NetCase {
  int workers;
  int shards;
};

class EmulatedNetwork : public ::testing::TestWithParam<NetCase> {};

TEST_P(EmulatedNetwork, AStepTakesAtLeastTheBusiestNicsTransferTime) {
  const auto [workers, shards] = GetParam();
  constexpr int64_t kSize = 250000;  // 1 MB of floats
  constexpr int64_t kSteps = 3;
  NetModel net;
  net.bandwidth = 200e6;  // 200 MB/s: 5 ms per MB
  net.latency = 1e-3;
  const auto init = initial_params(kSize);
  LocalJob job(init, shards, workers, testing::server_options(), net);
  std::vector<std::vector<float>> finals(static_cast<size_t>(workers));
  Stopwatch clock;
  std::vector<std::thread> threads;
  for (int w = 0; w < workers; ++w)
    threads.emplace_back([&, w] {
      Client client(job.client(w));
      std::vector<float> params = init;
      for (int64_t t = 0; t < kSteps; ++t) client.push_pull(make_grad(w, t, kSize), params);
      finals[w] = params;
    });
  for (auto& t : threads) t.join();
  const double elapsed = clock.seconds();
  job.join();
  // Per step, the busiest shard's ingress takes in N·M/S bytes (its egress
  // sends as much back, full duplex: it may overlap the next step's pushes);
  // a worker sends M and only then can receive M, plus latency each way.
  const double bytes = 4.0 * kSize;
  const double shard_s = workers * bytes / shards / net.bandwidth;
  const double worker_s = 2.0 * bytes / net.bandwidth + 2 * net.latency;
  const double floor_s = kSteps * std::max(shard_s, worker_s);
  EXPECT_GE(elapsed, floor_s) << "faster than the emulated network allows";
  const auto ref = testing::reference_bsp(init, workers, kSteps, testing::sgd());
  for (int w = 0; w < workers; ++w) EXPECT_LT(testing::relative_error(finals[w], ref), 1e-6);
}

// Two workers stream their chunks to one shard at once. A NIC takes packets
// in arrival order, so their chunks interleave at the shard's ingress and the
// shard answers chunk k as soon as both have arrived: a step takes the
// ingress time of N·M bytes plus the last chunk's replies — not what it takes
// when the shard drains one worker's stream before looking at the other's
// (about 1.4× as long). Best of eight jobs (each job's time only grows with
// the host's load); tolerance 25 % + 5 ms, still below the 1.4×.
TEST(EmulatedNetworkTiming, ConcurrentPushesInterleaveAtTheShardsIngress) {
  constexpr int kWorkers = 2;
  constexpr int64_t kSize = 1000000;  // 4 MB of floats
  constexpr int64_t kChunk = 125000;  // 500 KB: 8 chunks
  constexpr int64_t kSteps = 2;
  NetModel net;
  net.bandwidth = 100e6;  // 10 ms per MB: far above a loaded host's jitter
  net.latency = 100e-6;
  ServerOptions base = testing::server_options();
  base.chunk_floats = kChunk;
  const auto init = initial_params(kSize);
  const double bytes = 4.0 * kSize, chunk_bytes = 4.0 * kChunk;
  const double model_step = (kWorkers * bytes + kWorkers * chunk_bytes) / net.bandwidth +
                            2 * net.latency;
  double best = 1e9;
  for (int attempt = 0; attempt < 8 && best > 1.25 * kSteps * model_step + 5e-3; ++attempt) {
    LocalJob job(init, 1, kWorkers, base, net);
    std::vector<double> elapsed(kWorkers);
    testing::run_workers(kWorkers, [&](int w) {
      Client client(job.client(w));
      std::vector<float> params = init;
      Stopwatch clock;
      for (int64_t t = 0; t < kSteps; ++t) client.push_pull(make_grad(w, t, kSize), params);
      elapsed[w] = clock.seconds();
    });
    job.join();
    best = std::min(best, *std::max_element(elapsed.begin(), elapsed.end()));
  }
  EXPECT_GE(best, kSteps * kWorkers * bytes / net.bandwidth) << "faster than the wire";
  EXPECT_LE(best, 1.25 * kSteps * model_step + 5e-3)
      << "model " << kSteps * model_step << " s: the shard did not interleave the two streams";
}

INSTANTIATE_TEST_SUITE_P(Layouts, EmulatedNetwork,
                         ::testing::Values(NetCase{1, 1}, NetCase{4, 1}, NetCase{4, 2}));

}  // namespace
}  // namespace psar::ps
