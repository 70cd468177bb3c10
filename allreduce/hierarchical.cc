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
//
// Its reduce-scatter and all-gather (a sharded optimizer's pair), pieces
// P_r = [split[r], split[r+1]) (ProgramShape::split), on nodes of L
// consecutive ranks each — rank r = kL + j is local rank j of node k, and
// node k' owns the contiguous region R_k' of its ranks' pieces:
//   reduce-scatter
//   1. inside each node, for every region R_k', a ring reduce-scatter of it
//      cut at its owners: local rank j holds the node's sum of piece
//      (k', j) of every region (they run in the same rounds);
//   2. across nodes, the "column" j — local rank j of every node — copies
//      its pieces (k', j), k' = 0..M-1, one after another into scratch,
//      reduce-scatters them around an M-ring and copies its own back.
//   all-gather: the same two in reverse — the column's ring all-gather of
//   the pieces (k', j) through scratch, then each region's ring all-gather
//   inside each node.
// Bytes each rank (k, j) sends (C_j = Σ_k' |P_(k',j)|, the column's floats):
//   reduce-scatter  inside (count − C_j) + between (C_j − |P_r|) = count − |P_r|,
//                   the flat ring's, of which only C_j − |P_r| ≈ n/L·(M−1)/M
//                   crosses the node boundary;
//   all-gather      inside (count − C_{(j+1) mod L}) + between
//                   (C_j − |P_(k+1 mod M, j)|).
// Nodes of unequal size or of ranks not consecutive, no node map, one node
// or one rank per node: the flat ring pair.

#include <algorithm>
#include <string>

#include "allreduce/algorithms.h"
#include "allreduce/partition.h"

namespace psar {

namespace {
// [node] -> its ranks, in rank order; empty if the nodes are not all of one size.
std::vector<std::vector<int>> node_members(const ProgramShape& shape) {
  const int N = shape.ranks;
  std::vector<std::vector<int>> members;
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
  if (!even) members.clear();
  return members;
}

// The pair's two levels, or none (empty) for the flat ring's: nodes k of L
// consecutive ranks kL..kL+L-1, M ≥ 2 nodes, L ≥ 2.
std::vector<std::vector<int>> blocks_of_nodes(const ProgramShape& shape) {
  std::vector<std::vector<int>> members = node_members(shape);
  std::sort(members.begin(), members.end());
  const bool blocks =
      members.size() >= 2 && members.front().size() >= 2 &&
      std::all_of(members.begin(), members.end(), [&](const std::vector<int>& m) {
        const auto k = static_cast<int>(&m - members.data()), L = static_cast<int>(m.size());
        for (int j = 0; j < L; ++j)
          if (m[static_cast<size_t>(j)] != k * L + j) return false;
        return true;
      });
  return blocks ? members : std::vector<std::vector<int>>{};
}

// The column j's pieces (k', j) in scratch, one after another: the offsets, M + 1.
std::vector<int64_t> column_layout(const ProgramShape& shape, int M, int L, int j) {
  std::vector<int64_t> at{0};
  for (int k = 0; k < M; ++k) at.push_back(at.back() + shape.piece_size(k * L + j));
  return at;
}

// The ring's collective over region R_k' of every node (reduce-scatter or
// all-gather, cut at the region's owners), in the rounds from `round`.
int regions_inside_nodes(Program& p, const ProgramShape& shape, int M, int L, int round,
                         ProgramFn ring) {
  int took = 0;
  for (int region = 0; region < M; ++region) {
    const int64_t begin = shape.piece_offset(region * L);
    ProgramShape intra = shape;
    intra.ranks = L;
    intra.node.clear();
    intra.split.clear();
    for (int j = 0; j < L; ++j) intra.split.push_back(shape.piece_offset(region * L + j) - begin);
    intra.split.push_back(shape.piece_offset(region * L + L - 1) +
                          shape.piece_size(region * L + L - 1) - begin);
    intra.count = intra.split.back();
    const Program part = ring(intra);
    for (int k = 0; k < M; ++k)
      took = std::max(took, p.append(part, [&](int j) { return k * L + j; }, begin, round));
  }
  return took;
}

// Each column's ring collective over its pieces in scratch (copied in from
// the vector before, out after): reduce-scatter (its own piece back) or
// all-gather (every piece back). Returns the rounds it took.
int columns_across_nodes(Program& p, const ProgramShape& shape, int M, int L, int round,
                         bool reduce) {
  std::vector<std::vector<int64_t>> layouts;  // [column]
  for (int j = 0; j < L; ++j) layouts.push_back(column_layout(shape, M, L, j));
  int took = 0;
  for (int j = 0; j < L; ++j) {
    const std::vector<int64_t>& at = layouts[static_cast<size_t>(j)];
    p.workspace = std::max(p.workspace, at.back());
    ProgramShape inter = shape;
    inter.ranks = M;
    inter.node.clear();
    inter.count = at.back();
    inter.split = at;
    const Program ring = reduce ? ring_reduce_scatter_program(inter) : ring_all_gather_program(inter);
    took = std::max(took, p.append(ring, [&](int k) { return k * L + j; }, shape.count, round + 1));
  }
  for (int r = 0; r < shape.ranks; ++r) {
    const int k = r / L, j = r % L;
    const std::vector<int64_t>& at = layouts[static_cast<size_t>(j)];
    for (int q = 0; q < M; ++q) {
      const int owner = q * L + j;
      const int64_t piece = shape.piece_offset(owner), n = shape.piece_size(owner);
      // In: all the column's pieces to sum, or the own one to send.
      if (reduce || q == k) p.local(r, round, StepKind::kCopy, shape.count + at[q], piece, n);
      // Out: the own sum, or every piece but the own.
      if (reduce == (q == k)) p.local(r, round + 1 + took, StepKind::kCopy, piece, shape.count + at[q], n);
    }
  }
  return took + 2;
}

// The reduce-scatter (reduce) or the all-gather of the pair.
Program two_levels(const ProgramShape& shape, bool reduce) {
  const char* what = reduce ? "reduce-scatter" : "all-gather";
  const std::vector<std::vector<int>> nodes = blocks_of_nodes(shape);
  if (nodes.empty()) {
    Program flat = reduce ? ring_reduce_scatter_program(shape) : ring_all_gather_program(shape);
    flat.name = std::string("hierarchical ") + what + " (flat ring)";
    return flat;
  }
  const int M = static_cast<int>(nodes.size()), L = static_cast<int>(nodes.front().size());
  Program p(std::string("hierarchical ") + what, shape.ranks, shape.count);
  if (reduce) {
    const int took = regions_inside_nodes(p, shape, M, L, 0, &ring_reduce_scatter_program);
    columns_across_nodes(p, shape, M, L, took, true);
  } else {
    const int took = columns_across_nodes(p, shape, M, L, 0, false);
    regions_inside_nodes(p, shape, M, L, took, &ring_all_gather_program);
  }
  p.finish();
  return p;
}
}  // namespace

Program hierarchical_reduce_scatter_program(const ProgramShape& shape) {
  return two_levels(shape, /*reduce=*/true);
}

Program hierarchical_all_gather_program(const ProgramShape& shape) {
  return two_levels(shape, /*reduce=*/false);
}

Program hierarchical_program(const ProgramShape& shape) {
  const int N = shape.ranks;
  const std::vector<std::vector<int>> members = node_members(shape);
  if (members.empty()) {
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
