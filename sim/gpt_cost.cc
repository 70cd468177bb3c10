#include "sim/gpt_cost.h"

#include <algorithm>
#include <cmath>
#include <initializer_list>

namespace psar::sim {

namespace {

// One GEMM family: `batch` products of [rows, inner] · [inner, cols].
struct Gemm {
  double batch;
  int64_t rows, cols, inner;
};

double seconds(const GpuSpec& gpu, double batch, int64_t rows, int64_t cols, int64_t inner) {
  const double flops = 2.0 * batch * static_cast<double>(rows) * static_cast<double>(cols) *
                       static_cast<double>(inner);
  return flops / (gpu.peak_flops * gpu.gemm_efficiency *
                  gemm_wave_efficiency(gpu, batch, rows, cols));
}

GemmSeconds sum(const GpuSpec& gpu, std::initializer_list<Gemm> gemms) {
  GemmSeconds out;
  for (const Gemm& m : gemms) {
    out.forward += seconds(gpu, m.batch, m.rows, m.cols, m.inner);
    out.input_grad += seconds(gpu, m.batch, m.rows, m.inner, m.cols);
    out.weight_grad += seconds(gpu, m.batch, m.inner, m.cols, m.rows);
  }
  return out;
}

}  // namespace

double gemm_wave_efficiency(const GpuSpec& gpu, double batch, int64_t rows, int64_t cols) {
  if (gpu.sms <= 0 || rows <= 0 || cols <= 0) return 1.0;
  double best = 0;
  for (const auto& [tr, tc] : gpu.tiles) {
    const double tiles = batch * std::ceil(static_cast<double>(rows) / tr) *
                         std::ceil(static_cast<double>(cols) / tc);
    const double waves = std::ceil(tiles / gpu.sms);
    best = std::max(best, batch * static_cast<double>(rows) * static_cast<double>(cols) /
                              (waves * gpu.sms * tr * tc));
  }
  return best;
}

GemmSeconds block_gemm_seconds(const GptShape& g, int64_t b, int t, const GpuSpec& gpu) {
  const int64_t tokens = b * g.seq, h = g.hidden, s = g.seq;
  const double heads = static_cast<double>(b) * static_cast<double>(g.heads) / t;
  return sum(gpu, {{1, tokens, 3 * h / t, h},
                   {heads, s, s, h / g.heads},
                   {heads, s, h / g.heads, s},
                   {1, tokens, h, h / t},
                   {1, tokens, 4 * h / t, h},
                   {1, tokens, h, 4 * h / t}});
}

GemmSeconds head_gemm_seconds(const GptShape& g, int64_t b, int t, const GpuSpec& gpu) {
  // [b·s, h] · [h, V/t]; V/t kept real in the FLOPs (Megatron's count when
  // t does not divide V), its tiles from ⌈V/t⌉ columns.
  const int64_t tokens = b * g.seq, cols = (g.vocab + t - 1) / t;
  const double flops = 2.0 * static_cast<double>(tokens) * static_cast<double>(g.hidden) *
                       static_cast<double>(g.vocab) / t;
  const double rate = gpu.peak_flops * gpu.gemm_efficiency;
  return {flops / (rate * gemm_wave_efficiency(gpu, 1, tokens, cols)),
          flops / (rate * gemm_wave_efficiency(gpu, 1, tokens, g.hidden)),
          flops / (rate * gemm_wave_efficiency(gpu, 1, g.hidden, cols))};
}

double block_memory_bytes(const GptShape& g, int64_t b, int t, int dtype, bool flash) {
  const double bsh = static_cast<double>(b) * static_cast<double>(g.seq) *
                     static_cast<double>(g.hidden);
  const double scores = flash ? 0.0 : static_cast<double>(b) * static_cast<double>(g.heads) / t *
                        static_cast<double>(g.seq) * static_cast<double>(g.seq);
  const double D = dtype;
  return 2 * 2 * bsh * D + 2 * scores * D + scores * (2 * D + 1) + 2 * (4 * bsh / t) * D +
         2 * bsh * (3 * D + 1);
}

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
