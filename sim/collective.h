#pragma once
// Timing collective programs (allreduce/program.h) on the modelled network
// (sim/cluster.h): the program the engine runs, not a copy of it. Several
// programs may run at once — every data-parallel group of a 3D grid syncs at
// the same time — and then share links.
//
// The model, round by round (a round of a program is one step k of the
// algorithm, taken by every group at once):
//   - a rank takes part in round k once it has finished round k−1 (each rank
//     has its own clock, so a late group or rank delays only its peers);
//   - a message starts when its sender is ready and takes
//       latency(path) + bytes / min over its links (bandwidth / flows on it),
//     each link's bandwidth taken at its type's bus efficiency for the
//     program's whole vector (sim/cluster.h, link_efficiency),
//     the flows on a link being every message of round k, over all groups,
//     that crosses it (equal sharing: two equal flows on one NIC each take
//     twice as long);
//   - a rank finishes round k when every message it sends or receives has
//     arrived, plus reduced bytes / reduce_bandwidth for what it adds
//     (receives that add, and local adds).
// On a uniform network with one group this is the α-β(-γ) model of
// docs/theory.md exactly: a ring allreduce of n bytes takes
// 2(p−1)α + 2(p−1)/p·n·β. What it leaves out: flows of different rounds
// overlapping in time, and segments pipelining inside a round.

#include <vector>

#include "allreduce/program.h"
#include "sim/cluster.h"

namespace psar::sim {

struct GroupRun {
  const Program* program = nullptr;
  std::vector<int> endpoint;  // [rank of the program] -> network endpoint
  double start = 0;           // when every rank of the group enters round 0
  double element_bytes = 4;   // bytes of one element of the program's vector
};

struct CollectiveOptions {
  double reduce_bandwidth = 0;  // bytes/s of a reduction; 0: free
};

// Per group, when its last rank finished.
std::vector<double> run_groups(const Network& net, const std::vector<GroupRun>& groups,
                               const CollectiveOptions& options = {});

// Flows that overlap in time and share links (the pipeline's transfers,
// sim/step.cc): flow k starts at `start` and alone would take `alone`
// seconds. Processor sharing: while n flows are active on a link, each
// moves at 1/n of its own speed there, and a flow at the slowest share of
// its links (its bottleneck), so two equal flows started together on one
// ingress both end at 2·alone, and a flow joined halfway through by an
// equal one ends at 1.5·alone, the joiner at 2·alone. Flows on disjoint
// links keep their alone times. Returns each flow's end, in input order.
struct Flow {
  double start = 0;
  double alone = 0;
  std::vector<int> links;  // link ids (Network's), each at most once
};
std::vector<double> share_links(const std::vector<Flow>& flows, int links);

}  // namespace psar::sim
