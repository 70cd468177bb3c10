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
//      every 10 µs for the first 0.5 ms, then in sleeps growing to 100 µs:
//      a message that arrives soon — the usual case in a steady state — is
//      seen within µs, while a rank waiting out a bubble leaves the cores to
//      ranks that compute; the communicator's deadline bounds every wait), runs the
//      model, samples its stash, and posts the output with isend without
//      waiting for it;
//   3. waits for its sends to complete before returning, since their
//      buffers are reused by the next batch.
// With p = 1 (both sides of a transfer on one rank) the tensor is handed over
// in memory.
//
// What it measures per batch, from its own clock (now_seconds(), shared by
// every rank of a host): each action's start and end (ActionSpan, the
// simulator's type), the compute time, the time blocked on inputs, the time
// spent posting and completing sends, and the peak of the model's stash in
// activations and bytes. With a Tracer it records a span per action
// (categories forward, backward, backward_input, backward_weight) and per
// receive wait and send (recv, send), all on the rank's track 0.

#include <cstdint>
#include <vector>

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
};

// One batch on one stage, as measured.
struct StageRun {
  std::vector<ActionSpan> spans;  // every action in schedule order, now_seconds() times
  double start = 0;               // first action's start
  double end = 0;                 // last action's end
  double compute_s = 0;           // Σ action durations
  double recv_wait_s = 0;         // blocked waiting for inputs
  double send_s = 0;              // posting sends, and waiting for them at the end
  int peak_activations = 0;       // the model's stash at its largest
  int64_t peak_activation_bytes = 0;
};

class StageExecutor {
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

  Schedule schedule_;
  Comm& comm_;
  StageModel& model_;
  ExecutorOptions options_;
  int stage_ = 0;
  std::vector<Step> program_;         // this stage's lowered actions
  std::vector<int> buffer_index_;     // tag -> index into buffers_, -1 if not ours
  std::vector<std::vector<float>> buffers_;
};

// Floats a transfer carries: the boundary between its two virtual stages.
int64_t transfer_numel(const StageModel& model, const Transfer& transfer);

// The stash bytes `stage` holds at most running its list in order: the
// simulator's in-flight count (peak_activations) with each activation
// weighed by model.stash_bytes(chunk). What StageRun::peak_activation_bytes
// should measure.
int64_t predicted_peak_bytes(const Schedule& schedule, int stage, const StageModel& model);

}  // namespace psar::pp
