#pragma once
// The schedule simulator: replays a valid schedule with per-action costs and
// predicts its timeline, bubble and activation memory.
//
// Costs are per stage and micro-batch, for all of a stage's layers: t_f
// (forward), t_b (input gradient), t_w (weight gradient); a fused backward
// costs t_b + t_w. With v chunks an action on a chunk costs its share of the
// stage's layers: 1/v of it for an even split. Communication is free unless
// `p2p_latency` > 0, which delays every transfer between different stages.
//
// Bubble, two views of the same idle time (idle_s = makespan − busy_s):
//   bubble_fraction = Σ idle_s / Σ busy_s — the lecture notes' definition,
//       bubble time over ideal compute time: (p−1)/m for GPipe and 1F1B,
//       (p−1)/(v·m) for interleaved, with equal stages and any t_f, t_b, t_w.
//   idle_share = Σ idle_s / (p · makespan) — the share of the device-time
//       the pipeline idles, what an executor's timers measure: (p−1)/(m+p−1)
//       for GPipe and 1F1B. idle_share = b / (1 + b) for b = bubble_fraction.
//
// Activation memory: a micro-batch's activation on a virtual stage is alive
// from its forward until the last backward action that reads it — the fused
// backward, or the weight gradient W when the backward is split (W needs the
// stored layer inputs). Peak in-flight activations count those per stage at
// once: m for GPipe, p − r on stage r of 1F1B, p on every ZB-H1 stage. With
// v > 1 one count is one chunk's activation, 1/v of a stage's for an even split.

#include <functional>
#include <vector>

#include "modelpar/pp/p2p.h"
#include "modelpar/pp/schedule.h"

namespace psar::pp {

struct CostModel {
  double forward = 1;          // t_f
  double backward_input = 1;   // t_b
  double backward_weight = 1;  // t_w
  double p2p_latency = 0;      // per transfer between different stages
};

struct SimOptions {
  CostModel costs;
  // Layers per virtual stage (partition.h); empty = an even split.
  std::vector<int> layers_per_vstage;
};

struct Prediction {
  double makespan = 0;
  std::vector<double> busy;  // [stage] compute time
  std::vector<double> idle;  // [stage] makespan − busy
  double bubble_fraction = 0;
  double idle_share = 0;
  std::vector<int> peak_activations;           // [stage]
  std::vector<std::vector<ActionSpan>> spans;  // [stage] in schedule order
};

// Validates the schedule (validate.h), then replays it; ConfigError for a
// negative or non-finite cost, or t_f + t_b + t_w = 0.
Prediction simulate(const Schedule& schedule, const SimOptions& options = {});

// The same replay with a duration per action instead of a cost model: e.g.
// an executor's measured mean times, to set a measured run beside the
// simulator at the costs it actually had. ConfigError for a negative or
// non-finite duration.
using ActionCost = std::function<double(int stage, const Action& action)>;
Prediction simulate_costs(const Schedule& schedule, const ActionCost& cost, double p2p_latency = 0);
// And with each transfer's arrival delay and the time it holds its sender
// (the cluster simulator's links, sim/step.h; a blocking send when > 0).
using TransferCost = std::function<TransferTime(const Transfer& transfer)>;
Prediction simulate_costs(const Schedule& schedule, const ActionCost& cost,
                          const TransferCost& transfer);

// Peak in-flight activations per stage; depends on the order only, not on costs.
std::vector<int> peak_activations(const Schedule& schedule);

}  // namespace psar::pp
