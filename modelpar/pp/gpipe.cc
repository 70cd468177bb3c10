// GPipe (Huang et al. 2019): every stage runs the forwards of all m
// micro-batches, then their backwards (fused, input and weight gradient
// together), in micro-batch order. The pipeline fills and drains once per
// direction: with per-stage times t_f and t_b each stage idles
// (p−1)(t_f + t_b) against m(t_f + t_b) of work, bubble (p−1)/m. The price is
// memory: all m micro-batches' activations are alive on every stage when the
// first backward starts (peak m). Any m ≥ 1 is valid; one chunk per stage.

#include "modelpar/pp/generators.h"

namespace psar::pp {

Schedule gpipe(const ScheduleShape& shape) {
  detail::check_shape("gpipe", shape, kGpipeCaps);
  Schedule s = detail::empty_schedule("gpipe", shape);
  for (auto& actions : s.actions) {
    for (int i = 0; i < shape.microbatches; ++i) actions.push_back({Op::kForward, i, 0});
    for (int i = 0; i < shape.microbatches; ++i) actions.push_back({Op::kBackward, i, 0});
  }
  return s;
}

}  // namespace psar::pp

namespace psar::pp {

double gpipe_bubble(const ScheduleShape& shape, const CostModel&) {
  return static_cast<double>(shape.stages - 1) / shape.microbatches;
}

int gpipe_peak(const ScheduleShape& shape, int) { return shape.microbatches; }

}  // namespace psar::pp
