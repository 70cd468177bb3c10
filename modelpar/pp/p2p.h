#pragma once
// The point-to-point traffic a schedule implies. Nothing here is stored in a
// Schedule: a forward of micro-batch i on virtual stage u needs the
// activation of (i, u − 1) and produces the one of (i, u) for u + 1; a
// backward (fused, or its input half) of (i, u) needs the output gradient
// from u + 1 and produces the input gradient for u − 1. The first virtual
// stage reads the micro-batch, the last one's backward starts from its own
// loss; a weight-gradient action moves nothing. `lower` turns a schedule into
// the per-stage program an executor runs: each action with the receive it
// waits for and the send it posts afterwards.
//
// Every transfer has a tag that is unique within one batch, so an executor
// may post receives early and match messages in any arrival order.

#include <optional>
#include <vector>

#include "modelpar/pp/schedule.h"

namespace psar::pp {

enum class Payload : uint8_t { kActivation, kGradient };

struct Transfer {
  Payload payload = Payload::kActivation;
  int microbatch = 0;
  int from_vstage = 0;  // producer; the consumer is from_vstage ± 1
  int to_vstage = 0;
  int from_stage = 0;  // ranks of the pipeline group
  int to_stage = 0;
  int tag = 0;
  // Both virtual stages on one rank (p = 1): handed over in memory, not sent.
  bool local() const { return from_stage == to_stage; }
};

// What one transfer between different stages costs in a replay: the
// consumer may use it `arrival` after the producing action ended, and the
// producer is held `sender_busy` after it (0: a non-blocking send).
struct TransferTime {
  double arrival = 0;
  double sender_busy = 0;
};

struct Step {
  Action action;
  std::optional<Transfer> input;   // to receive before the action runs
  std::optional<Transfer> output;  // to send after it ran
};

// The transfer `action` on `stage` consumes / produces, if any.
std::optional<Transfer> input_of(const Schedule& schedule, int stage, const Action& action);
std::optional<Transfer> output_of(const Schedule& schedule, int stage, const Action& action);

// The per-stage program: schedule.actions with their transfers, same order.
std::vector<std::vector<Step>> lower(const Schedule& schedule);

// Unique within a batch: (producer virtual stage, micro-batch, payload).
int transfer_tag(const Schedule& schedule, Payload payload, int microbatch, int from_vstage);

const char* payload_name(Payload payload);  // "activation", "gradient"
// "activation of micro-batch 3 from virtual stage 1 (stage 1)"
std::string describe(const Transfer& transfer);

}  // namespace psar::pp
