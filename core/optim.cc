#include "core/optim.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/config.h"
#include "core/errors.h"
#include "core/tensor.h"
#if PSAR_HAVE_CUDA
#include "core/ops_cuda.h"
#endif

namespace psar {

OptimizerOptions optimizer_options(const Config& c) {
  OptimizerOptions o;
  o.type = c.get_string("optimizer.type");
  o.lr = static_cast<float>(c.get_float("optimizer.lr"));
  o.momentum = static_cast<float>(c.get_float("optimizer.momentum"));
  o.weight_decay = static_cast<float>(c.get_float("optimizer.weight_decay"));
  o.beta1 = static_cast<float>(c.get_float("optimizer.beta1"));
  o.beta2 = static_cast<float>(c.get_float("optimizer.beta2"));
  o.eps = static_cast<float>(c.get_float("optimizer.eps"));
  o.schedule = c.get_string("optimizer.schedule");
  o.warmup_steps = c.get_int("optimizer.warmup_steps");
  return o;
}

namespace {

// On a CUDA optimizer (state and spans in device memory) the update runs in
// core/ops_cuda.cu with the same formulas; one branch per step.
#if PSAR_HAVE_CUDA
#define PSAR_OPTIMIZER_ON_CUDA(kernel, ...) \
  if (device_ == Device::kCuda) [[unlikely]] return ops::cuda::kernel(__VA_ARGS__)
#else
#define PSAR_OPTIMIZER_ON_CUDA(kernel, ...)
#endif

// The optimizers' loops, built for AVX2 and for the baseline and picked at
// load time, like the reduction kernels in ops.cc. Every operation is an IEEE
// single-precision +, ×, ÷ or √ (no FMA contraction, no approximate reciprocal
// square root), so both builds, the vector body and the scalar tail give the
// same bits, and updating a slice equals slicing the full update.
#define PSAR_OPTIMIZER_KERNEL __attribute__((target_clones("avx2", "default")))

// p -= lr·(g + wd·p)
PSAR_OPTIMIZER_KERNEL void sgd_kernel(float* p, const float* g, int64_t n, float lr, float wd) {
  for (int64_t i = 0; i < n; ++i) p[i] -= lr * (g[i] + wd * p[i]);
}

// v = μ·v + g + wd·p;  p -= lr·v
PSAR_OPTIMIZER_KERNEL void sgd_momentum_kernel(float* p, const float* g, float* velocity,
                                               int64_t n, float lr, float mu, float wd) {
  for (int64_t i = 0; i < n; ++i) {
    const float v = mu * velocity[i] + g[i] + wd * p[i];
    velocity[i] = v;
    p[i] -= lr * v;
  }
}

// SGD with (heavy-ball) momentum: v = μ·v + g;  p -= lr·v.
class Sgd final : public Optimizer {
 public:
  Sgd(const OptimizerOptions& o, int64_t size, Device device)
      : Optimizer(o), device_(device), size_(size) {
    if (o.momentum != 0.0f) velocity_ = Tensor({size}, device);
  }
  void step_slice(int64_t offset, std::span<float> p, std::span<const float> g) override {
    PSAR_CHECK(p.size() == g.size(), "sgd: params and grads differ in size");
    PSAR_CHECK(offset >= 0 && offset + static_cast<int64_t>(p.size()) <= size_, "sgd: slice [",
               offset, ", ", offset + static_cast<int64_t>(p.size()), ") outside its ", size_,
               " floats");
    const float lr = this->lr(), mu = options_.momentum, wd = options_.weight_decay;
    const auto n = static_cast<int64_t>(p.size());
    if (velocity_.numel() == 0)
      update(p.data(), g.data(), n, lr, wd);
    else
      update_momentum(p.data(), g.data(), velocity_.data() + offset, n, lr, mu, wd);
  }
  int64_t size() const override { return size_; }
  std::vector<std::span<float>> state() override {
    if (velocity_.numel() == 0) return {};
    return {velocity_.span()};
  }
  Device device() const override { return device_; }

 private:
  void update(float* p, const float* g, int64_t n, float lr, float wd) {
    PSAR_OPTIMIZER_ON_CUDA(sgd, p, g, n, lr, wd);
    sgd_kernel(p, g, n, lr, wd);
  }
  void update_momentum(float* p, const float* g, float* v, int64_t n, float lr, float mu,
                       float wd) {
    PSAR_OPTIMIZER_ON_CUDA(sgd_momentum, p, g, v, n, lr, mu, wd);
    sgd_momentum_kernel(p, g, v, n, lr, mu, wd);
  }

