// ShardState, the socket-free core of a shard: aggregation, the optimizer and
// the three consistency models, checked against the slow reference.

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <numeric>
#include <random>

#include "core/errors.h"
#include "ps/shard_state.h"
#include "ps/wire.h"
#include "tests/ps/ps_test_util.h"

namespace psar::ps {
namespace {

using testing::grad_value;
using testing::initial_params;
using testing::make_grad;
using testing::reference_bsp;
using testing::owned;
using testing::relative_error;

ShardStateOptions shard(int64_t size, int workers, Consistency c = Consistency::kBsp,
                        int staleness = 0, OptimizerOptions o = testing::sgd()) {
  return {{0, size}, workers, c, staleness, o};
}

wire::Status status_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const RequestError& e) {
    return e.status();
  }
  return wire::STATUS_OK;
}

// ---- averaging ----------------------------------------------------------------------

class Average : public ::testing::TestWithParam<std::tuple<int, int64_t>> {};

TEST_P(Average, EqualsTheDoubleAverageAndMayWriteIntoTheFirstInput) {
  const auto [n, size] = GetParam();
  std::vector<std::vector<float>> grads;
  std::vector<const float*> ptrs;
  for (int w = 0; w < n; ++w) grads.push_back(make_grad(w, 0, size));
  for (auto& g : grads) ptrs.push_back(g.data());
  std::vector<float> out(static_cast<size_t>(size));
  average_gradients(out, ptrs);
  average_gradients(grads[0], ptrs);  // in place, aliasing input 0
  for (int64_t i = 0; i < size; ++i) {
    double sum = 0;
    for (int w = 0; w < n; ++w) sum += grad_value(w, 0, i);
    ASSERT_NEAR(out[i], sum / n, 1e-6) << "key " << i;
    ASSERT_EQ(out[i], grads[0][i]) << "key " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(WorkersAndSizes, Average,
                         ::testing::Combine(::testing::Values(1, 2, 3, 5),
                                            ::testing::Values(0, 1, 2047, 2048, 2049, 10007)));

// ---- bsp ------------------------------------------------------------------------------

struct BspCase {
  int workers;
  int64_t size;
  bool adam;
};

class Bsp : public ::testing::TestWithParam<BspCase> {};

TEST_P(Bsp, MatchesTheReferenceAndIgnoresTheArrivalOrder) {
  const auto [workers, size, use_adam] = GetParam();
  const auto opt = use_adam ? testing::adam() : testing::sgd();
  const auto init = initial_params(size);
  constexpr int64_t kSteps = 6;
  ShardState in_order(shard(size, workers, Consistency::kBsp, 0, opt), init);
  ShardState shuffled(shard(size, workers, Consistency::kBsp, 0, opt), init);
  std::mt19937 rng(42);
  for (int64_t t = 0; t < kSteps; ++t) {
    std::vector<int> order(static_cast<size_t>(workers));
    std::iota(order.begin(), order.end(), 0);
    for (int w : order) {
      EXPECT_FALSE(in_order.pull_ready(t + 1));
      const bool changed = in_order.push(w, t, owned(make_grad(w, t, size)));
      EXPECT_EQ(changed, w == workers - 1);
    }
    EXPECT_TRUE(in_order.pull_ready(t + 1));
    std::shuffle(order.begin(), order.end(), rng);
    for (int w : order) shuffled.push(w, t, owned(make_grad(w, t, size)));
  }
  EXPECT_EQ(in_order.applied(), kSteps);
  const auto got =
      std::vector<float>(in_order.params().view().begin(), in_order.params().view().end());
  const auto other =
      std::vector<float>(shuffled.params().view().begin(), shuffled.params().view().end());
  EXPECT_EQ(got, other) << "the sum runs in worker order, whatever the arrival order";
  EXPECT_LT(relative_error(got, reference_bsp(init, workers, kSteps, opt)), 1e-6);
}

INSTANTIATE_TEST_SUITE_P(Workers, Bsp,
                         ::testing::Values(BspCase{1, 1, false}, BspCase{1, 100, true},
                                           BspCase{2, 0, false}, BspCase{2, 4099, false},
                                           BspCase{3, 17, true}, BspCase{5, 1000, false}));

// The gradients are summed while they arrive, yet bit for bit as one sum in
// worker order at the end (average_gradients, then one optimizer step); the
// receive buffers of the workers already summed are let go at once.
TEST(Bsp, SumsThePushesAsTheyArriveBitForBitAsInWorkerOrderAtTheEnd) {
  struct Case {
    int workers, backup;
    std::vector<int> order;  // arrival order; the first workers − backup count
    std::vector<int> held;   // receive buffers held after each push but the completing one
  };
  const std::vector<Case> cases = {
      {4, 0, {0, 1, 2, 3}, {1, 1, 1}},     // in order: one buffer, the running sum
      {4, 0, {3, 2, 1, 0}, {1, 2, 3}},     // reversed: nothing to sum before the last
      {4, 0, {1, 0, 3, 2}, {1, 1, 2}},     // 0 after 1: both summed at once
      {4, 0, {2, 0, 1, 3}, {1, 2, 1}},
      {5, 1, {4, 0, 2, 1, 3}, {1, 2, 3}},  // backup: 3 is late, 0 1 2 4 averaged
  };
  const int64_t size = 5000;  // more than two of the average's blocks
  const auto opt = testing::sgd(0.05f, 0.9f);
  const auto init = initial_params(size);
  for (const Case& c : cases) {
    ShardStateOptions o = shard(size, c.workers, Consistency::kBsp, 0, opt);
    o.backup_workers = c.backup;
    ShardState s(o, init);
    const size_t completing = static_cast<size_t>(c.workers - c.backup) - 1;
    for (size_t i = 0; i < c.order.size(); ++i) {
      const bool changed = s.push(c.order[i], 0, owned(make_grad(c.order[i], 0, size)));
      EXPECT_EQ(changed, i == completing);
      if (i < completing) EXPECT_EQ(s.held(0), c.held[i]) << "after the push of worker " << c.order[i];
      if (i >= completing) EXPECT_EQ(s.held(0), 0);
    }
    // Independently: every counted gradient summed at the end, in worker order.
    std::vector<int> counted(c.order.begin(), c.order.begin() + static_cast<long>(completing) + 1);
    std::sort(counted.begin(), counted.end());
    std::vector<std::vector<float>> grads;
    std::vector<const float*> ptrs;
    for (int w : counted) grads.push_back(make_grad(w, 0, size));
    for (const auto& g : grads) ptrs.push_back(g.data());
    std::vector<float> avg(static_cast<size_t>(size));
    average_gradients(avg, ptrs);
    std::vector<float> want = init;
    make_optimizer(opt, size)->step(want, avg);
    const auto got = s.params().view();
    EXPECT_TRUE(std::equal(got.begin(), got.end(), want.begin(), want.end()))
        << c.workers << " workers, arrival " << ::testing::PrintToString(c.order);
    EXPECT_EQ(s.last_averaged(), static_cast<int>(counted.size()));
  }
}

TEST(Bsp, UnderContinueKeepsEveryPushApartUntilItsClockIsApplied) {
  ShardStateOptions o = shard(8, 3);
  o.continue_on_failure = true;
  ShardState s(o, initial_params(8));
  s.push(0, 0, owned(make_grad(0, 0, 8)));
  s.push(1, 0, owned(make_grad(1, 0, 8)));
  EXPECT_EQ(s.held(0), 2);  // fail() may still discard either
}

TEST(Bsp, RejectsOutOfOrderClocksUnknownWorkersAndRunningAhead) {
  ShardState s(shard(4, 2), initial_params(4));
  EXPECT_EQ(status_of([&] { s.push(0, 1, owned(make_grad(0, 1, 4))); }), wire::STATUS_BAD_CLOCK);
  EXPECT_EQ(status_of([&] { s.push(2, 0, owned(make_grad(2, 0, 4))); }), wire::STATUS_BAD_WORKER);
  EXPECT_EQ(status_of([&] { s.push(-1, 0, owned(make_grad(0, 0, 4))); }), wire::STATUS_BAD_WORKER);
  s.push(0, 0, owned(make_grad(0, 0, 4)));
  // Clock 0 is still open: worker 0 cannot have parameters for step 1 yet.
  EXPECT_EQ(status_of([&] { s.push(0, 1, owned(make_grad(0, 1, 4))); }), wire::STATUS_BAD_CLOCK);
  EXPECT_EQ(status_of([&] { s.check_pull(0, 2); }), wire::STATUS_BAD_CLOCK);
  EXPECT_EQ(status_of([&] { s.check_pull(0, -1); }), wire::STATUS_BAD_CLOCK);
  EXPECT_EQ(s.waiting_for(), std::vector<int>{1});
}

TEST(Bsp, AWorkerThatLeavesEarlyBlocksThePullsThatNeedIt) {
  ShardState s(shard(3, 2), initial_params(3));
  s.push(0, 0, owned(make_grad(0, 0, 3)));
  s.push(1, 0, owned(make_grad(1, 0, 3)));
  s.push(0, 1, owned(make_grad(0, 1, 3)));
  EXPECT_EQ(status_of([&] { s.leave(1, 5); }), wire::STATUS_BAD_CLOCK);
  s.leave(1, 1);
  EXPECT_TRUE(s.pull_blocked(1).empty()) << "step 1's parameters exist already";
  EXPECT_NE(s.pull_blocked(2).find("worker 1 left after 1 steps"), std::string::npos);
  EXPECT_EQ(status_of([&] { s.push(1, 1, owned(make_grad(1, 1, 3))); }), wire::STATUS_BAD_WORKER);
  EXPECT_FALSE(s.all_left());
  s.leave(0, 2);
  EXPECT_TRUE(s.all_left());
}

// A worker that gives up while another is behind it (stopped, say) is not
// the cause: the message names the one it waited for.
TEST(Bsp, AWorkerThatLeftWhileWaitingNamesTheWorkerBehindIt) {
  ShardState s(shard(3, 2), initial_params(3));
  s.push(0, 0, owned(make_grad(0, 0, 3)));
  s.push(1, 0, owned(make_grad(1, 0, 3)));
  s.push(0, 1, owned(make_grad(0, 1, 3)));  // worker 1 stalls before its step 2
  s.leave(0, 2);
  s.push(1, 1, owned(make_grad(1, 1, 3)));
  const std::string why = s.pull_blocked(3);
  EXPECT_NE(why.find("worker 0 left after 2 steps while it waited for worker 1 (pushed 1)"),
            std::string::npos)
      << why;
  // The control: one that leaves with nobody behind it is named alone.
  ShardState t(shard(3, 2), initial_params(3));
  t.push(0, 0, owned(make_grad(0, 0, 3)));
  t.push(1, 0, owned(make_grad(1, 0, 3)));
  t.leave(0, 1);
  EXPECT_EQ(t.pull_blocked(2).find("waited for"), std::string::npos) << t.pull_blocked(2);
}

// ---- ssp ------------------------------------------------------------------------------

TEST(Ssp, WithStalenessZeroIsBspBitForBit) {
  const auto init = initial_params(333);
  ShardState bsp(shard(333, 3), init);
  ShardState ssp(shard(333, 3, Consistency::kSsp, 0), init);
  for (int64_t t = 0; t < 4; ++t)
    for (int w = 0; w < 3; ++w) {
      EXPECT_EQ(bsp.pull_ready(t + 1), ssp.pull_ready(t + 1));
      bsp.push(w, t, owned(make_grad(w, t, 333)));
      ssp.push(w, t, owned(make_grad(w, t, 333)));
    }
  EXPECT_TRUE(std::equal(bsp.params().view().begin(), bsp.params().view().end(),
                         ssp.params().view().begin()));
}

TEST(Ssp, LetsAWorkerRunStalenessClocksAheadAndAppliesLikeBsp) {
  constexpr int kS = 2;
  constexpr int64_t kSize = 50;
  const auto init = initial_params(kSize);
  ShardState s(shard(kSize, 2, Consistency::kSsp, kS), init);
  // Worker 0 races ahead while worker 1 has pushed nothing: steps 0..2 are
  // allowed (the slowest, at clock 0, is >= c - s), step 3 is not.
  for (int64_t t = 0; t <= kS; ++t) {
    EXPECT_TRUE(s.pull_ready(t));
    s.push(0, t, owned(make_grad(0, t, kSize)));
  }
  EXPECT_FALSE(s.pull_ready(kS + 1));
  EXPECT_EQ(status_of([&] { s.push(0, kS + 1, owned(make_grad(0, kS + 1, kSize))); }),
            wire::STATUS_BAD_CLOCK);
  EXPECT_EQ(s.applied(), 0);
  s.push(1, 0, owned(make_grad(1, 0, kSize)));
  EXPECT_EQ(s.applied(), 1);
  EXPECT_TRUE(s.pull_ready(kS + 1));
  for (int64_t t = 1; t <= kS; ++t) s.push(1, t, owned(make_grad(1, t, kSize)));
  EXPECT_EQ(s.applied(), kS + 1);
  // Every clock aggregated whole: the parameters are BSP's.
  const std::vector<float> got(s.params().view().begin(), s.params().view().end());
  EXPECT_LT(relative_error(got, reference_bsp(init, 2, kS + 1, testing::sgd())), 1e-6);
}

// ---- asp ------------------------------------------------------------------------------

TEST(Asp, AppliesEveryPushAtOnceScaledByOneOverN) {
  constexpr int64_t kSize = 64;
  const auto init = initial_params(kSize);
  const auto opt = testing::sgd(0.1f, 0.5f);
  ShardState s(shard(kSize, 3, Consistency::kAsp, 0, opt), init);
  // Reference: the optimizer stepped once per push, on gradient / 3, in arrival order.
  std::vector<float> ref = init;
  auto ref_opt = make_optimizer(opt, kSize);
  const std::vector<std::pair<int, int64_t>> arrivals = {{2, 0}, {2, 1}, {0, 0}, {2, 2}, {1, 0}};
  for (const auto& [w, t] : arrivals) {
    EXPECT_TRUE(s.pull_ready(100)) << "asp never makes a pull wait";
    EXPECT_TRUE(s.push(w, t, owned(make_grad(w, t, kSize))));
    auto g = make_grad(w, t, kSize);
    for (auto& x : g) x /= 3.0f;
    ref_opt->step(ref, g);
  }
  EXPECT_EQ(s.applied(), 5);
  const std::vector<float> got(s.params().view().begin(), s.params().view().end());
  EXPECT_LT(relative_error(got, ref), 1e-6);
}

// ---- copy-on-write of the parameters ---------------------------------------------------

TEST(SharedParams, CopiesBeforeWritingWhileAReplyHoldsTheBuffer) {
  SharedParams p(std::vector<float>{1, 2, 3});
  p.writable()[0] = 10;  // nobody holds it: in place
  EXPECT_EQ(p.copies(), 0);
  const float* held = p.view().data();
  void* ref = p.acquire();
  p.writable()[1] = 20;  // a reply holds it: copy first
  EXPECT_EQ(p.copies(), 1);
  EXPECT_EQ(held[1], 2.0f) << "the buffer in flight must not change";
  EXPECT_EQ(p.view()[0], 10.0f);
  EXPECT_EQ(p.view()[1], 20.0f);
  SharedParams::release(nullptr, ref);  // the old buffer dies here
  p.writable()[2] = 30;
  EXPECT_EQ(p.copies(), 1);
}

TEST(ShardState, RejectsANegativeStaleness) {
  EXPECT_THROW(ShardState(shard(4, 1, Consistency::kSsp, -1), initial_params(4)), ConfigError);
}

}  // namespace
}  // namespace psar::ps
