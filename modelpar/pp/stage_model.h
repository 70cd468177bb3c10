#pragma once
// The seam between the pipeline executor and a model cut into stages.
//
// A model of L layers is cut into p·v virtual stages (partition.h); the rank
// of pipeline stage s holds chunks c = 0..v−1, chunk c being virtual stage
// u = c·p + s (schedule.h). A StageModel is one rank's chunks. The executor
// calls it once per action of the schedule and moves the tensors between
// ranks; the model never communicates:
//
//   forward(c, i, x, y)         x: activation entering u (from u−1), y: leaving u
//   backward_input(c, i, dy, dx) dy: gradient of y (from u+1), dx: gradient of x
//   backward_weight(c, i)        adds ∂loss/∂θ of chunk c for micro-batch i into
//                                the ParamStore's gradient arena; frees the stash
//
// The first virtual stage reads its micro-batch itself (x is empty) and its
// backward produces no input gradient (dx is empty); the last one computes
// the loss of micro-batch i in its forward (y is empty) and starts its
// backward from it (dy is empty), scaled by 1/m so that the m micro-batches'
// gradients add up to the gradient of the batch's mean loss.
//
// Activation shapes are fixed in advance: boundary_numel(u) floats flow
// from u to u+1 and the same number of gradient floats back, for every
// micro-batch. That is what lets the executor allocate its buffers once and
// post receives before the producing action has run.
//
// Memory: a forward stashes what the backward needs ("an activation"); the
// stash lives until the last backward action that reads it — the fused
// backward, or backward_weight when the backward is split (simulate.h's
// convention). live_activations() / live_activation_bytes() report the stash
// the model holds right now; the executor samples them after every action.

#include <cstdint>
#include <span>

namespace psar::pp {

class StageModel {
 public:
  virtual ~StageModel() = default;

  // Floats of the activation virtual stage u sends to u + 1 per micro-batch
  // (and of the gradient coming back); u in [0, p·v − 1).
  virtual int64_t boundary_numel(int vstage) const = 0;

  virtual void forward(int chunk, int microbatch, std::span<const float> x,
                       std::span<float> y) = 0;
  virtual void backward_input(int chunk, int microbatch, std::span<const float> dy,
                              std::span<float> dx) = 0;
  virtual void backward_weight(int chunk, int microbatch) = 0;
  // Fused backward: both halves. Override to do them in one pass.
  virtual void backward(int chunk, int microbatch, std::span<const float> dy, std::span<float> dx) {
    backward_input(chunk, microbatch, dy, dx);
    backward_weight(chunk, microbatch);
  }

  // Stashed activations (one per (chunk, micro-batch) between its forward and
  // its last backward action) and the bytes they hold.
  virtual int live_activations() const = 0;
  virtual int64_t live_activation_bytes() const = 0;
  // Bytes one micro-batch's stash holds on `chunk`, from its forward to its
  // last backward action: what the prediction of live_activation_bytes()
  // weighs each live activation with (executor.h).
  virtual int64_t stash_bytes(int chunk) const = 0;
};

}  // namespace psar::pp
