// ring reduce-scatter — ranks form a ring r -> r+1 and the vector is cut into
// N chunks by Partition{count, N} (or the shape's split). At step s (0..N-2) rank r sends its running
// partial sum of chunk (r-s-1) mod N to r+1 and adds the partial sum of chunk
// (r-s-2) mod N arriving from r-1 — the chunk it forwards at step s+1, which
// is what lets segments stream (the engine forwards a segment as soon as it is
// added). After N-1 steps rank r holds the complete sum of chunk r. Cost:
// (N-1) steps; each rank sends and receives (N-1) chunks, (N-1)/N·n bytes up
// to Partition's one-element rounding (exactly n minus chunk r, which it keeps), and adds as
// many: (N-1)α + (N-1)/N·n(β+γ). One reducing pass of ring_pass.cc (its
// eager pieces included). Any N ≥ 1, any count.

#include "allreduce/algorithms.h"

namespace psar {

Program ring_reduce_scatter_program(const ProgramShape& shape) {
  return ring_pass_program("ring reduce-scatter", shape, /*lag=*/1, /*reduce=*/true);
}

}  // namespace psar
