#include "core/optim.h"

#include <cmath>
#include <vector>

#include "core/errors.h"

namespace psar {

namespace {

// SGD with (heavy-ball) momentum: v = μ·v + g;  p -= lr·v.
class Sgd final : public Optimizer {
 public:
  Sgd(const OptimizerOptions& o, int64_t size) : o_(o) {
    if (o.momentum != 0.0f) velocity_.assign(static_cast<size_t>(size), 0.0f);
  }
  void step(std::span<float> p, std::span<const float> g) override {
    PSAR_CHECK(p.size() == g.size(), "sgd: params and grads differ in size");
    const float lr = o_.lr, mu = o_.momentum, wd = o_.weight_decay;
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
  OptimizerOptions o_;
  std::vector<float> velocity_;
};

// Adam (AdamW when weight_decay > 0), with bias correction.
class Adam final : public Optimizer {
 public:
  Adam(const OptimizerOptions& o, int64_t size)
      : o_(o), m_(static_cast<size_t>(size), 0.0f), v_(static_cast<size_t>(size), 0.0f) {}
  void step(std::span<float> p, std::span<const float> g) override {
    PSAR_CHECK(p.size() == g.size() && p.size() == m_.size(), "adam: size mismatch");
    ++steps_;
    const float b1 = o_.beta1, b2 = o_.beta2;
    const float c1 = 1.0f - static_cast<float>(std::pow(b1, steps_));
    const float c2 = 1.0f - static_cast<float>(std::pow(b2, steps_));
    for (size_t i = 0; i < p.size(); ++i) {
      const float m = b1 * m_[i] + (1.0f - b1) * g[i];
      const float v = b2 * v_[i] + (1.0f - b2) * g[i] * g[i];
      m_[i] = m;
      v_[i] = v;
      p[i] -= o_.lr * ((m / c1) / (std::sqrt(v / c2) + o_.eps) + o_.weight_decay * p[i]);
    }
  }

 private:
  OptimizerOptions o_;
  std::vector<float> m_, v_;
};

}  // namespace

std::unique_ptr<Optimizer> make_optimizer(const OptimizerOptions& options, int64_t size) {
  if (options.type == "sgd") return std::make_unique<Sgd>(options, size);
  if (options.type == "adam") return std::make_unique<Adam>(options, size);
  throw ConfigError("optimizer.type: unknown optimizer '" + options.type +
                    "' (expected sgd or adam)");
}

}  // namespace psar
