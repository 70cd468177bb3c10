#pragma once
// RowParallelLinear: Y = X·B + b with B [C_in, C_out] split by input rows
// over the t ranks, B = [B_1; …; B_t], and X split to match by columns,
// X = [X_1, …, X_t]. Rank r computes the partial product X_r·B_r; g all-reduces
// the partials into the whole Y = Σ_r X_r·B_r on every rank, and only then is
// the (replicated) bias added, once. Backward needs no communication:
// ∂L/∂X_r = dY·B_rᵀ is exactly this rank's block.
//
// The input is normally already parallel (X_r is the output of a
// column-parallel layer, as in the Megatron MLP). With input_is_parallel =
// false, X is replicated and each rank reads its column block (free), and
// backward all-gathers the blocks of ∂L/∂X.
//
// Cost per rank: forward 2·N·C_in·C_out/t FLOPs and one all-reduce of
// N·C_out floats (g); backward twice the FLOPs, no communication (plus an
// all-gather of N·C_in when the input is not parallel).

#include <cstdint>
#include <string>
#include <vector>

#include "core/param_store.h"
#include "modelpar/tp/group.h"
#include "modelpar/tp/parallel_linear.h"
#include "modelpar/tp/shard.h"

namespace psar {

struct RowParallelOptions {
  std::string name;         // parameters <name>.weight [in, out], <name>.bias [out]
  int64_t in = 0, out = 0;  // the serial layer's sizes
  bool bias = true;
  bool input_is_parallel = true;  // x: [N, in/t] (else [N, in] replicated)
  float init_std = 0.02f;
  // y is this rank's rows [N/t, out] (conjugate.h): the partial outputs are
  // reduce-scattered instead of all-reduced, and dy [N/t, out] is
  // all-gathered for the input gradient and again for the weight gradient.
  bool sequence_parallel = false;
};

class RowParallelLinear final : public ParallelLinear {
 public:
  // Throws ConfigError if in is not divisible by t.
  RowParallelLinear(TpGroup& tp, RowParallelOptions options);

  void declare(ShardedParams& params, ParamStore& store) override;
  void bind(ParamStore& store) override { store_ = &store; }

  int64_t in_local() const { return o_.in / tp_.size(); }
  // Columns of the x that forward() reads per row: in/t, or in when not parallel.
  int64_t in_features() const override { return o_.input_is_parallel ? in_local() : o_.in; }
  int64_t out_features() const override { return o_.out; }  // y is whole (after g)

  // x: [N, in_features()] → y: [N, out], whole and replicated (g all-reduces
  // it); with sequence_parallel this rank's rows [N/t, out] of it.
  void forward(float* y, const float* x, int64_t N) override;
  // dy: [N, out] ([N/t, out] with sequence_parallel) → dx: [N, in_features()]
  void backward_input(float* dx, const float* dy, int64_t N) override;
  // dB_r += x_rᵀ·dy, db += Σ_rows dy.  x: [N, in_features()]
  void backward_weight(const float* dy, const float* x, int64_t N) override;

 private:
  // x_r as (pointer, leading dimension): a column block of x when not parallel.
  std::pair<const float*, int64_t> local_input(const float* x) const;
  // The whole output gradient [N, out]: dy itself, or its rows gathered (sequence_parallel).
  const float* whole_grad(const float* dy, int64_t N);

  TpGroup& tp_;
  RowParallelOptions o_;
  ParamStore* store_ = nullptr;
  int weight_ = -1, bias_ = -1;
  std::vector<float> dx_local_, gather_scratch_;
  Buffer y_whole_, dy_whole_;  // [N, out] scratch of sequence parallelism
};

}  // namespace psar
