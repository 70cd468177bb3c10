// tree broadcast — the root's vector to every rank down the binary heap tree
// (allreduce/heap_tree.h), D = ⌊log₂N⌋ deep, in S segments (sync.segment_bytes):
// a rank at depth k passes segment j to its children at round k+j, as soon as
// it has it, so segments stream down: D+S-1 rounds, each rank with children
// sends each segment to each child: (D+S-1)·(α + 2(n/S)β) along the root's
// links. Every rank ends with the root's bits. Any N ≥ 1, any count, any root.

#include "allreduce/algorithms.h"
#include "allreduce/heap_tree.h"
#include "allreduce/partition.h"

namespace psar {

Program tree_broadcast_program(const ProgramShape& shape) {
  Program p("tree broadcast", shape.ranks, shape.count);
  const HeapTree tree{shape.ranks, shape.root};
  const Partition segs{shape.count, static_cast<int>(shape.segments(shape.count))};
  for (int j = 0; j < segs.parts; ++j)
    for (int r = 0; r < shape.ranks; ++r)
      for (int k : {0, 1})
        if (const int c = tree.child(r, k); c >= 0)
          p.transfer(tree.depth(r) + j, r, c, segs.offset(j), segs.size(j), false);
  p.finish();
  return p;
}

}  // namespace psar
