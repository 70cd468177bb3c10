#include "core/optim.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/errors.h"

namespace psar {

namespace {

// SGD with (heavy-ball) momentum: v = μ·v + g;  p -= lr·v.
class Sgd final : public Optimizer {
 public:
  Sgd(const OptimizerOptions& o, int64_t size) : Optimizer(o) {
    if (o.momentum != 0.0f) velocity_.assign(static_cast<size_t>(size), 0.0f);
  }
  void step(std::span<float> p, std::span<const float> g) override {
    PSAR_CHECK(p.size() == g.size(), "sgd: params and grads differ in size");
    const float lr = this->lr(), mu = options_.momentum, wd = options_.weight_decay;
    if (velocity_.empty()) {
      for (size_t i = 0; i < p.size(); ++i) p[i] -= lr * (g[i] + wd * p[i]);
    } else {
      PSAR_CHECK(velocity_.size() == p.size(), "sgd: state sized ", velocity_.size(),
                 " but step() got ", p.size());
      for (size_t i = 0; i < p.size(); ++i) {
        const float v = mu * velocity_[i] + g[i] + wd * p[i];
        velocity_[i] = v;
        p[i] -= lr * v;
      }
    }
    ++steps_;
  }

 private:
  std::vector<float> velocity_;
};

// Adam (AdamW when weight_decay > 0), with bias correction.
class Adam final : public Optimizer {
 public:
  Adam(const OptimizerOptions& o, int64_t size)
      : Optimizer(o), m_(static_cast<size_t>(size), 0.0f), v_(static_cast<size_t>(size), 0.0f) {}
  void step(std::span<float> p, std::span<const float> g) override {
    PSAR_CHECK(p.size() == g.size() && p.size() == m_.size(), "adam: size mismatch");
    const float lr = this->lr();
    ++steps_;
    const float b1 = options_.beta1, b2 = options_.beta2;
    const float c1 = 1.0f - static_cast<float>(std::pow(b1, steps_));
    const float c2 = 1.0f - static_cast<float>(std::pow(b2, steps_));
    for (size_t i = 0; i < p.size(); ++i) {
      const float m = b1 * m_[i] + (1.0f - b1) * g[i];
      const float v = b2 * v_[i] + (1.0f - b2) * g[i] * g[i];
      m_[i] = m;
      v_[i] = v;
      p[i] -= lr * ((m / c1) / (std::sqrt(v / c2) + options_.eps) + options_.weight_decay * p[i]);
    }
  }

 private:
  std::vector<float> m_, v_;
};

}  // namespace

float scheduled_lr(const OptimizerOptions& o, int64_t step) {
  if (o.warmup_steps > 0 && step < o.warmup_steps)
    return o.lr * static_cast<float>(step + 1) / static_cast<float>(o.warmup_steps);
  if (o.schedule == "cosine" && o.total_steps > o.warmup_steps) {
    const double progress = std::min(1.0, static_cast<double>(step - o.warmup_steps) /
                                              static_cast<double>(o.total_steps - o.warmup_steps));
    return static_cast<float>(o.lr * 0.5 * (1.0 + std::cos(3.141592653589793 * progress)));
  }
  return o.lr;
}

std::unique_ptr<Optimizer> make_optimizer(const OptimizerOptions& options, int64_t size) {
  if (options.schedule != "constant" && options.schedule != "cosine")
    throw ConfigError("optimizer.schedule: unknown schedule '" + options.schedule +
                      "' (expected constant or cosine)");
  if (options.type == "sgd") return std::make_unique<Sgd>(options, size);
  if (options.type == "adam") return std::make_unique<Adam>(options, size);
  throw ConfigError("optimizer.type: unknown optimizer '" + options.type +
                    "' (expected sgd or adam)");
}

}  // namespace psar
