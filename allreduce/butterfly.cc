// butterfly — recursive doubling: in round k = 0..log₂N-1 every rank swaps
// its whole running sum with partner rank XOR 2^k and adds what it receives,
// so after log₂N rounds each holds the sum of all. Cost: log₂N steps, each
// rank sends n·log₂N bytes, N·n·log₂N in all (the textbook's N·M·log N), and
// reduces n·log₂N: log₂N·(α + nβ + nγ) — the fewest steps of any algorithm
// here, hence the choice for small vectors where α dominates, and the most
// bytes, hence the worst for large ones. Partners add the same two values
// (a+b on one side, b+a on the other: IEEE addition is commutative, so the
// bits agree on every rank; only the payloads of two different NaNs could
// differ). A non-power-of-two N is folded (allreduce/fold.h): the N-p2 extra
// ranks add in before and receive the result after, costing 2(N-p2)·n bytes
// and two steps more. Any N ≥ 1, any count.
//
// Vectors up to kEagerPiecesUpTo are exchanged in eager pieces, all in flight
// together (allreduce/eager.h): a 4 KiB vector travels as a 4032-byte and a
// 64-byte piece instead of one message that waits for a rendezvous. Larger
// ones go in segments, and the engine starts round k+1 on a segment as soon
// as round k has added it.

#include "allreduce/algorithms.h"
#include "allreduce/eager.h"
#include "allreduce/fold.h"

namespace psar {

// Fold in (round 0 if N is not a power of two), log₂p2 swaps of the whole
// vector, fold out.
Program butterfly_program(const ProgramShape& shape) {
  Program p("butterfly allreduce", shape.ranks, shape.count);
  // Whole on one host (one rendezvous per exchange); across hosts in
  // segments, below Open MPI's TCP eager limit (docs/algorithms.md, "Segments").
  p.segmented = shape.spans_nodes();
  p.eager_up_to = kEagerPiecesUpTo;
  const Fold fold(shape.ranks);
  int round = fold_in(fold, shape.count, p);
  for (int distance = 1; distance < fold.p2; distance *= 2, ++round)
    for (int r = 0; r < fold.p2; ++r) p.transfer(round, r, r ^ distance, 0, shape.count, true);
  fold_out(fold, shape.count, round, p);
  p.finish();
  return p;
}

// L = log₂p2 rounds of the whole vector: L(α + nβ + nγ); folding (N not a
// power of two) adds 2α + 2nβ + nγ.
CostTerms butterfly_cost(int ranks, int64_t bytes, const AllreduceOptions&) {
  const Fold fold(ranks);
  const double levels = fold.levels, n = static_cast<double>(bytes);
  return CostTerms{levels, levels * n, levels * n} + fold.cost(n);
}

}  // namespace psar
