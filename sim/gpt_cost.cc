#include "sim/gpt_cost.h"

#include <algorithm>
#include <cmath>
#include <initializer_list>

#include "core/errors.h"

namespace psar::sim {

int64_t kv_heads(const GptShape& g) { return g.kv_heads > 0 ? g.kv_heads : g.heads; }
int64_t ffn_width(const GptShape& g) { return g.ffn > 0 ? g.ffn : 4 * g.hidden; }
int64_t qkv_width(const GptShape& g) {
  return g.hidden + 2 * kv_heads(g) * (g.hidden / std::max<int64_t>(1, g.heads));
}

namespace {

// One GEMM family: `batch` products of [rows, inner] · [inner, cols].
struct Gemm {
  double batch;
  int64_t rows, cols, inner;
};

// On-chip GEMMs (FlashAttention's scores and context): no memory bound.
double on_chip_seconds(const GpuSpec& gpu, double batch, int64_t rows, int64_t cols,
                       int64_t inner, GemmLayout layout = GemmLayout::kNN) {
  GpuSpec compute_only = gpu;
  compute_only.memory_bandwidth = 0;
  return gemm_seconds(compute_only, batch, rows, cols, inner, layout);
}

GemmSeconds sum(const GpuSpec& gpu, std::initializer_list<Gemm> gemms, bool flash) {
  GemmSeconds out;
  size_t k = 0;
  for (const Gemm& m : gemms) {
    const bool core = flash && (k == 1 || k == 2);  // scores, context (block_gemm_seconds)
    auto time = [&](int64_t rows, int64_t cols, int64_t inner, GemmLayout layout) {
      return core ? on_chip_seconds(gpu, m.batch, rows, cols, inner, layout)
                  : gemm_seconds(gpu, m.batch, rows, cols, inner, layout);
    };
    out.forward += time(m.rows, m.cols, m.inner, GemmLayout::kNN);
    out.input_grad += time(m.rows, m.inner, m.cols, GemmLayout::kNT);
    out.weight_grad += time(m.inner, m.cols, m.rows, GemmLayout::kTN);
    ++k;
  }
  return out;
}

// FLOP/s of one GEMM family: the GPU model's measured rate for the shape and
// layout where it has a table, else peak · gemm_efficiency · waves.
double math_rate(const GpuSpec& gpu, GemmLayout layout, double batch, int64_t rows, int64_t cols,
                 int64_t inner) {
  if (gpu.gemm_table) return gpu.gemm_table->flops_per_s(layout, batch, rows, cols, inner);
  return gpu.peak_flops * gpu.gemm_efficiency * gemm_wave_efficiency(gpu, batch, rows, cols);
}

}  // namespace

double gemm_seconds(const GpuSpec& gpu, double batch, int64_t rows, int64_t cols, int64_t inner,
                    GemmLayout layout) {
  const double r = static_cast<double>(rows), c = static_cast<double>(cols),
               k = static_cast<double>(inner);
  const double compute =
      2.0 * batch * r * c * k / math_rate(gpu, layout, batch, rows, cols, inner);
  if (gpu.memory_bandwidth <= 0) return compute;
  const double bytes = kGemmOperandBytes * batch * (r * k + k * c + r * c);
  return std::max(compute, bytes / gpu.memory_bandwidth);
}

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

GemmSeconds block_gemm_seconds(const GptShape& g, int64_t b, int t, const GpuSpec& gpu,
                               bool flash) {
  const int64_t tokens = b * g.seq, h = g.hidden, s = g.seq, f = ffn_width(g);
  const double heads = static_cast<double>(b) * static_cast<double>(g.heads) / t;
  return sum(gpu, {{1, tokens, qkv_width(g) / t, h},
                   {heads, s, s, h / g.heads},
                   {heads, s, h / g.heads, s},
                   {1, tokens, h, h / t},
                   {1, tokens, (g.swiglu ? 2 : 1) * f / t, h},
                   {1, tokens, h, f / t}},
             flash);
}

double attention_core_seconds(const GptShape& g, int64_t b, int t, const GpuSpec& gpu,
                              bool flash) {
  const int64_t s = g.seq, d = g.hidden / g.heads;
  const double heads = static_cast<double>(b) * static_cast<double>(g.heads) / t;
  if (flash) return on_chip_seconds(gpu, heads, s, s, d) + on_chip_seconds(gpu, heads, s, d, s);
  return gemm_seconds(gpu, heads, s, s, d) + gemm_seconds(gpu, heads, s, d, s);
}

GemmSeconds head_gemm_seconds(const GptShape& g, int64_t b, int t, const GpuSpec& gpu) {
  // [b·s, h] · [h, V/t]; V/t kept real in the FLOPs (Megatron's count when
  // t does not divide V), its tiles from ⌈V/t⌉ columns.
  const int64_t tokens = b * g.seq, cols = (g.vocab + t - 1) / t;
  const double flops = 2.0 * static_cast<double>(tokens) * static_cast<double>(g.hidden) *
                       static_cast<double>(g.vocab) / t;
  return {flops / math_rate(gpu, GemmLayout::kNN, 1, tokens, cols, g.hidden),
          flops / math_rate(gpu, GemmLayout::kNT, 1, tokens, g.hidden, cols),
          flops / math_rate(gpu, GemmLayout::kTN, 1, g.hidden, cols, tokens)};
}

double attention_core_memory_bytes(const GptShape& g, int64_t b, int t, int dtype, bool flash) {
  const double scores = flash ? 0.0 : static_cast<double>(b) * static_cast<double>(g.heads) / t *
                        static_cast<double>(g.seq) * static_cast<double>(g.seq);
  const double D = dtype;
  return 2 * scores * D + scores * (2 * D + 1);
}

double block_memory_bytes(const GptShape& g, int64_t b, int t, int dtype, bool flash,
                          bool sequence_parallel) {
  const double bs = static_cast<double>(b) * static_cast<double>(g.seq);
  const double bsh = bs * static_cast<double>(g.hidden) / (sequence_parallel ? t : 1);
  const double bsf = bs * static_cast<double>(ffn_width(g)) / t;
  const double D = dtype;
  return 2 * 2 * bsh * D + attention_core_memory_bytes(g, b, t, dtype, flash) +
         (g.swiglu ? 3 : 2) * bsf * D + 2 * bsh * (3 * D + 1);
}

double block_activation_bytes(const GptShape& g, int64_t b, int t, int dtype_bytes,
                              const ActivationOptions& o) {
  const double sb = static_cast<double>(g.seq) * static_cast<double>(b);
  const double sbh = sb * static_cast<double>(g.hidden);
  const double scale = dtype_bytes / 2.0;
  const double split = o.sequence_parallel ? t : 1;
  if (o.recompute == Recompute::kFull) return dtype_bytes * sbh / split;
  const double replicated = 10.0 * sbh / split;
  const double sharded = (2.0 * sb * static_cast<double>(qkv_width(g)) + 2.0 * sbh +
                          (g.swiglu ? 6.0 : 4.0) * sb * static_cast<double>(ffn_width(g))) / t;
  const double ash = static_cast<double>(g.heads) * sb * static_cast<double>(g.seq) / t;
  double core = 0;
  if (o.flash)
    core = 4.0 * static_cast<double>(g.heads) * sb / t / scale;  // fp32 statistics
  else if (o.recompute == Recompute::kNone)
    core = 5.0 * ash;
  return (replicated + sharded + core) * scale;
}

double attention_core_flops(const GptShape& g, int64_t b) {
  const double bs = static_cast<double>(b) * static_cast<double>(g.seq);
  return 4.0 * bs * static_cast<double>(g.seq) * static_cast<double>(g.hidden);
}

double block_forward_flops(const GptShape& g, int64_t b) {
  const double bs = static_cast<double>(b) * static_cast<double>(g.seq);
  const double h = static_cast<double>(g.hidden);
  const double f = static_cast<double>(ffn_width(g)) * (g.swiglu ? 3 : 2);
  return 2.0 * bs * h * (static_cast<double>(qkv_width(g)) + h + f) + attention_core_flops(g, b);
}

double head_forward_flops(const GptShape& g, int64_t b) {
  return 2.0 * static_cast<double>(b) * static_cast<double>(g.seq) *
         static_cast<double>(g.hidden) * static_cast<double>(g.vocab);
}

double step_flops(const GptShape& g, int64_t batch, Recompute recompute) {
  // forward, backward (2×), and what the recomputation runs again
  const double again = recompute == Recompute::kFull        ? block_forward_flops(g, batch)
                       : recompute == Recompute::kSelective ? attention_core_flops(g, batch)
                                                            : 0.0;
  return static_cast<double>(g.layers) * (3.0 * block_forward_flops(g, batch) + again) +
         3.0 * head_forward_flops(g, batch);
}

int64_t block_params(const GptShape& g) {
  const int64_t h = g.hidden, q = qkv_width(g), f = ffn_width(g);
  const int64_t mlp = g.swiglu ? 3 * h * f + 2 * f + h : 2 * h * f + f + h;
  return h * q + q + h * h + h + mlp + 4 * h;
}

int64_t model_params(const GptShape& g) {
  return g.layers * block_params(g) + g.vocab * g.hidden + g.seq * g.hidden + 2 * g.hidden;
}

}  // namespace psar::sim
