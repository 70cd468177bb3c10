// Interleaved 1F1B (Narayanan et al. 2021, Megatron-LM's
// forward_backward_pipelining_with_interleaving). Each stage holds v chunks,
// virtual stages s, p + s, ..., (v−1)p + s, so a micro-batch crosses the p
// ranks v times and each action costs 1/v of a stage's time. Forwards run in
// groups of p micro-batches per chunk — chunk 0 for micro-batches 0..p−1,
// chunk 1 for the same p, ..., then chunk 0 for p..2p−1 — and backwards in the
// same order with the chunks reversed. Stage r warms up with
// 2(p − r − 1) + (v − 1)p forwards (all m·v of them when m = p, as Megatron
// does), alternates one forward and one backward, and drains. The fill and
// drain shrink by v: bubble (p−1)/(v·m), for v× more point-to-point messages
// and a deeper warm-up (stage 0 holds (v+1)p − 1 chunk activations of 1/v
// size each). m must be a multiple of p (the grouping runs whole groups of p),
// hence m ≥ p. With v = 1 this is exactly 1F1B, as in Megatron without a
// virtual pipeline.

#include <algorithm>

#include "core/errors.h"
#include "modelpar/pp/generators.h"

namespace psar::pp {

namespace {

// The k-th forward (or backward) a stage runs: which micro-batch and chunk.
Action nth_action(int k, int p, int v, bool forward) {
  const int group = k / (p * v);  // which block of p micro-batches
  const int in_group = k % (p * v);
  int chunk = in_group / p;
  if (!forward) chunk = v - 1 - chunk;
  const int microbatch = group * p + in_group % p;
  return {forward ? Op::kForward : Op::kBackward, microbatch, chunk};
}

}  // namespace

Schedule interleaved(const ScheduleShape& shape) {
  detail::check_shape("interleaved", shape, kInterleavedCaps);
  const int p = shape.stages, m = shape.microbatches, v = shape.chunks;
  if (v == 1) {
    Schedule s = one_f_one_b(shape);
    s.kind = "interleaved";
    return s;
  }
  Schedule s = detail::empty_schedule("interleaved", shape);
  const int total = m * v;  // forwards (and backwards) per stage
  for (int r = 0; r < p; ++r) {
    auto& actions = s.actions[static_cast<size_t>(r)];
    const int warmup = m == p ? total : std::min(2 * (p - r - 1) + (v - 1) * p, total);
    for (int k = 0; k < warmup; ++k) actions.push_back(nth_action(k, p, v, true));
    for (int k = 0; k < total - warmup; ++k) {
      actions.push_back(nth_action(warmup + k, p, v, true));
      actions.push_back(nth_action(k, p, v, false));
    }
    for (int k = std::max(total - warmup, 0); k < total; ++k)
      actions.push_back(nth_action(k, p, v, false));
  }
  return s;
}

}  // namespace psar::pp

namespace psar::pp {

double interleaved_bubble(const ScheduleShape& shape, const CostModel&) {
  return static_cast<double>(shape.stages - 1) /
         (static_cast<double>(shape.chunks) * shape.microbatches);
}

// The warm-up plus the first steady-state forward, in chunk activations.
int interleaved_peak(const ScheduleShape& shape, int stage) {
  const int p = shape.stages, m = shape.microbatches, v = shape.chunks;
  if (v == 1) return p - stage;
  if (m == p) return m * v;
  return std::min(2 * (p - stage - 1) + (v - 1) * p + 1, m * v);
}

}  // namespace psar::pp
