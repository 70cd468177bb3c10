#include "allreduce/fold.h"

namespace psar {

Fold::Fold(int size) {
  while (p2 * 2 <= size) {
    p2 *= 2;
    ++levels;
  }
  extras = size - p2;
}

int Fold::partner(int rank) const {
  if (is_extra(rank)) return rank - p2;
  return rank < extras ? rank + p2 : -1;
}

CostTerms Fold::cost(double bytes) const {
  if (extras == 0) return {};
  return {2, 2 * bytes, bytes};
}

int fold_in(const Fold& fold, int64_t count, Program& program) {
  if (fold.extras == 0) return 0;
  for (int e = fold.p2; e < fold.p2 + fold.extras; ++e)
    program.transfer(0, e, fold.partner(e), 0, count, true);
  return 1;
}

void fold_out(const Fold& fold, int64_t count, int round, Program& program) {
  for (int e = fold.p2; e < fold.p2 + fold.extras; ++e)
    program.transfer(round, fold.partner(e), e, 0, count, false);
}

}  // namespace psar
