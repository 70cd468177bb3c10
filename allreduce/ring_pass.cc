// One pass around a ring (ring_reduce_scatter.cc, ring_all_gather.cc): ranks
// form a ring r -> r+1, the vector is cut into N chunks (the shape's split,
// by default Partition{count, N}; a chunk of uneven size keeps the same order
// of additions), and at step s rank r sends chunk (r - s - lag) mod N to r+1, which adds
// it to its own (reduce) or stores it — the chunk it forwards at step s+1, so
// segments stream through the ring. Chunks up to kRingEagerPiecesUpTo travel
// as eager pieces (allreduce/eager.h).

#include "allreduce/algorithms.h"
#include "allreduce/eager.h"

namespace psar {

Program ring_pass_program(std::string name, const ProgramShape& shape, int lag, bool reduce) {
  const int N = shape.ranks;
  Program p(std::move(name), N, shape.count);
  p.eager_up_to = kRingEagerPiecesUpTo;
  for (int s = 0; s + 1 < N; ++s)
    for (int r = 0; r < N; ++r) {
      const int c = ((r - s - lag) % N + N) % N;
      p.transfer(s, r, (r + 1) % N, shape.piece_offset(c), shape.piece_size(c), reduce);
    }
  p.finish();
  return p;
}

}  // namespace psar
