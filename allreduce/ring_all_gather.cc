// ring all-gather — rank r starts with chunk r of Partition{count, N} (or the
// shape's split); at step
// t (0..N-2) it sends chunk (r-t) mod N to r+1 and receives chunk (r-t-1) mod
// N from r-1 in place, the chunk it forwards at step t+1. Cost: (N-1) steps;
// each rank sends and receives (N-1) chunks, (N-1)/N·n bytes up to
// Partition's rounding (exactly n minus chunk r+1): (N-1)α + (N-1)/N·nβ, no
// reduction. Chunks up to 16 KiB travel as eager pieces (as the
// reduce-scatter's). Any N ≥ 1, any count.

#include "allreduce/algorithms.h"
#include "allreduce/partition.h"

namespace psar {

Program ring_all_gather_program(const ProgramShape& shape) {
  const int N = shape.ranks;
  Program p("ring all-gather", N, shape.count);
  p.eager_up_to = 16 * 1024;
  for (int t = 0; t + 1 < N; ++t)
    for (int r = 0; r < N; ++r) {
      const int c = ((r - t) % N + N) % N;
      p.transfer(t, r, (r + 1) % N, shape.piece_offset(c), shape.piece_size(c), false);
    }
  p.finish();
  return p;
}

}  // namespace psar
