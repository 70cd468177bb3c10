// tree — tree reduce to rank 0, then tree broadcast from it (tree_reduce.cc,
// tree_broadcast.cc), over the binary heap tree (allreduce/heap_tree.h):
// depth D = ⌊log₂N⌋, the vector in S segments that stream up and back down,
// 2(D+S-1) rounds. Every non-root rank sends n up and receives n down,
// 2(N-1)·n bytes in all (the textbook's 2·N·M, docs/theory.md), but an inner
// node with two children sends and receives 3n (a leaf n): the tree has the
// log N latency of a butterfly, not the balance of the ring. Only the root's
// sums are broadcast, so all ranks hold identical bits. Any N ≥ 1, any count.

#include <algorithm>

#include "allreduce/algorithms.h"

namespace psar {

Program tree_program(const ProgramShape& shape) {
  ProgramShape at_zero = shape;
  at_zero.root = 0;
  Program p("tree allreduce", shape.ranks, shape.count);
  const auto same = [](int r) { return r; };
  const int up = p.append(tree_reduce_program(at_zero), same, 0, 0);
  p.append(tree_broadcast_program(at_zero), same, 0, up);
  p.finish();
  return p;
}

// Each phase (reduce, then broadcast) is bound by the root's link: k·S
// segments through it (k = min(2, N-1) children of the root, S segments)
// after a fill of f = 2·max(0, D-2) segment times, D = ⌊log₂N⌋:
// 2(D+S-1)α + 2(k·S+f)(n/S)β + (k·S+f)(n/S)γ. Exact for N a power of two;
// otherwise the fill differs by a segment or two. S counts the vector's
// float32 bytes (ProgramShape::segments); n is the bytes on the wire.
CostTerms tree_cost(int ranks, int64_t bytes, const AllreduceOptions& options) {
  if (ranks == 1) return {};
  int depth = 0;
  while ((2 << depth) <= ranks) ++depth;
  const int64_t float_bytes = bytes / element_size(options.dtype) * static_cast<int64_t>(sizeof(float));
  const int64_t segments =
      std::max<int64_t>(1, (float_bytes + options.segment_bytes - 1) / options.segment_bytes);
  const double k = std::min(2, ranks - 1), fill = 2.0 * std::max(0, depth - 2);
  const double s = static_cast<double>(segments), piece = static_cast<double>(bytes) / s;
  return {2.0 * (depth + s - 1), 2 * (k * s + fill) * piece, (k * s + fill) * piece};
}

}  // namespace psar
