// tree — tree reduce to rank 0, then tree broadcast from it (tree_reduce.cc,
// tree_broadcast.cc), over the binary heap tree (allreduce/heap_tree.h):
// depth D = ⌊log₂N⌋, the vector in S segments that stream up and back down.
// The broadcast of segment j leaves the root in the round after the root has
// summed it (round D+j), not after the last segment's sum: the two streams
// overlap, each link carries the sums up and the result down at once (full
// duplex), and every rank takes its steps of both in the order the segments
// come (an inner rank forwards segment j down before it waits for segment
// j+D+1 from below), 2D+S-1 rounds. Every non-root rank sends n up and
// receives n down, 2(N-1)·n bytes in all (the textbook's 2·N·M,
// docs/theory.md), but an inner node with two children sends and receives 3n
// (a leaf n): the tree has the log N latency of a butterfly, not the balance
// of the ring. Only the root's sums are broadcast, so all ranks hold
// identical bits. Any N ≥ 1, any count.

#include <algorithm>

#include "allreduce/algorithms.h"
#include "allreduce/heap_tree.h"

namespace psar {

Program tree_program(const ProgramShape& shape) {
  ProgramShape at_zero = shape;
  at_zero.root = 0;
  Program p("tree allreduce", shape.ranks, shape.count);
  p.paced = shape.spans_nodes();
  const auto same = [](int r) { return r; };
  p.append(tree_reduce_program(at_zero), same, 0, 0);
  // The reduce brings segment j to the root in round D-1+j.
  p.append(tree_broadcast_program(at_zero), same, 0, HeapTree{shape.ranks, 0}.deepest());
  p.finish();
  return p;
}

// 2D+S-1 rounds. Bound by the busiest rank's links: m = its children plus
// its parent (the root: k = min(2, N-1) children; an inner rank with two
// children: 3), each carrying a segment each way per round in the steady
// state, S-1 rounds of m segments and the 2D rounds of the fill and drain at
// one; the root adds k·n: (2D+S-1)α + (m(S-1) + 2D)(n/S)β + k·n·γ. An
// estimate (the fill and drain overlap partly); the simulator times the
// program itself.
// S counts the vector's float32 bytes (ProgramShape::segments); n is the
// bytes on the wire.
CostTerms tree_cost(int ranks, int64_t bytes, const AllreduceOptions& options) {
  if (ranks == 1) return {};
  const int depth = HeapTree{ranks, 0}.deepest();
  ProgramShape cut;
  cut.segment_bytes = options.segment_bytes;
  const int64_t segments = cut.segments(bytes / element_size(options.dtype));
  const double k = std::min(2, ranks - 1);
  const double m = ranks >= 5 ? 3 : k;  // rank 1 has children 3 and 4 from N = 5 on
  const double s = static_cast<double>(segments), piece = static_cast<double>(bytes) / s;
  return {2.0 * depth + s - 1, (m * (s - 1) + 2.0 * depth) * piece, k * s * piece};
}

}  // namespace psar
