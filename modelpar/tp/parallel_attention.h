#pragma once
// ParallelSelfAttention: causal multi-head self-attention with its heads
// split over the t ranks of a tensor-parallel group (Megatron-LM, Fig. 3b).
//
//   X ─f─▶ [X·W_qkv,r] = Q_r, K_r, V_r ─▶ per head: softmax(Q Kᵀ/√d_h + causal) V
//     ─▶ [ctx_r · W_o,r] ─g─▶ + b_o ─▶ Dropout ─▶ Y
//
// Rank r owns heads [r·H/t, (r+1)·H/t): the Q, K and V projections are one
// column-parallel GEMM whose weight [d, 3d] is cut in three blocks (Q | K | V)
// and each block by heads, so the rank's columns are exactly its heads' (no
// communication until the output projection); the output projection is
// row-parallel over the same d/t context columns, and g sums its partials.
// One all-reduce of [B·T, d] forward (g), one backward (f). Dropout on the
// attention probabilities uses the element's index in the serial model's
// [B, H, T, T] tensor, so a shard applies the serial mask to its heads.
//
// sequence_parallel: x and y are this rank's rows [B·T/t, d] (conjugate.h):
// the QKV GEMM all-gathers x, the output projection reduce-scatters, the
// output dropout runs on the rank's rows (their serial indices).
// recompute_core (selective recomputation, Korthikanti et al. 2022 §5):
// the probabilities are not kept; the backward recomputes scores, softmax
// and dropout from Q and K, head by head, bitwise as the forward did.
//
// Per rank, forward: 2·N·d·3d/t (QKV) + 4·B·(H/t)·T²·d_h (scores and
// context) + 2·N·d·d/t (output) FLOPs, N = B·T; backward twice that.
// heads % t ≠ 0 or d_model % heads ≠ 0 is a ConfigError.
//
// What one micro-batch keeps from forward to backward is an Activations the
// caller owns (the module holds only parameters and per-call scratch), so
// one module serves every micro-batch in flight.

#include <cstdint>
#include <string>
#include <vector>

#include "core/param_store.h"
#include "modelpar/tp/column_parallel_linear.h"
#include "modelpar/tp/dropout.h"
#include "modelpar/tp/group.h"
#include "modelpar/tp/row_parallel_linear.h"
#include "modelpar/tp/shard.h"

namespace psar {

struct ParallelAttentionOptions {
  std::string name;  // parameters <name>.qkv.* (column-parallel), <name>.proj.* (row-parallel)
  int64_t d_model = 0, heads = 0, seq_len = 0;
  float init_std = 0.02f, proj_init_std = 0.02f;
  bool sequence_parallel = false;
  bool recompute_core = false;
};

class ParallelSelfAttention {
 public:
  // One micro-batch's tensors, N = B·T rows, on this rank's heads (on the
  // current device, core/tensor.h's Buffer).
  struct Activations {
    Buffer qkv;                   // [N, 3·d/t]: Q_r | K_r | V_r per row
    Buffer att;                   // [B, H/t, T, T] softmax probabilities (0 above the diagonal); empty with recompute_core
    Buffer att_drop;              // the same after dropout (only when p > 0 and kept)
    Buffer ctx;                   // [N, d/t] heads' outputs, head h at columns h·d_h
    Buffer dy_pre;                // [N, d] output gradient before the output dropout ([N/t, d] sequence-parallel)
    Buffer dctx;                  // [N, d/t]
    Buffer dqkv;                  // [N, 3·d/t]
    DropoutContext drop;          // of its forward
    int64_t bytes() const;
  };

  ParallelSelfAttention(TpGroup& tp, ParallelAttentionOptions options);

  void declare(ShardedParams& params, ParamStore& store);
  void bind(ParamStore& store);

  // x: [B·T, d_model] replicated → y: [B·T, d_model] replicated (B sequences
  // of T; both [B·T/t, d_model] rows with sequence_parallel). Sizes every
  // buffer of `a`, the backward's included.
  void forward(Activations& a, float* y, const float* x, int64_t B, const DropoutContext& drop);
  // dy: [B·T, d_model] → dx: [B·T, d_model], whole on every rank
  void backward_input(Activations& a, float* dx, const float* dy, int64_t B);
  // x: the forward input again.
  void backward_weight(const Activations& a, const float* x, int64_t B);
  // Floats of an Activations for B sequences, from the shapes above.
  int64_t activation_floats(int64_t B, bool dropout) const;
  // Score-softmax-dropout passes over one head of one sequence, counted
  // (forward and recomputation alike): the recomputation's extra work.
  int64_t core_passes() const { return core_passes_; }
  // FLOPs of every forward GEMM run so far (QKV, Q·Kᵀ, P·V, the output
  // projection), the recomputed Q·Kᵀ of recompute_core included.
  int64_t forward_flops() const { return qkv_.forward_flops() + proj_.forward_flops() + core_flops_; }

 private:
  // First index of head block (b, local head h) in the serial [B, H, T, T] tensor.
  uint64_t att_index(int64_t b, int64_t h) const;
  // Rows of x and y on this rank (N, or N/t sequence-parallel) and the first one's serial index.
  int64_t local_rows(int64_t N) const;
  int64_t first_row(int64_t N) const;
  // p = softmax(Q Kᵀ/√d_h + causal) of head (b, h) and, with dropout, pd its
  // dropped copy: the attention core, the one code of forward and recomputation.
  void core(float* p, float* pd, const float* q, const float* k, int64_t b, int64_t h,
            const DropoutContext& drop);

  TpGroup& tp_;
  ParallelAttentionOptions o_;
  int64_t T_, hd_, heads_local_, d_local_;  // seq, head size, H/t, d/t
  ColumnParallelLinear qkv_;
  RowParallelLinear proj_;
  Buffer datt_;  // [T, T] scratch of one head's backward
  Buffer att_scratch_, att_drop_scratch_;  // [T, T] one head's probabilities with recompute_core
  int64_t core_passes_ = 0;
  int64_t core_flops_ = 0;  // Q·Kᵀ and P·V, counted where they run
};

}  // namespace psar
