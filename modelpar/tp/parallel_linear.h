#pragma once
// The common shape of ColumnParallelLinear and RowParallelLinear, so a block
// (the parallel MLP) can pick either for either position by its split.
// Backward is two halves: backward_input computes ∂L/∂x (and runs the layer's
// communication), backward_weight accumulates ∂L/∂W and ∂L/∂b — a zero-bubble
// schedule may run the second later.

#include <cstdint>

#include "core/param_store.h"
#include "modelpar/tp/shard.h"

namespace psar {

class ParallelLinear {
 public:
  virtual ~ParallelLinear() = default;
  virtual void declare(ShardedParams& params, ParamStore& store) = 0;
  virtual void bind(ParamStore& store) = 0;
  // Columns per row of the x that forward() reads and of the y it writes.
  virtual int64_t in_features() const = 0;
  virtual int64_t out_features() const = 0;
  // x: [N, in_features()] → y: [N, out_features()]
  virtual void forward(float* y, const float* x, int64_t N) = 0;
  // dy: [N, out_features()] → dx: [N, in_features()]
  virtual void backward_input(float* dx, const float* dy, int64_t N) = 0;
  // Accumulates the weight and bias gradients.  x: [N, in_features()]
  virtual void backward_weight(const float* dy, const float* x, int64_t N) = 0;
  // FLOPs (2 per multiply-add) of every forward GEMM run so far, a
  // recomputation's included: what the rank computed, not a form.
  int64_t forward_flops() const { return forward_flops_; }

 protected:
  int64_t forward_flops_ = 0;
};

}  // namespace psar
