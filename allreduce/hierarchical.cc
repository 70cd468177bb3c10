// hierarchical — Horovod's hierarchical allreduce, a composition of three
// programs. N ranks on M nodes of L ranks each (N = M·L); local rank j of
// node k (ranks of a node in rank order):
//   1. inside each node, a ring reduce-scatter (L-1 steps): local rank j
//      holds the node's sum of slice j of Partition{count, L};
//   2. across nodes, local rank j of every node runs a ring allreduce of
//      slice j (2(M-1) steps, M ranks): it holds the global sum of slice j;
//   3. inside each node, a ring all-gather (L-1 steps) of the slices.
// Cost, n bytes, α/β inside a node (α_i, β_i) and between nodes (α, β):
//   2(L-1)α_i + 2(M-1)α + 2(L-1)/L·nβ_i + 2(M-1)/(M·L)·nβ + (N-1)/N·nγ.
// Bytes each rank sends, exactly (P_L = Partition{count, L}, c_j = P_L.size(j),
// P_M = Partition{c_j, M}, times the element size):
//   inside the node   (2·count − c_j − c_{(j+1) mod L})
//   between nodes     (2·c_j − P_M.size(k) − P_M.size((k+1) mod M))   (0 when M = 1)
// So only n/L per rank crosses the node boundary, over M-way rings: the
// latency term grows with M, not N, and a node's NIC carries 2(M-1)/M·n in
// all, the same as one rank of a flat ring. Every slice is summed by one
// ring and copied everywhere else, so all ranks hold identical bits.
// The three run as one program on the whole communicator, so the engine
// starts a slice's ring between nodes as soon as its first segment is
// reduced inside the node. Nodes come from ProgramShape::node (the
// allreducer fills it from Comm::nodes() — net.node_size, or a test — else
// from the hostnames, exchanged once over the control plane). Nodes of
// unequal size (as Horovod, this schedule needs L ranks on every node), or
// no node map, give the flat ring over all N ranks. Any count ≥ 0.

#include <algorithm>

#include "allreduce/algorithms.h"
#include "allreduce/partition.h"

namespace psar {

Program hierarchical_program(const ProgramShape& shape) {
  const int N = shape.ranks;
  std::vector<std::vector<int>> members;  // [node] -> its ranks, in rank order
  if (static_cast<int>(shape.node.size()) == N)
    for (int r = 0; r < N; ++r) {
      const int k = shape.node[static_cast<size_t>(r)];
      if (k >= static_cast<int>(members.size())) members.resize(static_cast<size_t>(k) + 1);
      members[static_cast<size_t>(k)].push_back(r);
    }
  std::erase_if(members, [](const std::vector<int>& m) { return m.empty(); });
  const bool even = !members.empty() && std::all_of(members.begin(), members.end(), [&](const auto& m) {
    return m.size() == members.front().size();
  });
  if (!even) {
    Program flat = ring_program(shape);
    flat.name = "hierarchical allreduce (flat ring: nodes of unequal size)";
    return flat;
  }
  const int M = static_cast<int>(members.size()), L = static_cast<int>(members.front().size());
  Program p("hierarchical allreduce", N, shape.count);
  ProgramShape intra = shape, inter = shape;
  intra.ranks = L;
  inter.ranks = M;
  int round = 0;
  const Program rs = ring_reduce_scatter_program(intra), ag = ring_all_gather_program(intra);
  int took = 0;
  for (const auto& node : members)  // 1. reduce-scatter inside every node
    took = p.append(rs, [&](int j) { return node[static_cast<size_t>(j)]; }, 0, round);
  round += took;
  const Partition slices{shape.count, L};
  took = 0;
  for (int j = 0; j < L; ++j) {  // 2. slice j around local rank j of every node
    inter.count = slices.size(j);
    took = std::max(took, p.append(ring_program(inter),
                                   [&](int k) { return members[static_cast<size_t>(k)][static_cast<size_t>(j)]; },
                                   slices.offset(j), round));
  }
  round += took;
  for (const auto& node : members)  // 3. all-gather inside every node
    p.append(ag, [&](int j) { return node[static_cast<size_t>(j)]; }, 0, round);
  p.finish();
  return p;
}

}  // namespace psar
