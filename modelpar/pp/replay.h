#pragma once
// Internal: the in-order execution both the validator and the simulator use.
// Each stage runs its actions strictly in list order. An action starts when
// its stage is free and its inputs exist: the transfer it receives (the
// producing action has ended, plus `latency` unless both sides share a rank)
// and, on its own stage, the work it continues — a backward needs its
// forward, a weight gradient its input gradient. A transfer arrives
// `arrival` after its producing action ends; by default sends never block
// (psar's executor posts them non-blocking), and with `sender_busy` > 0 the
// producing stage is held that long after the action (a blocking send, as
// Megatron's 1F1B and interleaved schedules wait for their batched
// send/receive before the next action). Either way a schedule deadlocks
// exactly when some stage's next action waits for an action that never runs.
//
// Because every start time is max(stage free, inputs ready), the result does
// not depend on the order in which stages are visited: it is the
// event-driven timeline, computed by sweeping the stages until no action can
// start. Expects actions within bounds and no duplicates (validate.cc checks).

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "modelpar/pp/p2p.h"
#include "modelpar/pp/schedule.h"

namespace psar::pp::detail {

struct Replay {
  std::vector<std::vector<ActionSpan>> spans;  // [stage] -> the actions that ran, in order
  // Per stage still holding actions: what its next action waits for.
  std::vector<std::string> blocked;
  bool finished() const { return blocked.empty(); }
};

using DurationFn = std::function<double(int stage, const Action& action)>;
// The delay of one transfer between different ranks (local ones are free).
using LatencyFn = std::function<double(const Transfer& transfer)>;
// Both times of one transfer between different ranks (local ones are free).
using TransferTimeFn = std::function<TransferTime(const Transfer& transfer)>;

Replay replay(const Schedule& schedule, const DurationFn& duration, double latency);
Replay replay(const Schedule& schedule, const DurationFn& duration, const LatencyFn& latency);
Replay replay(const Schedule& schedule, const DurationFn& duration, const TransferTimeFn& transfer);

}  // namespace psar::pp::detail
