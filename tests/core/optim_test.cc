// Optimizers against a double-precision reference of their textbook update.

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/errors.h"
#include "core/optim.h"
#include "core/rng.h"

namespace psar {
namespace {

std::vector<float> randn(size_t n, uint64_t stream) {
  std::vector<float> v(n);
  Philox::fill_normal(v, 1.0f, 42, stream);
  return v;
}

TEST(Optimizer, SgdMomentumMatchesDoubleReference) {
  OptimizerOptions o;
  o.type = "sgd";
  o.lr = 0.1f;
  o.momentum = 0.9f;
  o.weight_decay = 0.01f;
  const size_t n = 50;
  auto p = randn(n, 1);
  std::vector<double> pr(p.begin(), p.end()), v(n, 0.0);
  auto opt = make_optimizer(o, n);
  for (int step = 0; step < 10; ++step) {
    auto g = randn(n, 100 + step);
    opt->step(p, g);
    for (size_t i = 0; i < n; ++i) {
      v[i] = 0.9 * v[i] + g[i] + 0.01 * pr[i];
      pr[i] -= 0.1 * v[i];
    }
  }
  for (size_t i = 0; i < n; ++i) EXPECT_NEAR(p[i], pr[i], 1e-5 * (1 + std::abs(pr[i])));
  EXPECT_EQ(opt->steps(), 10);
}

TEST(Optimizer, AdamMatchesDoubleReference) {
  OptimizerOptions o;
  o.type = "adam";
  o.lr = 0.01f;
  const size_t n = 50;
  auto p = randn(n, 2);
  std::vector<double> pr(p.begin(), p.end()), m(n, 0.0), v(n, 0.0);
  auto opt = make_optimizer(o, n);
  for (int t = 1; t <= 10; ++t) {
    auto g = randn(n, 200 + t);
    opt->step(p, g);
    for (size_t i = 0; i < n; ++i) {
      m[i] = 0.9 * m[i] + 0.1 * g[i];
      v[i] = 0.999 * v[i] + 0.001 * g[i] * g[i];
      const double mh = m[i] / (1 - std::pow(0.9, t)), vh = v[i] / (1 - std::pow(0.999, t));
      pr[i] -= 0.01 * mh / (std::sqrt(vh) + 1e-8);
    }
  }
  for (size_t i = 0; i < n; ++i) EXPECT_NEAR(p[i], pr[i], 1e-5 * (1 + std::abs(pr[i])));
}

TEST(Optimizer, UpdatingSlicesEqualsUpdatingTheWhole) {
  // What a parameter-server shard relies on: elementwise state.
  for (const char* type : {"sgd", "adam"}) {
    OptimizerOptions o;
    o.type = type;
    o.momentum = 0.9f;
    const size_t n = 64;
    auto whole = randn(n, 3), sliced = whole;
    auto full = make_optimizer(o, n);
    auto lo = make_optimizer(o, 20), hi = make_optimizer(o, n - 20);
    for (int s = 0; s < 5; ++s) {
      auto g = randn(n, 300 + s);
      full->step(whole, g);
      lo->step(std::span<float>(sliced).subspan(0, 20), std::span<const float>(g).subspan(0, 20));
      hi->step(std::span<float>(sliced).subspan(20), std::span<const float>(g).subspan(20));
    }
    for (size_t i = 0; i < n; ++i) EXPECT_EQ(whole[i], sliced[i]) << type << " element " << i;
  }
}

TEST(Optimizer, AStepTakenInSlicesInAnyOrderIsBitwiseOneStep) {
  // What a sharded optimizer relies on (sync/zero_sync.h, stage 2): each
  // bucket's piece stepped as it is reduced, then the step counted once —
  // the rate and Adam's bias correction are those of the step being taken.
  for (const char* type : {"sgd", "adam"}) {
    OptimizerOptions o;
    o.type = type;
    o.momentum = 0.9f;
    o.schedule = "cosine";
    o.warmup_steps = 2;
    o.total_steps = 6;
    const size_t n = 64;
    auto whole = randn(n, 5), sliced = whole;
    auto full = make_optimizer(o, n), pieces = make_optimizer(o, n);
    for (int s = 0; s < 6; ++s) {
      auto g = randn(n, 500 + s);
      full->step(whole, g);
      // [40, 64), [0, 17), [17, 40): back to front, as a backward finishes them.
      for (const auto& [b, e] : {std::pair<size_t, size_t>{40, 64}, {0, 17}, {17, 40}})
        pieces->step_slice(static_cast<int64_t>(b), std::span<float>(sliced).subspan(b, e - b),
                           std::span<const float>(g).subspan(b, e - b));
      pieces->end_step();
    }
    EXPECT_EQ(pieces->steps(), full->steps());
    for (size_t i = 0; i < n; ++i) EXPECT_EQ(whole[i], sliced[i]) << type << " element " << i;
  }
  // Counting the step matters: without end_step() Adam's bias correction stays at step 1.
  OptimizerOptions adam;
  adam.type = "adam";
  auto a = make_optimizer(adam, 4), b = make_optimizer(adam, 4);
  std::vector<float> pa(4, 1.0f), pb(4, 1.0f), g = {0.1f, -0.2f, 0.3f, 0.4f};
  for (int s = 0; s < 3; ++s) {
    a->step(pa, g);
    b->step_slice(0, pb, g);
  }
  EXPECT_NE(pa, pb);
}

TEST(Optimizer, CosineScheduleWarmsUpThenDecaysToZero) {
  OptimizerOptions o;
  o.lr = 1.0f;
  o.schedule = "cosine";
  o.warmup_steps = 10;
  o.total_steps = 110;
  EXPECT_FLOAT_EQ(scheduled_lr(o, 0), 0.1f);
  EXPECT_FLOAT_EQ(scheduled_lr(o, 9), 1.0f);
  EXPECT_FLOAT_EQ(scheduled_lr(o, 10), 1.0f);
  EXPECT_NEAR(scheduled_lr(o, 60), 0.5f, 1e-6);
  EXPECT_NEAR(scheduled_lr(o, 110), 0.0f, 1e-7);
  // The optimizer applies the scheduled rate: plain SGD moves by lr(t)·g.
  o.momentum = 0.0f;
  auto opt = make_optimizer(o, 1);
  float p = 0.0f;
  const float g = 1.0f;
  for (int t = 0; t < 60; ++t) opt->step(std::span<float>(&p, 1), std::span<const float>(&g, 1));
  double expected = 0;
  for (int t = 0; t < 60; ++t) expected -= scheduled_lr(o, t);
  EXPECT_NEAR(p, expected, 1e-4);
  o.schedule = "step";
  EXPECT_THROW(make_optimizer(o, 1), ConfigError);
}

TEST(Optimizer, UnknownTypeIsAConfigError) {
  OptimizerOptions o;
  o.type = "lamb";
  EXPECT_THROW(make_optimizer(o, 4), ConfigError);
}

}  // namespace
}  // namespace psar
