#pragma once
// ColumnParallelLinear: Y = X·A + b with A [C_in, C_out] split by output
// columns over the t ranks of the group, A = [A_1, …, A_t]. Every rank reads
// the whole replicated X and computes its own columns Y_r = X·A_r + b_r with no
// communication (so a GeLU can follow directly); backward, each rank's
// ∂L/∂X = dY_r·A_rᵀ is only its share, summed by f. Optionally the output
// blocks are all-gathered to the full Y (backward then just takes its block).
//
// Cost per rank: forward 2·N·C_in·C_out/t FLOPs; backward the same twice
// (input and weight halves); communication one all-reduce of N·C_in floats in
// backward (f), plus an all-gather of N·C_out in forward if gathering.

#include <cstdint>
#include <string>
#include <vector>

#include "core/param_store.h"
#include "modelpar/tp/group.h"
#include "modelpar/tp/parallel_linear.h"
#include "modelpar/tp/shard.h"

namespace psar {

struct ColumnParallelOptions {
  std::string name;         // parameters <name>.weight [in, out], <name>.bias [out]
  int64_t in = 0, out = 0;  // the serial layer's sizes
  int groups = 1;           // out is `groups` equal blocks each split over t (fused Q|K|V)
  bool bias = true;
  bool gather_output = false;  // all-gather Y to [N, out] (otherwise [N, out/t])
  float init_std = 0.02f;
  // x is this rank's rows [N/t, in] (conjugate.h): all-gathered before the
  // GEMM in forward and again for the weight gradient, and the input
  // gradient reduce-scattered back to [N/t, in] instead of all-reduced.
  bool sequence_parallel = false;
};

class ColumnParallelLinear final : public ParallelLinear {
 public:
  // Throws ConfigError if out is not divisible by groups · t.
  ColumnParallelLinear(TpGroup& tp, ColumnParallelOptions options);

  void declare(ShardedParams& params, ParamStore& store) override;
  void bind(ParamStore& store) override { store_ = &store; }

  int64_t out_local() const { return o_.out / tp_.size(); }
  int64_t in_features() const override { return o_.in; }  // x is replicated
  // Columns of what forward() writes per row: out (gathered) or out / t.
  int64_t out_features() const override { return o_.gather_output ? o_.out : out_local(); }

  // x: [N, in] replicated ([N/t, in] with sequence_parallel) → y: [N, out_features()]
  void forward(float* y, const float* x, int64_t N) override;
  // dy: [N, out_features()] → dx: [N, in], the whole gradient (f all-reduces
  // it); with sequence_parallel this rank's rows [N/t, in] of it.
  void backward_input(float* dx, const float* dy, int64_t N) override;
  // dA_r += xᵀ·dy_r, db_r += Σ_rows dy_r.  x: as in forward.
  void backward_weight(const float* dy, const float* x, int64_t N) override;

 private:
  // dy_r: [N, out/t], this rank's block of dy (a copy when the output is gathered).
  const float* local_grad(const float* dy, int64_t N);
  // The whole input [N, in]: x itself, or its rows gathered (sequence_parallel).
  const float* whole_input(const float* x, int64_t N);

  TpGroup& tp_;
  ColumnParallelOptions o_;
  ParamStore* store_ = nullptr;
  int weight_ = -1, bias_ = -1;
  Buffer x_whole_, dx_whole_;  // [N, in] scratch of sequence parallelism
  std::vector<float> y_local_, dy_local_, gather_scratch_;
};

}  // namespace psar
