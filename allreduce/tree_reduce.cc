// tree reduce — the sum of every rank's vector to the root along the binary
// heap tree (allreduce/heap_tree.h), D = ⌊log₂N⌋ deep. The vector is cut into
// S segments (the segment size, sync.segment_bytes); segment j leaves a rank
// at depth k for its parent at round (D-k)+j, so a parent has it from both
// children one round before it passes it on, and segments stream up the
// tree: D+S-1 rounds. Each non-root rank sends n once; a rank with two
// children receives and adds 2n: (D+S-1)·(α + 2(n/S)(β+γ)) along the root's
// links. Any N ≥ 1, any count, any root.

#include "allreduce/algorithms.h"
#include "allreduce/heap_tree.h"
#include "allreduce/partition.h"

namespace psar {

Program tree_reduce_program(const ProgramShape& shape) {
  Program p("tree reduce", shape.ranks, shape.count);
  const HeapTree tree{shape.ranks, shape.root};
  const Partition segs{shape.count, static_cast<int>(shape.segments(shape.count))};
  const int deepest = tree.deepest();
  for (int j = 0; j < segs.parts; ++j)
    for (int r = 0; r < shape.ranks; ++r)
      if (r != shape.root)
        p.transfer(deepest - tree.depth(r) + j, r, tree.parent(r), segs.offset(j), segs.size(j),
                   true);
  p.finish();
  return p;
}

}  // namespace psar
