// 1F1B (PipeDream-Flush; Narayanan et al. 2021): stage r runs a warm-up of
// p − r − 1 forwards, then alternates one forward and one (fused) backward
// until the forwards run out, then drains the remaining backwards. The
// bubble is GPipe's, (p−1)/m, but a micro-batch's activations are freed by
// its backward after at most p − r later forwards: stage r holds at most
// p − r micro-batches, p on the first stage, instead of m. Needs m ≥ p, so
// that the warm-up (p − 1 forwards on stage 0) ends before the forwards do;
// with fewer micro-batches the schedule degenerates into GPipe. One chunk
// per stage.

#include <algorithm>

#include "modelpar/pp/generators.h"

namespace psar::pp {

Schedule one_f_one_b(const ScheduleShape& shape) {
  detail::check_shape("1f1b", shape, kOneFOneBCaps);
  Schedule s = detail::empty_schedule("1f1b", shape);
  const int p = shape.stages, m = shape.microbatches;
  for (int r = 0; r < p; ++r) {
    auto& actions = s.actions[static_cast<size_t>(r)];
    const int warmup = p - r - 1;
    int next_f = 0, next_b = 0;
    while (next_f < warmup) actions.push_back({Op::kForward, next_f++, 0});
    while (next_f < m) {
      actions.push_back({Op::kForward, next_f++, 0});
      actions.push_back({Op::kBackward, next_b++, 0});
    }
    while (next_b < m) actions.push_back({Op::kBackward, next_b++, 0});
  }
  return s;
}

}  // namespace psar::pp

namespace psar::pp {

double one_f_one_b_bubble(const ScheduleShape& shape, const CostModel&) {
  return static_cast<double>(shape.stages - 1) / shape.microbatches;
}

// Warm-up p − r − 1 plus the first steady-state forward.
int one_f_one_b_peak(const ScheduleShape& shape, int stage) { return shape.stages - stage; }

}  // namespace psar::pp