  Device device_;
  int64_t size_;
  Tensor velocity_;
};

// One Adam step over n elements (AdamW decay when wd > 0), the bias
// corrections passed as reciprocals: m̂ = m·(1/c1), v̂ = v·(1/c2). It
// vectorizes because optim.cc is built with -fno-math-errno
// (core/CMakeLists.txt): the square root of v̂ ≥ 0 needs no errno path.
PSAR_OPTIMIZER_KERNEL void adam_kernel(
    float* __restrict p, const float* __restrict g, float* __restrict m_state,
    float* __restrict v_state, int64_t n, float lr, float b1, float b2, float inv_c1,
    float inv_c2, float eps, float wd) {
  for (int64_t i = 0; i < n; ++i) {
    const float m = b1 * m_state[i] + (1.0f - b1) * g[i];
    const float v = b2 * v_state[i] + (1.0f - b2) * g[i] * g[i];
    m_state[i] = m;
    v_state[i] = v;
    p[i] -= lr * ((m * inv_c1) / (std::sqrt(v * inv_c2) + eps) + wd * p[i]);
  }
}

// Adam (AdamW when weight_decay > 0), with bias correction.
class Adam final : public Optimizer {
 public:
  Adam(const OptimizerOptions& o, int64_t size, Device device)
      : Optimizer(o), device_(device), m_({size}, device), v_({size}, device) {}
  void step_slice(int64_t offset, std::span<float> p, std::span<const float> g) override {
    PSAR_CHECK(p.size() == g.size() && offset >= 0 &&
                   offset + static_cast<int64_t>(p.size()) <= m_.numel(),
               "adam: slice [", offset, ", ", offset + static_cast<int64_t>(p.size()),
               ") of a state of ", m_.numel(), " floats");
    const float lr = this->lr();
    const int64_t t = steps_ + 1;  // the step being taken
    const float b1 = options_.beta1, b2 = options_.beta2;
    const float c1 = 1.0f - static_cast<float>(std::pow(b1, t));
    const float c2 = 1.0f - static_cast<float>(std::pow(b2, t));
    // The kernel's pointers are __restrict: the parameters must not overlap the gradient.
    PSAR_CHECK(p.data() + p.size() <= g.data() || g.data() + g.size() <= p.data() || p.empty(),
               "adam: params and grads overlap");
    update(offset, p.data(), g.data(), static_cast<int64_t>(p.size()), lr, b1, b2, 1.0f / c1,
           1.0f / c2);
  }
  int64_t size() const override { return m_.numel(); }
  std::vector<std::span<float>> state() override { return {m_.span(), v_.span()}; }
  Device device() const override { return device_; }

 private:
  void update(int64_t offset, float* p, const float* g, int64_t n, float lr, float b1, float b2,
              float inv_c1, float inv_c2) {
    const float eps = options_.eps, wd = options_.weight_decay;
    float* m = m_.data() + offset;
    float* v = v_.data() + offset;
    PSAR_OPTIMIZER_ON_CUDA(adam, p, g, m, v, n, lr, b1, b2, inv_c1, inv_c2, eps, wd);
    adam_kernel(p, g, m, v, n, lr, b1, b2, inv_c1, inv_c2, eps, wd);
  }

  Device device_;
  Tensor m_, v_;
};

}  // namespace

void Optimizer::step(std::span<float> params, std::span<const float> grads) {
  PSAR_CHECK(static_cast<int64_t>(params.size()) == size(), "optimizer: step() over ",
             params.size(), " floats, its state holds ", size());
  step_slice(0, params, grads);
  end_step();
}

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

namespace {
template <class T>
std::unique_ptr<Optimizer> make_one(const OptimizerOptions& options, int64_t size, Device device) {
  return std::make_unique<T>(options, size, device);
}
constexpr struct {
  const char* name;
  std::unique_ptr<Optimizer> (*make)(const OptimizerOptions&, int64_t, Device);
} kOptimizers[] = {{"sgd", &make_one<Sgd>}, {"adam", &make_one<Adam>}};
constexpr const char* kLrSchedules[] = {"constant", "cosine"};  // scheduled_lr
}  // namespace

std::vector<std::string> optimizer_names() {
  std::vector<std::string> names;
  for (const auto& o : kOptimizers) names.emplace_back(o.name);
  return names;
}

std::vector<std::string> lr_schedule_names() { return {std::begin(kLrSchedules), std::end(kLrSchedules)}; }

std::unique_ptr<Optimizer> make_optimizer(const OptimizerOptions& options, int64_t size,
                                          Device device) {
  const auto schedules = lr_schedule_names();
  if (std::find(schedules.begin(), schedules.end(), options.schedule) == schedules.end())
    throw ConfigError("optimizer.schedule: unknown schedule '" + options.schedule +
                      "' (expected constant or cosine)");
  for (const auto& o : kOptimizers)
    if (options.type == o.name) return o.make(options, size, device);
  throw ConfigError("optimizer.type: unknown optimizer '" + options.type +
                    "' (expected sgd or adam)");
}

}  // namespace psar
