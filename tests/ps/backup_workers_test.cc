// Backup workers (ps.backup_workers = b, ps/shard_state.h): each clock is
// applied on the average of the first N = workers − b pushes to arrive; a
// push of a clock already applied is dropped and counted. The arrival order
// is forced (ShardState driven directly; over sockets, the late worker
// pushes only once the others' step is answered), and the parameters are
// checked against the test's own reference: the optimizer over the
// double-precision average of the first N arrivals' gradients.

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <numeric>
#include <set>

#include "core/errors.h"
#include "core/rng.h"
#include "ps/shard_state.h"
#include "tests/ps/ps_test_util.h"

namespace psar::ps {
namespace {

using testing::grad_value;
using testing::initial_params;
using testing::make_grad;
using testing::owned;
using testing::reference_of;
using testing::relative_error;

struct BackupCase {
  int workers, backup;
  int64_t size;
  bool adam;
};

class BackupWorkers : public ::testing::TestWithParam<BackupCase> {};

// Every clock a seeded arrival order over all N + b workers: the first N
// complete the clock, the last b arrive after it and are dropped.
TEST_P(BackupWorkers, EachClockAveragesTheFirstNArrivalsAndDropsTheRest) {
  const auto [workers, backup, size, use_adam] = GetParam();
  const int n = workers - backup;
  const int64_t steps = 7;
  const OptimizerOptions opt = use_adam ? testing::adam() : testing::sgd();
  const std::vector<float> init = initial_params(size);
  ShardState state({{0, size}, workers, Consistency::kBsp, 0, opt, backup}, init);
  std::vector<std::set<int>> first;
  std::vector<int64_t> dropped(static_cast<size_t>(workers), 0);
  for (int64_t t = 0; t < steps; ++t) {
    std::vector<int> order(static_cast<size_t>(workers));
    std::iota(order.begin(), order.end(), 0);
    for (int k = workers - 1; k > 0; --k)  // Fisher-Yates on Philox draws
      std::swap(order[static_cast<size_t>(k)],
                order[Philox::block(5, static_cast<uint64_t>(t), static_cast<uint64_t>(k))[0] %
                      static_cast<uint32_t>(k + 1)]);
    first.emplace_back(order.begin(), order.begin() + n);
    for (int k = 0; k < workers; ++k) {
      const int w = order[static_cast<size_t>(k)];
      const bool changed = state.push(w, t, owned(make_grad(w, t, size)));
      EXPECT_EQ(changed, k == n - 1) << "clock " << t << " push " << k;
      EXPECT_EQ(state.last_push_dropped(), k >= n) << "clock " << t << " push " << k;
      if (k >= n) ++dropped[static_cast<size_t>(w)];
      EXPECT_EQ(state.applied(), t + (k >= n - 1 ? 1 : 0));
    }
  }
  for (int w = 0; w < workers; ++w) EXPECT_EQ(state.dropped(w), dropped[static_cast<size_t>(w)]);
  const std::vector<float> got(state.params().view().begin(), state.params().view().end());
  EXPECT_LT(relative_error(got, reference_of(init, first, opt)), 2e-6);
  // The control: averaging all N + b gradients is another result.
  std::vector<std::set<int>> everyone(static_cast<size_t>(steps));
  for (auto& s : everyone)
    for (int w = 0; w < workers; ++w) s.insert(w);
  if (size > 0) {
    EXPECT_GT(relative_error(got, reference_of(init, everyone, opt)), 1e-4);
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, BackupWorkers,
                         ::testing::Values(BackupCase{3, 1, 37, false}, BackupCase{4, 1, 1, false},
                                           BackupCase{5, 2, 4099, false},
                                           BackupCase{7, 3, 100, true}));

TEST(BackupWorkersState, AWorkerTwoClocksBehindIsDroppedAndCatchesUp) {
  const int64_t size = 16;
  const std::vector<float> init = initial_params(size);
  ShardState state({{0, size}, 3, Consistency::kBsp, 0, testing::sgd(), 1}, init);
  // Workers 0 and 1 run clocks 0 and 1 without worker 2.
  for (int64_t t = 0; t < 2; ++t)
    for (int w = 0; w < 2; ++w) state.push(w, t, owned(make_grad(w, t, size)));
  EXPECT_EQ(state.applied(), 2);
  EXPECT_TRUE(state.pull_ready(1));  // the late worker still gets its parameters
  for (int64_t t = 0; t < 2; ++t) {
    EXPECT_FALSE(state.push(2, t, owned(make_grad(2, t, size))));
    EXPECT_TRUE(state.last_push_dropped());
  }
  EXPECT_EQ(state.dropped(2), 2);
  // Clock 2: worker 2 arrives first this time and counts.
  state.push(2, 2, owned(make_grad(2, 2, size)));
  EXPECT_FALSE(state.last_push_dropped());
  state.push(0, 2, owned(make_grad(0, 2, size)));
  EXPECT_EQ(state.applied(), 3);
  state.push(1, 2, owned(make_grad(1, 2, size)));
  EXPECT_TRUE(state.last_push_dropped());
  const std::vector<float> got(state.params().view().begin(), state.params().view().end());
  EXPECT_LT(relative_error(got, reference_of(init, {{0, 1}, {0, 1}, {0, 2}}, testing::sgd())),
            2e-6);
}

TEST(BackupWorkersState, ALeftWorkerBlocksOnlyWhenMoreThanBAreMissing) {
  ShardState state({{0, 4}, 4, Consistency::kBsp, 0, testing::sgd(), 1}, initial_params(4));
  state.leave(3, 0);
  EXPECT_EQ(state.pull_blocked(1), "");  // N = 3 workers remain
  state.leave(2, 0);
  EXPECT_NE(state.pull_blocked(1).find("worker 3 left after 0 steps"), std::string::npos);
}

TEST(BackupWorkersState, BadCountsAreConfigErrorsNamingTheKey) {
  const auto error = [](int backup, int workers, Consistency c) {
    try {
      check_backup_workers(backup, workers, c);
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(error(1, 2, Consistency::kBsp).find("ps.backup_workers: b = 1 of 2 workers"),
            std::string::npos);
  EXPECT_NE(error(2, 4, Consistency::kBsp).find("b must be < N"), std::string::npos);
  EXPECT_NE(error(-1, 4, Consistency::kBsp).find("ps.backup_workers: must be >= 0"),
            std::string::npos);
  EXPECT_NE(error(1, 4, Consistency::kSsp).find("ps.backup_workers needs ps.consistency: bsp"),
            std::string::npos);
  EXPECT_EQ(error(1, 3, Consistency::kBsp), "no error");
  EXPECT_EQ(error(0, 1, Consistency::kAsp), "no error");
}

// Over TCP loopback: 2 shards in chunks, N = 2 of 3 workers, worker 2
// delayed every step until workers 0 and 1 have their answer (so their
// pushes applied the clock): every push of worker 2 is dropped, it still
// gets the newest parameters, and the shards hold the reference of workers
// 0 and 1 alone.
TEST(BackupWorkersJob, ADelayedWorkerIsDroppedEveryStepAndStillPulls) {
  const int64_t size = 3001, steps = 6;
  const int workers = 3;
  ServerOptions base = testing::server_options();
  base.backup_workers = 1;
  base.chunk_floats = 512;
  testing::LocalJob job(initial_params(size), 2, workers, base);
  std::atomic<int64_t> answered[2] = {0, 0};  // steps workers 0 and 1 completed
  std::vector<float> late_params(static_cast<size_t>(size));
  PsCounters late_counters, fast_counters;
  testing::run_workers(workers, [&](int w) {
    Client client(job.client(w));
    std::vector<float> params(static_cast<size_t>(size));
    client.pull(params);
    for (int64_t t = 0; t < steps; ++t) {
      if (w == 2) {
        ASSERT_TRUE(testing::wait_until([&] { return answered[0] > t && answered[1] > t; }));
      }
      std::vector<float> g = make_grad(w, t, size);
      client.push_pull(g, params);
      if (w < 2) ++answered[w];
    }
    if (w == 2) {
      late_params = params;
      late_counters = client.counters();
    }
    if (w == 0) fast_counters = client.counters();
    client.close();
  });
  job.join();
  const std::vector<float> want =
      reference_of(initial_params(size), std::vector<std::set<int>>(steps, {0, 1}), testing::sgd());
  EXPECT_LT(relative_error(job.params(), want), 2e-6);
  EXPECT_EQ(late_params, job.params());           // the late worker pulled the newest parameters
  const int64_t chunks = (size / 2 + 511) / 512;  // per shard (1500 and 1501 keys)
  EXPECT_EQ(late_counters.pushes_dropped, steps * 2 * chunks);
  EXPECT_EQ(fast_counters.pushes_dropped, 0);
}

}  // namespace
}  // namespace psar::ps
