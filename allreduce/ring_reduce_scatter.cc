// ring reduce-scatter — ranks form a ring r -> r+1 and the vector is cut into
// N chunks by Partition{count, N} (or the shape's split). At step s (0..N-2) rank r sends its running
// partial sum of chunk (r-s-1) mod N to r+1 and adds the partial sum of chunk
// (r-s-2) mod N arriving from r-1 — the chunk it forwards at step s+1, which
// is what lets segments stream (the engine forwards a segment as soon as it is
// added). After N-1 steps rank r holds the complete sum of chunk r. Cost:
// (N-1) steps; each rank sends and receives (N-1) chunks, (N-1)/N·n bytes up
// to Partition's one-element rounding (exactly n minus chunk r, which it keeps), and adds as
// many: (N-1)α + (N-1)/N·n(β+γ). Chunks up to 16 KiB travel as eager pieces:
// measured, a stream of more than about four pieces per chunk costs the ring
// more than the rendezvous it avoids. Any N ≥ 1, any count, any split (a
// chunk of uneven size keeps the same order of additions; the busiest
// step is the largest chunk's).

#include "allreduce/algorithms.h"
#include "allreduce/partition.h"

namespace psar {

Program ring_reduce_scatter_program(const ProgramShape& shape) {
  const int N = shape.ranks;
  Program p("ring reduce-scatter", N, shape.count);
  p.eager_up_to = 16 * 1024;
  for (int s = 0; s + 1 < N; ++s)
    for (int r = 0; r < N; ++r) {
      const int c = ((r - s - 1) % N + N) % N;
      p.transfer(s, r, (r + 1) % N, shape.piece_offset(c), shape.piece_size(c), true);
    }
  p.finish();
  return p;
}

}  // namespace psar
