#include "allreduce/fold.h"

#include "allreduce/tags.h"
#include "core/ops.h"

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

void fold_in(Comm& comm, const Fold& fold, std::span<float> data, std::span<float> scratch) {
  const int peer = fold.partner(comm.rank());
  if (peer < 0) return;
  if (fold.is_extra(comm.rank())) {
    comm.send(peer, std::span<const float>(data), allreduce_tags::kFoldIn);
  } else {
    comm.recv(peer, scratch, allreduce_tags::kFoldIn);
    ops::add_inplace(data.data(), scratch.data(), static_cast<int64_t>(data.size()));
  }
}

void fold_out(Comm& comm, const Fold& fold, std::span<float> data) {
  const int peer = fold.partner(comm.rank());
  if (peer < 0) return;
  if (fold.is_extra(comm.rank()))
    comm.recv(peer, data, allreduce_tags::kFoldOut);
  else
    comm.send(peer, std::span<const float>(data), allreduce_tags::kFoldOut);
}

int fold_in_steps(const Fold& fold, int64_t count, StepList& list) {
  if (fold.extras == 0) return 0;
  for (int e = fold.p2; e < fold.p2 + fold.extras; ++e)
    list.add(0, {.src = e, .dst = fold.partner(e), .offset = 0, .count = count, .reduce = true});
  return 1;
}

void fold_out_steps(const Fold& fold, int64_t count, int round, StepList& list) {
  for (int e = fold.p2; e < fold.p2 + fold.extras; ++e)
    list.add(round, {.src = fold.partner(e), .dst = e, .offset = 0, .count = count, .reduce = false});
}

}  // namespace psar
