// ZB-H1, the first handcrafted zero-bubble schedule of Qi et al. 2023
// ("Zero Bubble Pipeline Parallelism"). The backward is split into B, the
// input gradient the previous stage waits for, and W, the weight gradient
// nobody waits for. Stage r runs 1F1B's warm-up of p − r − 1 forwards; then
// r rounds of (F, B) whose W is deferred; then (F, B, W) rounds until the
// forwards run out; then (B, W) rounds; finally the r deferred W. Deferring
// r W on stage r lets the B chain run back up the pipeline without waiting
// behind weight gradients, and the deferred W fill the drain. With per-stage
// times t_f, t_b, t_w each stage idles (p−1)(t_f + t_b − t_w) instead of
// 1F1B's (p−1)(t_f + t_b + t_w): a third of it when t_f = t_b = t_w.
// Memory is 1F1B's peak: counting a micro-batch from its F until its W
// (which still needs the stored activations), every stage holds at most p.
// Needs m ≥ p; one chunk per stage. (The paper's ZB-H2 and automatic
// schedules trade more memory for less bubble and are not implemented.)

#include <algorithm>

#include "modelpar/pp/generators.h"

namespace psar::pp {

Schedule zb_h1(const ScheduleShape& shape) {
  detail::check_shape("zb_h1", shape, kZbH1Caps);
  Schedule s = detail::empty_schedule("zb_h1", shape);
  const int p = shape.stages, m = shape.microbatches;
  for (int r = 0; r < p; ++r) {
    auto& actions = s.actions[static_cast<size_t>(r)];
    int next_f = 0, next_b = 0, next_w = 0;
    const auto forward = [&] { actions.push_back({Op::kForward, next_f++, 0}); };
    const auto input_grad = [&] { actions.push_back({Op::kBackwardInput, next_b++, 0}); };
    const auto weight_grad = [&] { actions.push_back({Op::kBackwardWeight, next_w++, 0}); };
    // m ≥ p: the first two phases use p − 1 < m forwards.
    for (int k = 0; k < p - r - 1; ++k) forward();
    for (int k = 0; k < r; ++k) forward(), input_grad();
    while (next_f < m) forward(), input_grad(), weight_grad();
    while (next_b < m) input_grad(), weight_grad();
    while (next_w < m) weight_grad();
  }
  return s;
}

}  // namespace psar::pp

namespace psar::pp {

// Each stage idles (p−1)(t_f + t_b − min(t_f, t_b, t_w)): the paper's
// (p−1)(t_f + t_b − t_w) in its regime t_w ≤ t_f, t_b. (The simulator finds
// the min form exact for every cost triple the tests sweep.)
double zb_h1_bubble(const ScheduleShape& shape, const CostModel& c) {
  const double saved = std::min({c.forward, c.backward_input, c.backward_weight});
  return (shape.stages - 1) * (c.forward + c.backward_input - saved) /
         (shape.microbatches * (c.forward + c.backward_input + c.backward_weight));
}

// p − 1 forwards before the first W frees anything, then one more.
int zb_h1_peak(const ScheduleShape& shape, int) { return shape.stages; }

}  // namespace psar::pp
