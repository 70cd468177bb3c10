#include "sim/gpt_cost.h"

namespace psar::sim {

double block_forward_flops(const GptShape& g, int64_t b) {
  const double bs = static_cast<double>(b) * static_cast<double>(g.seq);
  const double h = static_cast<double>(g.hidden);
  return 24.0 * bs * h * h + 4.0 * bs * static_cast<double>(g.seq) * h;
}

double head_forward_flops(const GptShape& g, int64_t b) {
  return 2.0 * static_cast<double>(b) * static_cast<double>(g.seq) *
         static_cast<double>(g.hidden) * static_cast<double>(g.vocab);
}

double step_flops(const GptShape& g, int64_t batch, bool recompute) {
  const double passes = recompute ? 4 : 3;  // forward, backward (2×), recomputed forward
  return passes * static_cast<double>(g.layers) * block_forward_flops(g, batch) +
         3.0 * head_forward_flops(g, batch);
}

int64_t block_params(const GptShape& g) { return 12 * g.hidden * g.hidden + 13 * g.hidden; }

int64_t model_params(const GptShape& g) {
  return g.layers * block_params(g) + g.vocab * g.hidden + g.seq * g.hidden + 2 * g.hidden;
}

}  // namespace psar::sim
