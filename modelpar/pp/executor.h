#pragma once
// The stage executor: runs one stage's program of a pipeline schedule (the
// lowered action list of p2p.h) for one batch, against a StageModel.
//
// Plan once, run many: the constructor validates the schedule, lowers it and
// allocates one buffer per transfer this stage takes part in (m·v
// activations and m·v gradients at most, each boundary_numel floats; tags are
// unique within a batch, so no buffer is reused before its batch ends). Each
// run() then
//   1. posts every receive of the batch at once (irecv on the pipeline
//      communicator), so a message is matched whenever it arrives;
//   2. walks the actions in order: waits for the action's input (polling
//      every 10 µs for the first 100 ms, then in sleeps growing to 100 µs:
//      a message that arrives soon — the usual case in a steady state — is
//      seen within µs, while a rank waiting out a bubble leaves the cores to
//      ranks that compute; the communicator's deadline bounds every wait),
//      runs the model, and posts the output with isend without waiting for it
//      — before anything else, since its consumer may be waiting: the
//      accounting and the trace spans of the action come after the send;
//   3. waits for its sends to complete before returning, since their
//      buffers are reused by the next batch.
// With p = 1 (both sides of a transfer on one rank) the tensor is handed over
// in memory.
//
// The stash. The executor owns the activations (stage_model.h): a forward
// takes an Activations for its (chunk, micro-batch) — one freed by an
// earlier micro-batch of the chunk, or a new one — and the last backward
// action of that micro-batch frees it again. The stash therefore grows to the
// schedule's peak of micro-batches in flight and no further; the bytes it
// holds are sampled after every action (Activations::bytes(), the buffers'
// real sizes).
//
// Scatter/gather (Megatron-LM, Narayanan et al. 2021, §4.1): with tensor
// parallelism inside a stage, the activation a stage sends is replicated
// over its TP group, so each of the t ranks sends only its 1/t slice to the
// same TP rank of the next stage, and the receiving stage all-gathers the
// slices over its TP group (ExecutorOptions::scatter_gather). The gradients
// going back are replicated too and take the same path. Inter-stage bytes
// drop t×; the all-gather runs on the (fast, intra-node) TP links.
//
// What it measures per batch, from its own clock (now_seconds(), shared by
// every rank of a host): each action's start and end (ActionSpan, the
// simulator's type), the compute time, the time blocked on inputs, the time
// spent posting and completing sends, the all-gathers of scatter/gather, and
// the peak of the stash in activations and bytes. With a Tracer it records
// a span per action (categories forward, backward, backward_input,
// backward_weight) and per receive wait and send (recv, send), all on the
// rank's track 0.

#include <cstdint>
#include <memory>
#include <vector>

#include "allreduce/collectives.h"
#include "comm/comm.h"
#include "core/trace.h"
#include "modelpar/pp/p2p.h"
#include "modelpar/pp/schedule.h"
#include "modelpar/pp/stage_model.h"

