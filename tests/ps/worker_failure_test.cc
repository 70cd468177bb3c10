// ps.on_worker_failure: continue (ps/shard_state.h): a worker that fails or
// leaves early no longer holds up a clock, and from its departure on every
// clock averages over the survivors. Checked against the test's own
// reference: clock t on the double-precision average of the gradients of
// the workers that were there at t.

#include <gtest/gtest.h>

#include <atomic>
#include <set>

#include "core/errors.h"
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

ShardStateOptions continuing(int64_t size, int workers) {
  ShardStateOptions o{{0, size}, workers, Consistency::kBsp, 0, testing::sgd()};
  o.continue_on_failure = true;
  return o;
}

std::vector<float> params_of(const ShardState& s) {
  return {s.params().view().begin(), s.params().view().end()};
}

TEST(WorkerFailure, AFailedWorkersOpenPushIsDiscardedAndTheSurvivorsAverage) {
  const int64_t size = 50, steps = 6;
  ShardState state(continuing(size, 3), initial_params(size));
  for (int64_t t = 0; t < 2; ++t)
    for (int w = 0; w < 3; ++w) state.push(w, t, owned(make_grad(w, t, size)));
  state.push(2, 2, owned(make_grad(2, 2, size)));  // then worker 2 dies
  EXPECT_FALSE(state.fail(2));                     // clock 2 still waits for 0 and 1
  EXPECT_EQ(state.pull_blocked(3), "");
  for (int64_t t = 2; t < steps; ++t)
    for (int w = 0; w < 2; ++w) state.push(w, t, owned(make_grad(w, t, size)));
  EXPECT_EQ(state.applied(), steps);
  EXPECT_EQ(state.workers_changed_at(), 2);
  std::vector<std::set<int>> who(steps, {0, 1});
  who[0] = who[1] = {0, 1, 2};
  EXPECT_LT(
      relative_error(params_of(state), reference_of(initial_params(size), who, testing::sgd())),
      2e-6);
  // The control: keeping worker 2's push of clock 2 is another result.
  std::vector<std::set<int>> kept = who;
  kept[2] = {0, 1, 2};
  EXPECT_GT(
      relative_error(params_of(state), reference_of(initial_params(size), kept, testing::sgd())),
      1e-4);
}

TEST(WorkerFailure, AFailureThatCompletesTheOpenClockAppliesIt) {
  const int64_t size = 8;
  ShardState state(continuing(size, 3), initial_params(size));
  state.push(0, 0, owned(make_grad(0, 0, size)));
  state.push(1, 0, owned(make_grad(1, 0, size)));
  EXPECT_TRUE(state.fail(2));
  EXPECT_EQ(state.applied(), 1);
  EXPECT_LT(relative_error(params_of(state),
                           reference_of(initial_params(size), {{0, 1}}, testing::sgd())),
            2e-6);
}

TEST(WorkerFailure, AnEarlyGoodbyeHoldsNobodyUpUnderContinueAndFailsTheOthersUnderAbort) {
  const int64_t size = 8;
  ShardState state(continuing(size, 3), initial_params(size));
  for (int w = 0; w < 3; ++w) state.push(w, 0, owned(make_grad(w, 0, size)));
  state.leave(2, 1);
  EXPECT_EQ(state.pull_blocked(2), "");
  for (int w = 0; w < 2; ++w) state.push(w, 1, owned(make_grad(w, 1, size)));
  EXPECT_EQ(state.applied(), 2);
  EXPECT_LT(relative_error(params_of(state),
                           reference_of(initial_params(size), {{0, 1, 2}, {0, 1}}, testing::sgd())),
            2e-6);

  ShardState aborting({{0, size}, 3, Consistency::kBsp, 0, testing::sgd()}, initial_params(size));
  for (int w = 0; w < 3; ++w) aborting.push(w, 0, owned(make_grad(w, 0, size)));
  aborting.leave(2, 1);
  EXPECT_NE(aborting.pull_blocked(2).find("worker 2 left after 1 steps"), std::string::npos);
}

// Over TCP loopback: 2 shards, 3 workers; worker 2 goes silent after 2 steps
// (no goodbye). After ps.timeout the shards drop it, and workers 0 and 1 end
// with the reference that averages over all three for 2 steps, then over
// the two of them.
TEST(WorkerFailure, TheServersDropASilentWorkerAndTheSurvivorsFinish) {
  const int64_t size = 2001, steps = 5, dies_after = 2;
  ServerOptions base = testing::server_options();
  base.continue_on_failure = true;
  base.timeout_s = 0.5;
  testing::LocalJob job(initial_params(size), 2, 3, base);
  std::atomic<int> finished{0};
  std::vector<std::vector<float>> got(3);
  testing::run_workers(3, [&](int w) {
    Client client(job.client(w));
    std::vector<float> params(static_cast<size_t>(size));
    client.pull(params);
    for (int64_t t = 0; t < (w == 2 ? dies_after : steps); ++t) {
      std::vector<float> g = make_grad(w, t, size);
      client.push_pull(g, params);
    }
    got[static_cast<size_t>(w)] = params;
    if (w < 2) {
      client.close();
      ++finished;
      return;
    }
    // The "dead" worker stays silent until the survivors are done; its
    // client's goodbye then finds the job over (the destructor never throws).
    EXPECT_TRUE(testing::wait_until([&] { return finished == 2; }, 30));
  });
  job.join();
  std::vector<std::set<int>> who(steps, {0, 1});
  for (int64_t t = 0; t < dies_after; ++t) who[static_cast<size_t>(t)] = {0, 1, 2};
  const std::vector<float> want = reference_of(initial_params(size), who, testing::sgd());
  EXPECT_LT(relative_error(job.params(), want), 2e-6);
  EXPECT_EQ(got[0], job.params());
  EXPECT_EQ(got[1], job.params());
}

}  // namespace
}  // namespace psar::ps
