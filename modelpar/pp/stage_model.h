#pragma once
// The seam between the pipeline executor and a model cut into stages.
//
// A model of L layers is cut into p·v virtual stages (partition.h); the rank
// of pipeline stage s holds chunks c = 0..v−1, chunk c being virtual stage
// u = c·p + s (schedule.h). A StageModel is one rank's chunks. The executor
// calls it once per action of the schedule and moves the tensors between
// ranks; the model never talks to the pipeline:
//
//   forward(c, i, a, x, y)          x: activation entering u (from u−1), y: leaving u
//   backward_input(c, i, a, dy, dx) dy: gradient of y (from u+1), dx: gradient of x
//   backward_weight(c, i, a)        adds ∂loss/∂θ of chunk c for micro-batch i into
//                                   the ParamStore's gradient arena
//
// The first virtual stage reads its micro-batch itself (x is empty) and its
// backward produces no input gradient (dx is empty); the last one computes
// the loss of micro-batch i in its forward (y is empty) and starts its
// backward from it (dy is empty), scaled by 1/m so that the m micro-batches'
// gradients add up to the gradient of the batch's mean loss.
//
// Activations are data (llm.c style). What a chunk keeps from the forward of
// micro-batch i to its last backward action lives in an Activations object
// that the CALLER owns: the executor takes one per (chunk, micro-batch) from
// make_activations() (or from the ones it freed earlier), hands it to the
// three actions, and frees it after the last (the fused backward, or
// backward_weight when the backward is split: simulate.h's convention). The
// modules keep nothing between actions, so one set of modules serves every
// micro-batch in flight; Activations::bytes() is what the buffers actually
// hold, and activation_bytes() the model's prediction of it from its layer
// shapes, which the executor's measured peak is checked against.
//
// Activation shapes are fixed in advance: boundary_numel(u) floats flow
// from u to u+1 and the same number of gradient floats back, for every
// micro-batch. That is what lets the executor allocate its buffers once and
// post receives before the producing action has run.

#include <cstdint>
#include <memory>
#include <span>

namespace psar::pp {

// Where a model reports, during a weight-gradient action, that the gradients of the parameters in
// arena floats [begin, end) of `chunk` are complete for this micro-batch — one call per layer, in
// the order backward finishes them (the last layer first) — and that the backward reads neither
// those gradients nor those parameters again (the parameter server pulls new ones into them at
// once). The executor passes on the reports of the chunk's last weight-gradient action of a batch
// (then the gradients are final for the batch): the start of overlapping the gradient sync with
// the rest of the backward (docs/overlap.md).
class GradientSink {
 public:
  virtual ~GradientSink() = default;
  virtual void ready(int chunk, int64_t begin, int64_t end) = 0;
};

// Where a model asks, before a layer's forward, for the parameters in arena
// floats [begin, end) of `chunk` to be in place — one call per layer, in the
// order the forward reads them. With the parameter server's layer-wise start
// (docs/overlap.md) the next step's forward of a layer waits there for that
// layer's pull alone, not for the whole model's.
//
// Sharded parameters (ZeRO stage 3, FSDP's full shard: sync/zero3_gate.h)
// gather a layer's parameters at need(), and again at need_backward() —
// before the layer's backward reads them, and before its weight-gradient
// half writes its gradients (the gate then gives the layer a gradient
// buffer too) — and free them at done(), after the forward or the
// backward's last read of them. A model that calls the three around each
// of its layer_ranges() (model.h) can train with its parameters sharded.
class ParamGate {
 public:
  virtual ~ParamGate() = default;
  virtual void need(int chunk, int64_t begin, int64_t end) = 0;
  virtual void need_backward(int, int64_t, int64_t) {}
  virtual void done(int, int64_t, int64_t) {}
};

// One micro-batch's stash on one chunk.
class Activations {
 public:
  virtual ~Activations() = default;
  // Bytes of the buffers it holds now (their allocated sizes).
  virtual int64_t bytes() const = 0;
};

class StageModel {
 public:
  virtual ~StageModel() = default;

  // Floats of the activation virtual stage u sends to u + 1 per micro-batch
  // (and of the gradient coming back); u in [0, p·v − 1).
  virtual int64_t boundary_numel(int vstage) const = 0;

  // An empty stash for micro-batches of `chunk`. forward() sizes all of its
  // buffers, those the backward fills included (one allocation per
  // micro-batch in flight, as llm.c's activation arena).
  virtual std::unique_ptr<Activations> make_activations(int chunk) const = 0;
  virtual void forward(int chunk, int microbatch, Activations& a, std::span<const float> x,
                       std::span<float> y) = 0;
  virtual void backward_input(int chunk, int microbatch, Activations& a,
                              std::span<const float> dy, std::span<float> dx) = 0;
  virtual void backward_weight(int chunk, int microbatch, Activations& a) = 0;
  // Fused backward: both halves. Override to do them in one pass.
  virtual void backward(int chunk, int microbatch, Activations& a, std::span<const float> dy,
                        std::span<float> dx) {
    backward_input(chunk, microbatch, a, dy, dx);
    backward_weight(chunk, microbatch, a);
  }

  // Where the weight-gradient actions report finished layers (null: nowhere).
  void set_gradient_sink(GradientSink* sink) { gradient_sink_ = sink; }
  // Where the forward asks for each layer's parameters (null: they are always in place).
  void set_param_gate(ParamGate* gate) { param_gate_ = gate; }

  // Predicted bytes of one micro-batch's Activations on `chunk` after its
  // forward, from the layer shapes: what the executor's measured peak is
  // weighed against (executor.h, predicted_peak_bytes).
  virtual int64_t activation_bytes(int chunk) const = 0;

 protected:
  // For the weight-gradient actions: arena floats [begin, end) of `chunk` are done.
  void gradient_ready(int chunk, int64_t begin, int64_t end) {
    if (gradient_sink_) gradient_sink_->ready(chunk, begin, end);
  }
  // For the forward: arena floats [begin, end) of `chunk` are read next.
  void params_needed(int chunk, int64_t begin, int64_t end) {
    if (param_gate_ && begin < end) param_gate_->need(chunk, begin, end);
  }
  // For the backward: arena floats [begin, end) of `chunk` are read, or their gradients written, next.
  void params_needed_backward(int chunk, int64_t begin, int64_t end) {
    if (param_gate_ && begin < end) param_gate_->need_backward(chunk, begin, end);
  }
  // After a layer's forward, or its backward's last read: [begin, end) is not read until the next need.
  void params_done(int chunk, int64_t begin, int64_t end) {
    if (param_gate_ && begin < end) param_gate_->done(chunk, begin, end);
  }

 private:
  GradientSink* gradient_sink_ = nullptr;
  ParamGate* param_gate_ = nullptr;
};

}  // namespace psar::pp
