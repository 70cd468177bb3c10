#include "workloads/synthetic_stages.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

#include "core/errors.h"
#include "core/timer.h"
#include "modelpar/tp/group.h"

namespace psar {

using psar::detail::concat;

namespace {

// Waits until `seconds` after `start` (now_seconds() clock): one wake-up per
// action, so the oversleep does not add up over its layers. It sleeps to
// kSpinTail before the end and spins the rest, because a wake-up comes tens
// of µs late (more on a busy machine): the action then ends on time at the
// cost of ≤ kSpinTail of CPU per action (≤ 10% at 1 ms, ≤ 1% at 10 ms).
constexpr double kSpinTail = 100e-6;

void wait_until(double start, double seconds) {
  if (seconds <= 0) return;
  const double end = start + seconds;
  if (seconds > kSpinTail)
    std::this_thread::sleep_until(std::chrono::steady_clock::time_point(
        std::chrono::duration_cast<std::chrono::steady_clock::duration>(
            std::chrono::duration<double>(end - kSpinTail))));
  while (now_seconds() < end) {
  }
}

void check_value(const char* what, int vstage, int microbatch, float got, double expected) {
  if (static_cast<double>(got) != expected)
    throw DataError(concat("synthetic_stages: virtual stage ", vstage, " received the ", what,
                           " tagged ", got, " for micro-batch ", microbatch, ", expected ",
                           expected, " — a transfer reached the wrong action"));
}

}  // namespace

// One tensor of activation_bytes per layer of the chunk; the first holds the
// chunk's input (its tag checked again in the backward).
struct SyntheticStages::Stash final : pp::Activations {
  std::vector<std::vector<float>> layers;
  int64_t bytes() const override {
    size_t n = 0;
    for (const auto& t : layers) n += t.size();
    return static_cast<int64_t>(n * sizeof(float));
  }
};

SyntheticStages::SyntheticStages(SyntheticStagesOptions options, const ModelContext& context)
    : o_(options), layout_(context.layout) {
  if (context.tp && context.tp->size() > 1)
    throw ConfigError(concat("model.type synthetic_stages has no tensor-parallel layers "
                             "(parallel.tp = ", context.tp->size(), "); set parallel.tp = 1"));
  if (layout_.layers.empty()) layout_ = StageLayout::serial(o_.layers, 1);
  if (o_.layers < 1) throw ConfigError(concat("model.layers must be at least 1, got ", o_.layers));
  if (o_.activation_bytes < static_cast<int64_t>(sizeof(float)))
    throw ConfigError(concat("model.activation_bytes must be at least 4 bytes, got ",
                             o_.activation_bytes));
  for (double t : {o_.forward_s, o_.backward_s, o_.weight_grad_s})
    if (!(t >= 0)) throw ConfigError(concat("synthetic_stages: layer times must be >= 0, got ", t));
  numel_ = (o_.activation_bytes + static_cast<int64_t>(sizeof(float)) - 1) /
           static_cast<int64_t>(sizeof(float));
}

std::unique_ptr<pp::Activations> SyntheticStages::make_activations(int) const {
  return std::make_unique<Stash>();
}

int SyntheticStages::layers_of(int chunk) const {
  const auto [first, last] = layout_.layer_range(layout_.vstage(chunk));
  return last - first;
}

int64_t SyntheticStages::activation_bytes(int chunk) const {
  return layers_of(chunk) * numel_ * static_cast<int64_t>(sizeof(float));
}

void SyntheticStages::declare(ParamStore& store, int chunk) {
  const auto [first, last] = layout_.layer_range(layout_.vstage(chunk));
  params_.resize(static_cast<size_t>(layout_.chunks), -1);
  for (int l = first; l < last; ++l) {
    const int id = store.add("layer" + std::to_string(l) + ".weight", {1}, Init::zeros());
    if (l == first) params_[static_cast<size_t>(chunk)] = id;
  }
}

void SyntheticStages::forward(int chunk, int i, pp::Activations& a, std::span<const float> x,
                              std::span<float> y) {
  const double start = now_seconds();
  const int u = layout_.vstage(chunk);
  const auto [first, last] = layout_.layer_range(u);
  auto& s = static_cast<Stash&>(a).layers;
  s.resize(static_cast<size_t>(last - first));
  for (auto& t : s) t.resize(static_cast<size_t>(numel_));
  // Layer `first`'s stored input: the received activation, or micro-batch i's own.
  std::vector<float>& input = s.front();
  if (u == 0) {
    std::fill(input.begin(), input.end(), static_cast<float>(i));
  } else {
    PSAR_CHECK(static_cast<int64_t>(x.size()) == numel_, "activation has ", x.size(), " floats");
    check_value("activation", u, i, x[0], i + first);
    std::memcpy(input.data(), x.data(), x.size() * sizeof(float));
  }
  if (u + 1 < layout_.vstages()) {
    std::memcpy(y.data(), input.data(), y.size() * sizeof(float));
    y[0] = static_cast<float>(i + last);
  }
  wait_until(start, (last - first) * o_.forward_s);
}

void SyntheticStages::input_gradient(int chunk, int i, const Stash& s, std::span<const float> dy,
                                     std::span<float> dx) {
  const int u = layout_.vstage(chunk);
  const auto [first, last] = layout_.layer_range(u);
  check_value("stashed activation", u, i, s.layers.front()[0], i + first);
  if (u + 1 < layout_.vstages()) {
    PSAR_CHECK(static_cast<int64_t>(dy.size()) == numel_, "gradient has ", dy.size(), " floats");
    check_value("gradient", u, i, dy[0], -(i + 1.0) - (o_.layers - last));
  }
  if (u > 0) {
    if (dy.empty()) std::fill(dx.begin(), dx.end(), 0.0f);
    else std::memcpy(dx.data(), dy.data(), dx.size() * sizeof(float));
    dx[0] = static_cast<float>(-(i + 1.0) - (o_.layers - first));
  }
}

void SyntheticStages::weight_gradient(int chunk) {
  const float share = 1.0f / static_cast<float>(layout_.microbatches);
  for (int j = layers_of(chunk); j-- > 0;) {
    const int id = params_[static_cast<size_t>(chunk)] + j;
    store_->grad(id)[0] += share;
    const ParamInfo& info = store_->infos()[static_cast<size_t>(id)];
    gradient_ready(chunk, info.offset, info.offset + info.numel);
  }
}

void SyntheticStages::backward_input(int chunk, int i, pp::Activations& a,
                                     std::span<const float> dy, std::span<float> dx) {
  const double start = now_seconds();
  input_gradient(chunk, i, static_cast<const Stash&>(a), dy, dx);
  wait_until(start, layers_of(chunk) * o_.backward_s);
}

void SyntheticStages::backward_weight(int chunk, int, pp::Activations&) {
  const double start = now_seconds();
  weight_gradient(chunk);
  wait_until(start, layers_of(chunk) * o_.weight_grad_s);
}

void SyntheticStages::backward(int chunk, int i, pp::Activations& a, std::span<const float> dy,
                               std::span<float> dx) {
  const double start = now_seconds();
  input_gradient(chunk, i, static_cast<const Stash&>(a), dy, dx);
  weight_gradient(chunk);
  wait_until(start, layers_of(chunk) * (o_.backward_s + o_.weight_grad_s));
}

int synthetic_layers(const WorkloadOptions& options, const Dataset&) {
  return options.synthetic.layers;
}

std::unique_ptr<Model> make_synthetic_stages(const WorkloadOptions& options, const Dataset&,
                                             const ModelContext& context) {
  return std::make_unique<SyntheticStages>(options.synthetic, context);
}

}  // namespace psar
