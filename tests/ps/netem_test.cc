// The parameter server under network emulation (comm/netem.h): every push
// and reply crosses emulated NICs, so a job can never finish faster than the
// model allows — N pushes of M bytes serialize on one shard's ingress (N·M/B)
// and N replies on its egress — and the parameters are still the reference.

#include <gtest/gtest.h>

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

INSTANTIATE_TEST_SUITE_P(Layouts, EmulatedNetwork,
                         ::testing::Values(NetCase{1, 1}, NetCase{4, 1}, NetCase{4, 2}));

}  // namespace
}  // namespace psar::ps
