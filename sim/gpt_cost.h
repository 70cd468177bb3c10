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

#include "sim/cluster.h"

namespace psar::sim {

struct GptShape {
  int64_t layers = 0, hidden = 0, heads = 0, seq = 0, vocab = 0;
};

double block_forward_flops(const GptShape& g, int64_t microbatch);
double head_forward_flops(const GptShape& g, int64_t microbatch);
// Every FLOP of one step of a batch of `batch` sequences (the whole model).
double step_flops(const GptShape& g, int64_t batch, bool recompute);

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

// Seconds of a layer's GEMMs on one GPU of a t-wide tensor-parallel group,
// at peak_flops · gemm_efficiency · each GEMM's wave efficiency (no kernel
// overheads): the forward, the input-gradient GEMMs (dX = dY·Wᵀ, output
// rows × K) and the weight-gradient ones (dW = Xᵀ·dY, output K × cols). A
// block's GEMMs for micro-batch b, M = b·s tokens: QKV M × 3h/t (K = h),
// scores b·a/t of s × s (K = h/a), context b·a/t of s × h/a (K = s),
// projection M × h (K = h/t), fc1 M × 4h/t (K = h), fc2 M × h (K = 4h/t);
// the head M × V/t (K = h). With sms = 0 these are the FLOP counts above
// over the rate, the backward halves each equal to the forward.
struct GemmSeconds {
  double forward = 0, input_grad = 0, weight_grad = 0;
};
GemmSeconds block_gemm_seconds(const GptShape& g, int64_t microbatch, int t, const GpuSpec& gpu);
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
double block_memory_bytes(const GptShape& g, int64_t microbatch, int t, int dtype,
                          bool flash = false);

// Parameters: a block 12h² + 13h, the embedding V·h + s·h (the head is tied
// to it), the final layer norm 2h.
int64_t block_params(const GptShape& g);
int64_t model_params(const GptShape& g);

}  // namespace psar::sim
