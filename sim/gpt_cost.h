#pragma once
// What one GPT step costs, counted from its shapes (docs/simulate.md has the
// derivations): FLOPs per layer and per micro-batch, parameters per stage,
// and the memory terms of the planner. Shapes: b micro-batch, s sequence,
// h hidden, a heads, l layers, V vocabulary, t tensor-parallel degree.
//
//   one block's forward:  24·b·s·h² (QKV, projection, two MLP GEMMs)
//                        + 4·b·s²·h (scores QKᵀ and their product with V)
//   the LM head forward:  2·b·s·h·V
//   backward = 2 × forward; activation recomputation adds one more forward
//   of every block (not of the head).
// Summed over a batch of B sequences this is Megatron-LM's count (Narayanan
// et al. 2021, as stated in docs/theory.md): with recomputation
//   96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h)),  without  72·B·s·l·h²·(…).

#include <cstdint>
#include <string>

#include "core/recompute.h"
#include "sim/cluster.h"

namespace psar::sim {

// kv_heads < heads is grouped-query attention (K and V projected to
// kv_heads·h/a columns each); ffn is the MLP's inner width (0: 4h);
// swiglu: the MLP's first GEMM makes a gate and an up projection of ffn
// columns each and multiplies silu(gate)·up (Llama), else one GEMM and GeLU.
// Defaults give the GPT block of docs/simulate.md.
struct GptShape {
  int64_t layers = 0, hidden = 0, heads = 0, seq = 0, vocab = 0;
  int64_t kv_heads = 0;  // 0: heads (multi-head attention)
  int64_t ffn = 0;       // 0: 4·hidden
  bool swiglu = false;
};
int64_t kv_heads(const GptShape& g);
int64_t ffn_width(const GptShape& g);
// Columns of the QKV GEMM: h + 2·kv_heads·h/a.
int64_t qkv_width(const GptShape& g);

// Activation recomputation (train.recompute, core/recompute.h): selective
// recomputes the attention core (scores, softmax, dropout, their product with
// V) before the backward; full recomputes each block from its input
// (Korthikanti et al. 2022).

double block_forward_flops(const GptShape& g, int64_t microbatch);
// The attention core's share of it: 4·b·s²·h (scores and context GEMMs),
// what selective recomputation runs again.
double attention_core_flops(const GptShape& g, int64_t microbatch);
double head_forward_flops(const GptShape& g, int64_t microbatch);
// Every FLOP of one step of a batch of `batch` sequences (the whole model),
// the recomputed ones included (hardware FLOPs); with Recompute::kNone it is
// the model FLOPs.
double step_flops(const GptShape& g, int64_t batch, Recompute recompute);

// Wave quantization (NVIDIA's GEMM performance guide): a GEMM's `batch`
// output matrices of rows × cols are cut into tr × tc tiles (the last row
// and column of tiles partly empty) and the GPU runs them in waves of one
// tile per SM, so its FLOPs run at the share
//   rows·cols·batch / (⌈tiles / sms⌉ · sms · tr · tc)
// of the rate full waves would reach; of gpu.tiles the GEMM takes the tile
// with the largest share (as cuBLAS picks a kernel per shape). 1 when
// gpu.sms is 0 (off). No constant here is fitted: SMs and tiles are the
// GPU's and the library's.
double gemm_wave_efficiency(const GpuSpec& gpu, double batch, int64_t rows, int64_t cols);

// One GEMM family, `batch` products of [rows, inner] · [inner, cols] of
// 16-bit operands, on one GPU: the slower of its math and its memory (the
// roofline of NVIDIA's Matrix Multiplication Background User's Guide,
// "Math and memory bounds"):
//   max(2·batch·rows·cols·inner / (peak_flops · gemm_efficiency · wave),
//       kGemmOperandBytes·batch·(rows·inner + inner·cols + rows·cols) /
//       memory_bandwidth)
// — each operand read once and the output written once. With the head
// dimension (64–160) as the inner or output width, the attention's score
// and context GEMMs sit below the ridge point (A100: 312e12 / 2039e9 ≈ 153
// FLOP per byte) and run at memory speed; the projections and MLP GEMMs
// sit far above it. memory_bandwidth 0: no memory bound. The roofline has
// no constant of its own: peak and bandwidth are the data sheet's.
//
// With gpu.gemm_table (a GPU model's measured cuBLAS rates,
// sim/gemm_table.h) the math term is instead
//   2·batch·rows·cols·inner / table.flops_per_s(layout, batch, rows, cols, inner)
// — the measured rate for that layout and shape, interpolated: wave
// quantization, tile choice and the small-GEMM fall-off come from the
// measurements and nothing is multiplied on top (peak_flops,
// gemm_efficiency and the tiles are not read); the memory bound stays.
// `layout`: NN for a forward product, NT for an input gradient (dX = dY·Wᵀ),
// TN for a weight gradient (dW = Xᵀ·dY); it matters only with a table.
inline constexpr double kGemmOperandBytes = 2;
double gemm_seconds(const GpuSpec& gpu, double batch, int64_t rows, int64_t cols, int64_t inner,
                    GemmLayout layout = GemmLayout::kNN);

// Seconds of a layer's GEMMs on one GPU of a t-wide tensor-parallel group,
// each by gemm_seconds (no kernel overheads; with `flash` the scores and
// context GEMMs run on chip, FlashAttention's fused kernel, without the
// memory bound): the forward, the input-gradient GEMMs (dX = dY·Wᵀ, output
// rows × K) and the weight-gradient ones (dW = Xᵀ·dY, output K × cols). A
// block's GEMMs for micro-batch b, M = b·s tokens: QKV M × 3h/t (K = h),
// scores b·a/t of s × s (K = h/a), context b·a/t of s × h/a (K = s),
// projection M × h (K = h/t), fc1 M × 4h/t (K = h), fc2 M × h (K = 4h/t);
// the head M × V/t (K = h). With sms = 0 these are the FLOP counts above
// over the rate, the backward halves each equal to the forward. With a
// GEMM table the three halves are its NN, NT and TN rates.
struct GemmSeconds {
  double forward = 0, input_grad = 0, weight_grad = 0;
};
GemmSeconds block_gemm_seconds(const GptShape& g, int64_t microbatch, int t, const GpuSpec& gpu,
                               bool flash = false);
// The forward of the attention core's two GEMMs alone (scores, context).
double attention_core_seconds(const GptShape& g, int64_t microbatch, int t, const GpuSpec& gpu,
                              bool flash = false);
GemmSeconds head_gemm_seconds(const GptShape& g, int64_t microbatch, int t, const GpuSpec& gpu);

// Bytes the memory-bound kernels of one block's forward move on one GPU of
// a t-wide group (micro-batch b, `dtype` bytes per element; the layer norms,
// dropouts and residual adds run on the whole [b, s, h] on every TP rank, as
// without sequence parallelism):
//   two layer norms             2 · 2·b·s·h·dtype      (read, write)
//   softmax of the scores       2·(b·a/t·s²)·dtype
//   dropout of the probabilities (b·a/t·s²)·(2·dtype + 1)   (+ the 1-byte mask)
//   GeLU                        2·(b·s·4h/t)·dtype
//   two bias+dropout+residual   2 · b·s·h·(3·dtype + 1)
// With `flash` (FlashAttention: the scores stay in on-chip memory) the
// softmax and dropout terms drop out. The backward moves as much again in
// each of its halves. Their time is
// bytes / gpu.memory_bandwidth: it grows with b·s·h and b·a·s² where the
// GEMMs grow with b·s·h², so it weighs most on small hidden sizes.
// With `sequence_parallel` the layer norms, dropouts and residual adds run on
// 1/t of the sequence: their terms divide by t. SwiGLU's activation reads
// two inputs of b·s·ffn/t and writes one (3·b·s·ffn/t·dtype); GeLU reads
// and writes one (2·b·s·ffn/t·dtype, ffn = 4h above).
double block_memory_bytes(const GptShape& g, int64_t microbatch, int t, int dtype,
                          bool flash = false, bool sequence_parallel = false);
// The softmax and dropout terms alone (0 with flash): what selective
// recomputation moves again.
double attention_core_memory_bytes(const GptShape& g, int64_t microbatch, int t, int dtype,
                                   bool flash);

// What one block keeps for its backward, one micro-batch, one GPU of a TP
// group of t (Korthikanti et al. 2022, eqs. 1–6; 16-bit activations and
// 1-byte dropout masks, scaled by dtype/2). Without sequence parallelism
//   replicated: s·b·h·10 (two LN inputs, the QKV and fc1 inputs, two masks)
//   split over t: Q, K, V for the scores and the context 2·s·b·(h + 2·kv·h/a),
//     the projection's input 2·s·b·h, the MLP 4·s·b·ffn (GeLU: its input and
//     fc2's) or 6·s·b·ffn (SwiGLU: gate, up and their product)
//   attention core 5·a·s²·b/t (softmax output 2, dropout mask 1, output 2)
// — for the GPT block s·b·h·(10 + 24/t + 5·a·s/(h·t)). Sequence parallelism
// splits the replicated part over t too: s·b·h/t·(34 + 5·a·s/h). Selective
// recomputation drops the attention core; flash attention keeps instead
// its fp32 softmax statistics, 4·a·s·b/t. Full recomputation keeps the
// block's input, dtype·s·b·h (over t with sequence parallelism).
struct ActivationOptions {
  Recompute recompute = Recompute::kNone;
  bool sequence_parallel = false;
  bool flash = false;
};
double block_activation_bytes(const GptShape& g, int64_t microbatch, int t, int dtype_bytes,
                              const ActivationOptions& options = {});

// Parameters: a block h·q + q + h² + h (attention, q = qkv_width) + the
// MLP's (2 or 3 for SwiGLU)·h·ffn + ffn (+ ffn for SwiGLU's gate) + h + two
// layer norms 4h — for the GPT block 12h² + 13h; the embedding V·h + s·h
// (the head is tied to it), the final layer norm 2h.
int64_t block_params(const GptShape& g);
int64_t model_params(const GptShape& g);

}  // namespace psar::sim
