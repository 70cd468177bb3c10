// The simulator against closed forms: every registered schedule over a sweep
// of (p, m, v) and cost triples reproduces the lecture notes' bubble
// fractions exactly — (p−1)/m for GPipe and 1F1B, (p−1)/(v·m) for
// interleaved — and the makespans and memory peaks the papers derive. The
// costs are small dyadic numbers, so the doubles hold the exact rationals and
// the comparisons are EXPECT_EQ, not a tolerance.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "core/errors.h"
#include "modelpar/pp/generators.h"
#include "modelpar/pp/simulate.h"

namespace psar::pp {
namespace {

using ::testing::Each;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

struct Case {
  std::string kind;
  int p, m, v;
};

// Which shapes a schedule runs: the rules of generators.h, restated.
bool runs(const Case& c) {
  if (c.kind == "interleaved") return c.m % c.p == 0;
  return c.v == 1 && (c.kind == "gpipe" || c.m >= c.p);
}

std::vector<Case> sweep() {
  std::vector<Case> cases;
  for (const auto& e : schedule_registry())
    for (int p : {1, 2, 3, 4})
      for (int m : std::set<int>{p, p + 1, 2 * p, 3 * p})
        for (int v : {1, 2, 3}) {
          const Case c{e.name, p, m, v};
          if (runs(c)) cases.push_back(c);
        }
  return cases;
}

const CostModel kCosts[] = {
    {1, 1, 1, 0}, {1, 1, 0, 0}, {1, 2, 0, 0}, {2, 1, 1, 0}, {1, 0.5, 0.5, 0}, {1, 2, 2, 0},
};

// Idle time per stage, exactly: (p−1)(t_f + t_b + t_w) for GPipe and 1F1B,
// 1/v of it for interleaved, and the zero-bubble paper's (p−1)(t_f + t_b − t_w)
// for ZB-H1 in its regime t_w ≤ t_f, t_b (beyond it the deferred W cannot
// hide more than min(t_f, t_b)).
double expected_idle(const Case& c, const CostModel& t) {
  const double all = t.forward + t.backward_input + t.backward_weight;
  if (c.kind == "gpipe" || c.kind == "1f1b") return (c.p - 1) * all;
  if (c.kind == "interleaved") return (c.p - 1) * all / c.v;
  const double hidden = std::min({t.forward, t.backward_input, t.backward_weight});
  return (c.p - 1) * (t.forward + t.backward_input - hidden);
}

// The notes' bubble fraction, written as they write it.
double notes_bubble(const Case& c) {
  if (c.kind == "interleaved") return static_cast<double>(c.p - 1) / (c.v * c.m);
  return static_cast<double>(c.p - 1) / c.m;
}

// Exact when v is a power of two (chunk costs t/v are then exact doubles);
// within rounding for v = 3.
void expect_exact(double actual, double expected, int v) {
  if ((v & (v - 1)) == 0)
    EXPECT_EQ(actual, expected);
  else
    EXPECT_NEAR(actual, expected, 1e-12 * std::max(1.0, std::abs(expected)));
}

class EverySchedule : public ::testing::TestWithParam<Case> {
 protected:
  Schedule schedule() const {
    const Case& c = GetParam();
    return make_schedule(c.kind, {c.p, c.m, c.v, 0});
  }
};

TEST_P(EverySchedule, ReproducesTheBubbleFormulaExactly) {
  const Case& c = GetParam();
  const auto& entry = find_schedule(c.kind);
  for (const CostModel& t : kCosts) {
    SCOPED_TRACE(testing::Message() << "t_f=" << t.forward << " t_b=" << t.backward_input
                                    << " t_w=" << t.backward_weight);
    const Prediction pr = simulate(schedule(), {t, {}});
    // Equal stages: the same work on each, and the same idle time.
    const double work = c.m * (t.forward + t.backward_input + t.backward_weight);
    const double idle = expected_idle(c, t);
    for (int r = 0; r < c.p; ++r) {
      expect_exact(pr.busy[static_cast<size_t>(r)], work, c.v);
      expect_exact(pr.idle[static_cast<size_t>(r)], idle, c.v);
    }
    expect_exact(pr.makespan, work + idle, c.v);
    expect_exact(pr.bubble_fraction, idle / work, c.v);
    expect_exact(pr.bubble_fraction, entry.bubble({c.p, c.m, c.v, 0}, t), c.v);
    if (c.kind != "zb_h1") expect_exact(pr.bubble_fraction, notes_bubble(c), c.v);
    EXPECT_DOUBLE_EQ(pr.idle_share, pr.bubble_fraction / (1 + pr.bubble_fraction));
  }
}

TEST_P(EverySchedule, IdleShareOfTheMakespanIsPMinusOneOverMPlusPMinusOne) {
  // With unit costs, in units of t_f + t_b + t_w: idle p − 1 (1/v of it when
  // interleaved, 1/3 of it for ZB-H1) beside m of work.
  const Case& c = GetParam();
  const Prediction pr = simulate(schedule());
  const int scale = c.kind == "zb_h1" ? 3 : c.v;
  expect_exact(pr.idle_share, static_cast<double>(c.p - 1) / (scale * c.m + c.p - 1), c.v);
}

TEST_P(EverySchedule, PeakActivationsMatchTheClosedForm) {
  const Case& c = GetParam();
  const auto& entry = find_schedule(c.kind);
  const Prediction pr = simulate(schedule());
  for (int r = 0; r < c.p; ++r)
    EXPECT_EQ(pr.peak_activations[static_cast<size_t>(r)], entry.peak({c.p, c.m, c.v, 0}, r))
        << "stage " << r;
  const int first = pr.peak_activations[0];
  const int most = *std::max_element(pr.peak_activations.begin(), pr.peak_activations.end());
  if (c.kind == "gpipe") {
    EXPECT_THAT(pr.peak_activations, Each(c.m));
  }
  if (c.kind == "1f1b") {
    EXPECT_EQ(first, c.p) << "1F1B holds exactly p on the first stage";
    EXPECT_EQ(most, c.p);
  }
  if (c.kind == "zb_h1") {
    EXPECT_THAT(pr.peak_activations, Each(c.p)) << "1F1B's peak, until W";
  }
}

INSTANTIATE_TEST_SUITE_P(Sweep, EverySchedule, ::testing::ValuesIn(sweep()), [](const auto& info) {
  const Case& c = info.param;
  return c.kind + "_p" + std::to_string(c.p) + "_m" + std::to_string(c.m) + "_v" +
         std::to_string(c.v);
});

TEST(Simulator, SweepCoversTheRequiredGrid) {
  // p ∈ {2, 4}, m ∈ {p, 2p, 3p}, v ∈ {1, 2} for every schedule that takes v.
  const auto cases = sweep();
  for (const char* kind : {"gpipe", "1f1b", "interleaved", "zb_h1"})
    for (int p : {2, 4})
      for (int m : {p, 2 * p, 3 * p})
        for (int v : {1, 2}) {
          if (v == 2 && std::string(kind) != "interleaved") continue;
          EXPECT_TRUE(std::any_of(
              cases.begin(), cases.end(),
              [&](const Case& c) { return c.kind == kind && c.p == p && c.m == m && c.v == v; }))
              << kind << " p=" << p << " m=" << m << " v=" << v;
        }
}

TEST(Simulator, ZbH1BubbleIsAThirdOfOneFOneBsWithUnitCostsAtTheSameMemory) {
  for (int p : {2, 3, 4})
    for (int m : {p, p + 1, 2 * p, 3 * p}) {
      const Prediction zb = simulate(zb_h1({p, m, 1, 0}));
      const Prediction ref = simulate(one_f_one_b({p, m, 1, 0}));
      EXPECT_LT(zb.bubble_fraction, ref.bubble_fraction) << "p=" << p << " m=" << m;
      for (int r = 0; r < p; ++r)  // whole numbers: exact
        EXPECT_EQ(3 * zb.idle[static_cast<size_t>(r)], ref.idle[static_cast<size_t>(r)]);
      EXPECT_EQ(zb.peak_activations[0], ref.peak_activations[0]);
    }
}

TEST(Simulator, TheIssuesExampleIsThreeEighths) {
  for (const char* kind : {"gpipe", "1f1b"})
    EXPECT_EQ(simulate(make_schedule(kind, {4, 8, 1, 0})).bubble_fraction, 0.375) << kind;
  EXPECT_EQ(simulate(interleaved({4, 8, 2, 0})).bubble_fraction, 0.1875);
  EXPECT_EQ(simulate(zb_h1({4, 8, 1, 0})).bubble_fraction, 0.125);
}

TEST(Simulator, LatencyDelaysEveryHopBetweenStages) {
  // GPipe: fill and drain each cross p − 1 links.
  const int p = 4, m = 6;
  const CostModel t{1, 1, 1, 0.25};
  const Prediction pr = simulate(gpipe({p, m, 1, 0}), {t, {}});
  EXPECT_EQ(pr.makespan, (m + p - 1) * 3.0 + 2 * (p - 1) * 0.25);
  // One stage has no links to wait on.
  EXPECT_EQ(simulate(interleaved({1, 4, 2, 0}), {t, {}}).makespan, 4 * 3.0);
}

TEST(Simulator, UnevenStagesFollowTheFlowShopBound) {
  // Identical jobs through stages of times a_s: the last finishes at
  // Σ a_s + (m − 1)·max a_s, forward and then backward.
  const int m = 4;
  const std::vector<int> layers{1, 3};  // weights 0.5 and 1.5 of an average stage
  const CostModel t{1, 1, 1, 0};
  const Prediction pr = simulate(gpipe({2, m, 1, 0}), {t, layers});
  const double forward = (0.5 + 1.5) + (m - 1) * 1.5, backward = (1 + 3) + (m - 1) * 3;
  EXPECT_EQ(pr.makespan, forward + backward);
  EXPECT_THAT(pr.busy, ElementsAre(m * 1.5, m * 4.5));
}

TEST(Simulator, SpansKeepScheduleOrderWithoutOverlap) {
  const Schedule s = zb_h1({4, 8, 1, 0});
  const Prediction pr = simulate(s);
  for (size_t r = 0; r < s.actions.size(); ++r) {
    ASSERT_EQ(pr.spans[r].size(), s.actions[r].size());
    for (size_t i = 0; i < pr.spans[r].size(); ++i) {
      EXPECT_EQ(pr.spans[r][i].action, s.actions[r][i]);
      if (i > 0) {
        EXPECT_GE(pr.spans[r][i].start, pr.spans[r][i - 1].end);
      }
    }
  }
}

TEST(Simulator, RejectsCostsThatAreNotTimes) {
  const Schedule s = gpipe({2, 2, 1, 0});
  EXPECT_THAT(
      [&] {
        simulate(s, {{-1, 1, 1, 0}, {}});
      },
      ThrowsMessage<ConfigError>(HasSubstr("t_f = -1 must be a finite, non-negative")));
  EXPECT_THAT(
      [&] {
        simulate(s, {{0, 0, 0, 0}, {}});
      },
      ThrowsMessage<ConfigError>(HasSubstr("t_f + t_b + t_w must be positive")));
  EXPECT_THAT(
      [&] {
        simulate(s, {{1, 1, 1, 0}, {1, 2, 3}});
      },
      ThrowsMessage<ConfigError>(HasSubstr("3 layer counts for p·v = 2")));
}

}  // namespace
}  // namespace psar::pp

