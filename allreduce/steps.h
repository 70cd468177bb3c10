#pragma once
// A collective as a step list: the schedule of an algorithm written out as
// data, apart from data movement and from the reduction (STYLE.md, principle
// 2). Round k lists every message of step k: who sends which slice of the
// vector to whom, and whether the receiver adds it into its own copy of that
// slice (a reduction) or overwrites it (a copy). Each algorithm's file emits
// its own list (the registry's `steps`); three consumers read it:
//   - run_steps() below, a plain Comm executor of any step list: what makes
//     a list checkable, since it must compute the sum on every rank;
//   - the tests, which hold each list's per-rank bytes to the Comm counters
//     of the algorithm's optimized executor and to its registered formula
//     (tests/allreduce/steps_test.cc);
//   - the cluster simulator (sim/collective.h), which times the messages on
//     modelled links — so an algorithm is simulated from its own schedule,
//     not from its closed-form cost, and the cost forms check the simulator.
//
// Semantics of a round: every message's payload is read from the sender's
// vector as it was at the start of the round; receives are applied after all
// of the round's messages arrived, in list order. A rank may therefore send a
// slice and receive into the same slice in one round (a butterfly swap).

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "comm/comm.h"

namespace psar {

struct StepMessage {
  int src = 0, dst = 0;
  int64_t offset = 0, count = 0;  // slice [offset, offset + count) of the vector, in floats
  bool reduce = false;            // receiver adds (true) or copies (false)
  int64_t bytes() const { return count * static_cast<int64_t>(sizeof(float)); }
};

struct StepRound {
  std::vector<StepMessage> messages;
};

struct StepList {
  std::string algorithm;
  int ranks = 1;
  int64_t count = 0;  // floats in the vector
  std::vector<StepRound> rounds;

  void add(int round, StepMessage message);  // grows `rounds` as needed
  // Payload bytes rank `rank` sends over the whole list / receives / reduces.
  int64_t sent_bytes(int rank) const;
  int64_t recv_bytes(int rank) const;
  int64_t reduced_bytes(int rank) const;
  int64_t messages() const;
};

// Runs the list over `comm` (size = list.ranks, data.size() = list.count):
// each round posts its receives into scratch, its sends from `data`, waits
// for all, then applies the receives. Slow and obvious; the reference that
// shows a list computes what its algorithm computes.
void run_steps(Comm& comm, const StepList& list, std::span<float> data);

// Ring reduce-scatter and all-gather (allreduce/collectives.h), as lists:
// steps [0, N-1) and [N-1, 2N-2) of the ring schedule.
StepList ring_reduce_scatter_steps(int ranks, int64_t count);
StepList ring_all_gather_steps(int ranks, int64_t count);

// The hierarchical allreduce (allreduce/hierarchical.cc) on `nodes` nodes of
// `per_node` ranks, rank k·per_node + j being local rank j of node k: the
// ring reduce-scatter inside each node, a ring allreduce of slice j across
// the nodes for every j, the ring all-gather inside each node. Its registry
// entry keeps ring's list (the registry's lists know no nodes); the
// simulator uses this one where a group spans whole nodes evenly.
StepList hierarchical_steps(int nodes, int per_node, int64_t count);

}  // namespace psar
