#pragma once
// The schedule validator. A schedule is valid when
//  - it is complete: for every micro-batch and virtual stage, its stage runs
//    exactly one forward and either one fused backward or one backward-input
//    plus one backward-weight, each micro-batch and chunk within range;
//  - each stage keeps the local order: a backward after its forward, a
//    weight gradient after its input gradient;
//  - it is free of deadlock: running every stage's list in order, where an
//    action blocks until the transfer it receives was sent (p2p.h) and sends
//    never block, every action runs. Every receive then has its send.
// Otherwise a ConfigError lists the problems, each naming stage, action
// index, operation, micro-batch and chunk.

#include "modelpar/pp/schedule.h"

namespace psar::pp {

void validate(const Schedule& schedule);

}  // namespace psar::pp
