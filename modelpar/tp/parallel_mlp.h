#pragma once
// ParallelMLP: the transformer MLP  Y = GeLU(X·A), Z = Dropout(Y·B)  split
// over a tensor-parallel group in one of the two ways of the lecture notes
// (parallel.tp_split):
//
//   column_row (Megatron): A by columns, B by rows.
//       X ─f─▶ [X·A_r] ─GeLU─▶ Y_r ─▶ [Y_r·B_r] ─g─▶ Z ─Dropout─▶
//     GeLU applies to each rank's own columns, so nothing is exchanged before
//     it: one all-reduce of [N, d] forward (g) and one backward (f).
//
//   row_column: X by columns, A by rows (then B by columns, gathered).
//       X ─scatter─▶ X_r ─▶ [X_r·A_r] ─g─▶ X·A ─GeLU─▶ Y ─f─▶ [Y·B_r] ─gather─▶ Z
//     GeLU(X_1·A_1 + X_2·A_2) ≠ GeLU(X_1·A_1) + GeLU(X_2·A_2): the partial
//     products must be all-reduced BEFORE GeLU, an all-reduce of [N, hidden]
//     (4× the activation) in each direction, plus an all-gather of [N, d].
//
// sequence_parallel (column_row only, as in Megatron): x and z are this
// rank's rows [N/t, d_model] (conjugate.h): the first GEMM all-gathers x, the
// second reduce-scatters, the dropout runs on the rank's rows.
//
// Both give the serial model's numbers (up to float summation order); the
// communication counters show the price of the second. What one micro-batch
// keeps from forward to backward is an Activations the caller owns.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/param_store.h"
#include "modelpar/tp/dropout.h"
#include "modelpar/tp/group.h"
#include "modelpar/tp/parallel_linear.h"
#include "modelpar/tp/shard.h"

namespace psar {

enum class MlpSplit { kColumnRow, kRowColumn };
// "column_row" | "row_column"; ConfigError otherwise.
MlpSplit parse_mlp_split(const std::string& name);
// Every split by name (the schema's choices for parallel.tp_split).
std::vector<std::string> mlp_split_names();

struct ParallelMlpOptions {
  std::string name;                 // parameters <name>.fc.*, <name>.proj.*
  int64_t d_model = 0, hidden = 0;  // X: [N, d_model], Y: [N, hidden]
  MlpSplit split = MlpSplit::kColumnRow;
  float init_std = 0.02f, proj_init_std = 0.02f;
  bool sequence_parallel = false;
};

class ParallelMLP {
 public:
  // One micro-batch's tensors; h = hidden/t (column_row) or hidden (row_column).
  struct Activations {
    Buffer h_pre, h_act;              // X·A + a, GeLU of it: [N, h]
    Buffer dz_pre;                    // [N, d_model] output gradient before dropout ([N/t, d_model] sequence-parallel)
    Buffer dh_act, dh_pre;            // [N, h] each
    DropoutContext drop;              // of its forward
    int64_t bytes() const;
  };

  // Throws ConfigError if d_model or hidden is not divisible by t.
  ParallelMLP(TpGroup& tp, ParallelMlpOptions options);

  void declare(ShardedParams& params, ParamStore& store);
  void bind(ParamStore& store);

  // x: [N, d_model] replicated → z: [N, d_model] replicated. Sizes every
  // buffer of `a`, the backward's included.
  void forward(Activations& a, float* z, const float* x, int64_t N, const DropoutContext& drop);
  // dz: [N, d_model] → dx: [N, d_model], whole on every rank. Keeps in `a`
  // what backward_weight needs (the gradients at the two GEMM outputs).
  void backward_input(Activations& a, float* dx, const float* dz, int64_t N);
  // x: the forward input again.
  void backward_weight(const Activations& a, const float* x, int64_t N);
  // Floats of an Activations for N rows: 4·N·h + N·d_model (N/t·d_model sequence-parallel).
  int64_t activation_floats(int64_t N) const;
  // FLOPs of every forward GEMM run so far (both linears, recomputation's included).
  int64_t forward_flops() const { return fc_->forward_flops() + proj_->forward_flops(); }

 private:
  TpGroup& tp_;
  ParallelMlpOptions o_;
  std::unique_ptr<ParallelLinear> fc_, proj_;  // X·A and Y·B
  int64_t local_rows(int64_t N) const { return o_.sequence_parallel ? N / tp_.size() : N; }
  // Serial index of this rank's first output element (the dropout mask's).
  uint64_t first_element(int64_t N) const {
    return o_.sequence_parallel ? static_cast<uint64_t>(tp_.rank() * local_rows(N) * o_.d_model) : 0;
  }
};

}  // namespace psar