namespace psar::pp {
namespace {

// A blocking send holds its stage for the transfer T. GPipe on two stages:
// stage 0's forwards each hold it, stage 1's backwards each hold it, so
// (m + 1)·(t_f + t_b) + 2·m·T where posted sends pay 2·T (fill and drain).
// 1F1B on two stages: (m + 1)·(t_f + t_b + T), and posted sends gain
// little — its loop between the stages carries both of a micro-batch's
// transfers either way.
TEST(Simulator, BlockingSendsHoldTheSenderForTheTransfer) {
  const double T = 0.25;
  const auto unit = [](int, const Action&) { return 1.0; };
  const auto blocking = [&](const Transfer&) { return TransferTime{T, T}; };
  const auto posted = [&](const Transfer&) { return TransferTime{T, 0.0}; };
  for (int m : {2, 3, 5, 8}) {
    const Schedule g = make_schedule("gpipe", {2, m, 1, 0});
    EXPECT_EQ(simulate_costs(g, unit, blocking).makespan, (m + 1) * 2.0 + 2 * m * T) << m;
    EXPECT_EQ(simulate_costs(g, unit, posted).makespan, (m + 1) * 2.0 + 2 * T) << m;
    const Schedule s = make_schedule("1f1b", {2, m, 1, 0});
    EXPECT_EQ(simulate_costs(s, unit, blocking).makespan, (m + 1) * (2.0 + T)) << m;
    EXPECT_LE(simulate_costs(s, unit, posted).makespan, (m + 1) * (2.0 + T)) << m;
  }
  // A stage's next action starts no earlier than its send is done.
  const Schedule s = make_schedule("interleaved", {4, 8, 2, 0});
  const Prediction pr = simulate_costs(s, unit, blocking);
  for (size_t r = 0; r < s.actions.size(); ++r)
    for (size_t i = 1; i < pr.spans[r].size(); ++i) {
      const auto out = output_of(s, static_cast<int>(r), pr.spans[r][i - 1].action);
      const double held = out && !out->local() ? T : 0.0;
      EXPECT_GE(pr.spans[r][i].start, pr.spans[r][i - 1].end + held);
    }
  EXPECT_GT(pr.makespan, simulate_costs(s, unit, posted).makespan);
  // One stage hands its chunks over in memory: blocking changes nothing.
  const Schedule one = make_schedule("interleaved", {1, 4, 2, 0});
  EXPECT_EQ(simulate_costs(one, unit, blocking).makespan, 4 * 2 * 2.0);
}

}  // namespace
}  // namespace psar::pp
