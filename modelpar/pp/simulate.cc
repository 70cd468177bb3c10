#include "modelpar/pp/simulate.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/errors.h"
#include "modelpar/pp/replay.h"
#include "modelpar/pp/validate.h"

namespace psar::pp {

using psar::detail::concat;

namespace {

void check_cost(const char* name, double value) {
  if (!std::isfinite(value) || value < 0)
    throw ConfigError(
        concat("pipeline simulator: ", name, " = ", value, " must be a finite, non-negative time"));
}

// Share of a stage's work each virtual stage carries: 1/v for an even split.
std::vector<double> vstage_weights(const Schedule& s, const std::vector<int>& layers) {
  const int vstages = s.virtual_stages();
  if (layers.empty()) return std::vector<double>(static_cast<size_t>(vstages), 1.0 / s.chunks);
  if (layers.size() != static_cast<size_t>(vstages))
    throw ConfigError(concat("pipeline simulator: ", layers.size(),
                             " layer counts for p·v = ", vstages, " virtual stages"));
  const long long total = std::accumulate(layers.begin(), layers.end(), 0LL);
  if (total <= 0 || *std::min_element(layers.begin(), layers.end()) < 1)
    throw ConfigError("pipeline simulator: every virtual stage needs at least one layer");
  std::vector<double> w;
  for (int n : layers) w.push_back(static_cast<double>(n) * s.stages / static_cast<double>(total));
  return w;
}

// Replays a validated schedule and sums up busy and idle time per stage.
Prediction replay_validated(const Schedule& s, const detail::DurationFn& duration,
                            const detail::TransferTimeFn& transfer);

}  // namespace

Prediction simulate(const Schedule& s, const SimOptions& options) {
  validate(s);
  const CostModel& c = options.costs;
  check_cost("t_f", c.forward);
  check_cost("t_b", c.backward_input);
  check_cost("t_w", c.backward_weight);
  check_cost("p2p latency", c.p2p_latency);
  if (c.forward + c.backward_input + c.backward_weight <= 0)
    throw ConfigError("pipeline simulator: t_f + t_b + t_w must be positive");
  const std::vector<double> weight = vstage_weights(s, options.layers_per_vstage);

  const auto duration = [&](int stage, const Action& a) {
    const double w = weight[static_cast<size_t>(s.virtual_stage(stage, a.chunk))];
    switch (a.op) {
      case Op::kForward:
        return w * c.forward;
      case Op::kBackward:
        return w * (c.backward_input + c.backward_weight);
      case Op::kBackwardInput:
        return w * c.backward_input;
      case Op::kBackwardWeight:
        return w * c.backward_weight;
    }
    return 0.0;
  };
  return replay_validated(s, duration, [&](const Transfer&) {
    return TransferTime{c.p2p_latency, 0.0};
  });
}

Prediction simulate_costs(const Schedule& s, const ActionCost& cost, double p2p_latency) {
  check_cost("p2p latency", p2p_latency);
  return simulate_costs(s, cost, [p2p_latency](const Transfer&) {
    return TransferTime{p2p_latency, 0.0};
  });
}

Prediction simulate_costs(const Schedule& s, const ActionCost& cost, const TransferCost& transfer) {
  validate(s);
  const auto duration = [&](int stage, const Action& a) {
    const double t = cost(stage, a);
    if (!std::isfinite(t) || t < 0)
      throw ConfigError(concat("pipeline simulator: ", op_name(a.op), " of micro-batch ",
                               a.microbatch, ", chunk ", a.chunk, " on stage ", stage,
                               " has duration ", t, "; durations must be finite and non-negative"));
    return t;
  };
  const auto latency = [&](const Transfer& t) {
    const TransferTime time = transfer(t);
    for (const double delay : {time.arrival, time.sender_busy})
      if (!std::isfinite(delay) || delay < 0)
        throw ConfigError(concat("pipeline simulator: the ", describe(t), " has delay ", delay,
                                 "; delays must be finite and non-negative"));
    return time;
  };
  return replay_validated(s, duration, latency);
}

namespace {

Prediction replay_validated(const Schedule& s, const detail::DurationFn& duration,
                            const detail::TransferTimeFn& transfer) {
  detail::Replay r = detail::replay(s, duration, transfer);
  PSAR_CHECK(r.finished(), "a validated schedule did not finish in the simulator");

  Prediction out;
  out.spans = std::move(r.spans);
  double total_busy = 0, total_idle = 0;
  for (const auto& spans : out.spans) {
    double busy = 0;
    for (const auto& span : spans) {
      busy += span.end - span.start;
      out.makespan = std::max(out.makespan, span.end);
    }
    out.busy.push_back(busy);
    total_busy += busy;
  }
  for (double busy : out.busy) {
    out.idle.push_back(out.makespan - busy);
    total_idle += out.makespan - busy;
  }
  // Two single divisions of exactly summed times: exact whenever the costs
  // are small dyadic numbers (1, 0.5, ...), as the tests require.
  out.bubble_fraction = total_busy > 0 ? total_idle / total_busy : 0;
  out.idle_share = out.makespan > 0 ? total_idle / (s.stages * out.makespan) : 0;
  out.peak_activations = peak_activations(s);
  return out;
}

}  // namespace

std::vector<int> peak_activations(const Schedule& s) {
  std::vector<int> peaks;
  for (const auto& actions : s.actions) {
    int live = 0, peak = 0;
    for (const Action& a : actions) {
      if (a.op == Op::kForward) peak = std::max(peak, ++live);
      // Freed by the last reader: a fused backward, or the weight gradient.
      if (a.op == Op::kBackward || a.op == Op::kBackwardWeight) --live;
    }
    peaks.push_back(peak);
  }
  return peaks;
}

}  // namespace psar::pp
