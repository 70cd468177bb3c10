// ring — the ring reduce-scatter followed by the ring all-gather
// (ring_reduce_scatter.cc, ring_all_gather.cc): in N-1 steps every rank passes
// a running partial sum of one chunk to its right neighbour and adds the one
// arriving from its left, so rank r ends holding the complete sum of chunk r;
// in N-1 more steps the complete chunks travel once around the ring. Cost:
// 2(N-1) steps; each rank sends 2(N-1)/N·n bytes (exactly 2n minus its chunks
// r and r+1 under Partition's rounding), 2(N-1)·n in all, and reduces
// (N-1)/N·n: 2(N-1)α + (N-1)/N·n(2β+γ) — bandwidth-optimal and balanced, but
// with N-1 times the latency term of a tree. Every chunk is summed by exactly
// one rank and copied to the rest, so all ranks hold identical bits. The
// engine streams segments through the whole ring, across the two halves.
// Any N ≥ 1, any count.

#include "allreduce/algorithms.h"

namespace psar {

Program ring_program(const ProgramShape& shape) {
  Program p("ring allreduce", shape.ranks, shape.count);
  const auto same = [](int r) { return r; };
  const int took = p.append(ring_reduce_scatter_program(shape), same, 0, 0);
  p.append(ring_all_gather_program(shape), same, 0, took);
  p.finish();
  return p;
}

// 2(N-1) steps; (N-1)/N·n sent twice and reduced once: 2(N-1)α + (N-1)/N·n(2β+γ).
CostTerms ring_cost(int ranks, int64_t bytes, const AllreduceOptions&) {
  const double share = static_cast<double>(ranks - 1) / ranks * static_cast<double>(bytes);
  return {2.0 * (ranks - 1), 2 * share, share};
}

}  // namespace psar
