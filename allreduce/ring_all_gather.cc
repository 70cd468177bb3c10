// ring all-gather — rank r starts with chunk r of Partition{count, N} (or the
// shape's split); at step
// t (0..N-2) it sends chunk (r-t) mod N to r+1 and receives chunk (r-t-1) mod
// N from r-1 in place, the chunk it forwards at step t+1. Cost: (N-1) steps;
// each rank sends and receives (N-1) chunks, (N-1)/N·n bytes up to
// Partition's rounding (exactly n minus chunk r+1): (N-1)α + (N-1)/N·nβ, no
// reduction. One storing pass of ring_pass.cc (its eager pieces included).
// Any N ≥ 1, any count.

#include "allreduce/algorithms.h"

namespace psar {

Program ring_all_gather_program(const ProgramShape& shape) {
  return ring_pass_program("ring all-gather", shape, /*lag=*/0, /*reduce=*/false);
}

}  // namespace psar
