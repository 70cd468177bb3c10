#pragma once
// Folding a world of N ranks onto its largest power of two p2 ≤ N, for the
// algorithms that pair ranks by XOR (butterfly, halving-doubling). The
// e = N - p2 extra ranks p2..N-1 each hand their whole vector to rank r - p2,
// which adds it to its own (fold_in); the power-of-two algorithm runs among
// ranks 0..p2-1; each partner then sends the result back (fold_out). Cost:
// two extra steps and 2·e·n bytes in all; the extra ranks idle meanwhile.

#include <cstdint>

#include "allreduce/allreducer.h"
#include "allreduce/program.h"

namespace psar {

struct Fold {
  int p2 = 1;      // ranks in the power-of-two core
  int extras = 0;  // N - p2
  int levels = 0;  // log₂ p2: the rounds of a butterfly among the core

  explicit Fold(int size);
  bool is_extra(int rank) const { return rank >= p2; }
  // The rank this one exchanges with when folding, or -1 if none.
  int partner(int rank) const;
  // What folding adds to an allreduce of `bytes`: 2α + 2nβ + nγ (the
  // busiest pair: n in, summed, n back), nothing for a power of two.
  CostTerms cost(double bytes) const;
};

// Round 0 (if there are extra ranks): each extra rank's vector, added by its
// partner. Returns the first round after it.
int fold_in(const Fold& fold, int64_t count, Program& program);
// Round `round` (if there are extra ranks): the result back to each extra rank.
void fold_out(const Fold& fold, int64_t count, int round, Program& program);

}  // namespace psar