namespace psar::pp {

struct ExecutorOptions {
  Tracer* tracer = nullptr;  // null or disabled: no spans
  // Sleep between tests of a pending receive or send: poll_min_s for the
  // first poll_fast_s of a wait (long enough to cover waiting out a bubble of
  // several actions, so an input is seen within tens of µs), then doubling up
  // to poll_max_s (a peer stalled or far behind).
  double poll_min_s = 10e-6;
  double poll_fast_s = 100e-3;
  double poll_max_s = 100e-6;
  // The TP group of this stage, whose ranks send 1/t of each activation and
  // all-gather what they receive; null (or size 1): whole tensors.
  Comm* scatter_gather = nullptr;
  // Told which parameters' gradients are final for the batch, layer by layer,
  // during each chunk's last weight-gradient action (stage_model.h); null: no one.
  GradientSink* gradient_sink = nullptr;
  // Asked, before each layer's forward, for that layer's parameters
  // (stage_model.h); the wait is timed apart from the compute. Null: no one.
  ParamGate* param_gate = nullptr;
};

// One batch on one stage, as measured.
struct StageRun {
  std::vector<ActionSpan> spans;  // every action in schedule order, now_seconds() times
  double start = 0;               // first action's start
  double end = 0;                 // last action's end
  double compute_s = 0;           // Σ action durations, less param_wait_s
  double param_wait_s = 0;        // layers waiting for their parameters (param_gate)
  double recv_wait_s = 0;         // blocked waiting for inputs
  double send_s = 0;              // posting sends, and waiting for them at the end
  double gather_s = 0;            // scatter/gather's all-gathers of received slices
  int64_t gather_bytes_sent = 0;  // what those all-gathers sent over the TP group
  int peak_activations = 0;       // the stash at its largest: micro-batches in flight
  int64_t peak_activation_bytes = 0;  // and the bytes their Activations held
};

class StageExecutor : private GradientSink, private ParamGate {
 public:
  // `pipeline`: the p ranks of one pipeline, rank = stage. Throws ConfigError
  // for an invalid schedule or one whose stage count is not the group's size.
  StageExecutor(Schedule schedule, Comm& pipeline, StageModel& model, ExecutorOptions options = {});

  // Runs this stage's actions for one batch. Errors of the model, and
  // CommError/TimeoutError naming the transfer, propagate.
  StageRun run();

  const Schedule& schedule() const { return schedule_; }
  int stage() const { return stage_; }

 private:
  // Waits for `request` until the communicator's deadline; `what` names it.
  void await(Request& request, const Transfer& transfer, const Action& action);
  std::vector<float>& buffer(const Transfer& transfer);
  // What crosses the pipeline link: the whole buffer, or this TP rank's slice.
  std::span<float> wire(const Transfer& transfer);
  // GradientSink: the model's reports, passed on during a chunk's last
  // weight-gradient action of the batch (armed_chunk_).
  void ready(int chunk, int64_t begin, int64_t end) override;
  // ParamGate: the model's requests, passed on and timed (param_wait_s).
  void need(int chunk, int64_t begin, int64_t end) override;
  void need_backward(int chunk, int64_t begin, int64_t end) override;
  void done(int chunk, int64_t begin, int64_t end) override;
  // A wait for parameters that began at t0 ended now: timed, traced.
  void waited(const char* span, int chunk, int64_t begin, int64_t end, double t0);
  // The stash of (chunk, micro-batch): taken at its forward, freed after its
  // last backward action.
  pp::Activations& take(int chunk, int microbatch);
  void release(int chunk, int microbatch);

  Schedule schedule_;
  Comm& comm_;
  StageModel& model_;
  ExecutorOptions options_;
  int stage_ = 0;
  std::vector<Step> program_;         // this stage's lowered actions
  std::vector<int> buffer_index_;     // tag -> index into buffers_, -1 if not ours
  std::vector<std::vector<float>> buffers_;
  Comm* gather_comm_ = nullptr;       // scatter/gather's TP group (size > 1), or null
  std::unique_ptr<RingAllGather> gather_;
  std::vector<std::unique_ptr<Activations>> live_;               // [chunk · m + i]
  std::vector<std::vector<std::unique_ptr<Activations>>> free_;  // [chunk]
  int live_count_ = 0;
  std::vector<char> last_weight_action_;  // [k] program_[k] is its chunk's last W of the batch
  int armed_chunk_ = -1;
  StageRun* running_ = nullptr;  // the run in progress, for need()'s timing
};

// Floats a transfer carries: the boundary between its two virtual stages.
int64_t transfer_numel(const StageModel& model, const Transfer& transfer);

// The stash bytes `stage` holds at most running its list in order: the
// simulator's in-flight count (peak_activations) with each activation
// weighed by model.activation_bytes(chunk), the model's prediction from its
// layer shapes. What StageRun::peak_activation_bytes should measure.
int64_t predicted_peak_bytes(const Schedule& schedule, int stage, const StageModel& model);

}  // namespace psar::pp
