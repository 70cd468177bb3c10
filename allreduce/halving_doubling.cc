// halving_doubling — Rabenseifner's allreduce: a reduce-scatter by recursive
// halving followed by an all-gather by recursive doubling, among a power of
// two p2 of ranks. In halving round i (distance d = p2/2, p2/4, …, 1) each
// rank splits its current range in two, keeps the lower half if (r & d) == 0
// and the upper half otherwise, sends the other half to partner r XOR d and
// adds the partner's copy of the kept half: after log₂p2 rounds rank r holds
// the complete sum of a 1/p2 piece. The doubling rounds replay the halving in
// reverse, exchanging complete pieces until every rank holds everything.
// Cost: 2·log₂p2 steps; each rank sends (p2-1)/p2·n twice, 2(p2-1)·n in all;
// 2·log₂p2·α + (p2-1)/p2·n(2β+γ) — the ring's bandwidth term with the
// butterfly's latency term. Each piece is summed by one rank only, so all
// ranks hold identical bits. A non-power-of-two N is folded
// (allreduce/fold.h), adding 2(N-p2)·n bytes, so the total stays
// 2(p2-1)·n + 2(N-p2)·n = 2(N-1)·n, with two more steps and N-p2 idle ranks.
// Any N ≥ 1, any count (ranges split by Partition, so pieces may be empty).

#include <string>

#include "allreduce/algorithms.h"
#include "allreduce/fold.h"
#include "allreduce/partition.h"
#include "core/errors.h"

namespace psar {

// Fold in, log₂p2 halving rounds (each rank gives away the half it does not
// keep, added by the partner), log₂p2 doubling rounds in reverse (each rank
// sends the half it kept, copied by the partner), fold out.
Program halving_doubling_program(const ProgramShape& shape) {
  Program p("halving-doubling allreduce", shape.ranks, shape.count);
  // Whole on one host (one rendezvous per exchange); across hosts in
  // segments, below Open MPI's TCP eager limit (docs/algorithms.md, "Segments").
  p.segmented = shape.spans_nodes();
  const Fold fold(shape.ranks);
  const int first = fold_in(fold, shape.count, p), levels = fold.levels;
  for (int r = 0; r < fold.p2; ++r) {
    int64_t begin = 0, size = shape.count;  // the range held before the round
    int i = 0;
    for (int d = fold.p2 / 2; d >= 1; d /= 2, ++i) {
      const int64_t lower = Partition{size, 2}.size(0);
      const bool keep_lower = (r & d) == 0;
      const int64_t keep = keep_lower ? begin : begin + lower, kept = keep_lower ? lower : size - lower;
      const int64_t give = keep_lower ? begin + lower : begin, given = size - kept;
      p.transfer(first + i, r, r ^ d, give, given, true);
      p.transfer(first + 2 * levels - 1 - i, r, r ^ d, keep, kept, false);
      begin = keep;
      size = kept;
    }
  }
  fold_out(fold, shape.count, first + 2 * levels, p);
  p.finish();
  return p;
}

// 2L steps (L = log₂p2) moving (p2-1)/p2·n twice and reducing it once:
// 2Lα + (p2-1)/p2·n(2β+γ); folding adds 2α + 2nβ + nγ.
CostTerms halving_doubling_cost(int ranks, int64_t bytes, const AllreduceOptions&) {
  const Fold fold(ranks);
  const double n = static_cast<double>(bytes);
  const double share = static_cast<double>(fold.p2 - 1) / fold.p2 * n;
  return CostTerms{2.0 * fold.levels, 2 * share, share} + fold.cost(n);
}

// halving_doubling reduce-scatter and all-gather: the two halves of the
// allreduce above on their own, over the pieces of the shape's layout
// (Partition{count, N}, or its split) instead of halves of halves. In
// halving round i (d = N/2, …, 1) rank r holds pieces [lo, hi), keeps
// [lo, mid) if (r & d) == 0 and [mid, hi) otherwise (mid = (lo+hi)/2), sends
// the elements of the other half to r XOR d and adds the partner's copy of
// the kept half: after log₂N rounds it holds piece r summed — the same
// pairs in the same rounds as the allreduce, so each element is the same
// sum of the same partial sums. The all-gather replays the rounds in
// reverse, each rank sending the pieces it holds to its partner. Cost:
// log₂N steps each; rank r sends n minus piece r in the reduce-scatter and
// the sum of the 2^k-piece blocks that hold r (k = 0..log₂N−1) in the
// all-gather, (N−1)/N·n each with pieces of equal size. N a power of two
// (no fold: an idle rank would own no piece); ConfigError otherwise.
namespace {
int halving_levels(const ProgramShape& shape, const char* what) {
  const Fold fold(shape.ranks);
  if (fold.extras > 0)
    throw ConfigError(std::string("halving_doubling ") + what +
                      " needs a power-of-two number of ranks, got " +
                      std::to_string(shape.ranks) + " (choose ring, or a group of 2^k ranks)");
  return fold.levels;
}

// Calls f(round, rank, partner, give, given, keep, kept) for every halving round.
template <class F>
void for_halving(const ProgramShape& shape, F f) {
  const int N = shape.ranks;
  for (int r = 0; r < N; ++r) {
    int lo = 0, hi = N, round = 0;
    for (int d = N / 2; d >= 1; d /= 2, ++round) {
      const int mid = (lo + hi) / 2;
      const bool keep_lower = (r & d) == 0;
      const int klo = keep_lower ? lo : mid, khi = keep_lower ? mid : hi;
      const int glo = keep_lower ? mid : lo, ghi = keep_lower ? hi : mid;
      f(round, r, r ^ d, shape.piece_offset(glo), shape.piece_offset(ghi) - shape.piece_offset(glo),
        shape.piece_offset(klo), shape.piece_offset(khi) - shape.piece_offset(klo));
      lo = klo;
      hi = khi;
    }
  }
}
}  // namespace

Program halving_doubling_reduce_scatter_program(const ProgramShape& shape) {
  halving_levels(shape, "reduce-scatter");
  Program p("halving-doubling reduce-scatter", shape.ranks, shape.count);
  p.segmented = false;
  for_halving(shape, [&](int round, int r, int partner, int64_t give, int64_t given, int64_t,
                         int64_t) { p.transfer(round, r, partner, give, given, true); });
  p.finish();
  return p;
}

Program halving_doubling_all_gather_program(const ProgramShape& shape) {
  const int levels = halving_levels(shape, "all-gather");
  Program p("halving-doubling all-gather", shape.ranks, shape.count);
  p.segmented = false;
  for_halving(shape, [&](int round, int r, int partner, int64_t, int64_t, int64_t keep,
                         int64_t kept) {
    p.transfer(levels - 1 - round, r, partner, keep, kept, false);
  });
  p.finish();
  return p;
}

}  // namespace psar
