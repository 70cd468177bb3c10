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
// 64-byte piece instead of one message that waits for a rendezvous.

#include <algorithm>
#include <vector>

#include "allreduce/algorithms.h"
#include "allreduce/eager.h"
#include "allreduce/fold.h"
#include "allreduce/tags.h"
#include "core/ops.h"

namespace psar {

namespace {

class ButterflyAllreducer final : public Allreducer {
 public:
  std::string name() const override { return "butterfly"; }

  void allreduce(Comm& comm, std::span<float> data) override {
    const auto count = static_cast<int64_t>(data.size());
    if (comm.size() == 1 || count == 0) return;
    Comm::OpScope op(comm, "butterfly allreduce");
    if (static_cast<int64_t>(scratch_.size()) != count) scratch_.assign(data.size(), 0.0f);
    const std::span<float> scratch(scratch_);
    const Fold fold(comm.size());
    const int me = comm.rank();
    try {
      fold_in(comm, fold, data, scratch);
      if (!fold.is_extra(me)) {
        for (int distance = 1; distance < fold.p2; distance *= 2) {
          exchange(comm, me ^ distance, data, scratch);
          ops::add_inplace(data.data(), scratch.data(), count);
        }
      }
      fold_out(comm, fold, data);
    } catch (...) {
      requests_.clear();  // withdraw what is still posted: `data` may not outlive us
      throw;
    }
  }

 private:
  // Sends `data` to `partner` and receives the partner's into `scratch`.
  void exchange(Comm& comm, int partner, std::span<const float> data, std::span<float> scratch) {
    constexpr int tag = allreduce_tags::kButterfly;
    const auto count = static_cast<int64_t>(data.size());
    constexpr auto kFloat = static_cast<int64_t>(sizeof(float));
    const int64_t piece = count * kFloat <= kEagerPiecesUpTo ? kEagerPieceBytes / kFloat : count;
    const auto pieces = static_cast<size_t>((count + piece - 1) / piece);
    requests_.resize(2 * pieces);
    for (size_t k = 0; k < pieces; ++k) {
      const auto at = static_cast<size_t>(k * piece);
      const auto len = static_cast<size_t>(std::min(piece, count - static_cast<int64_t>(at)));
      requests_[k] = comm.irecv(partner, scratch.subspan(at, len), tag);
      requests_[pieces + k] = comm.isend(partner, data.subspan(at, len), tag);
    }
    wait_all(requests_);
  }

  std::vector<float> scratch_;  // the partner's running sum
  std::vector<Request> requests_;
};

}  // namespace

// L = log₂p2 rounds of the whole vector: L(α + nβ + nγ); folding (N not a
// power of two) adds 2α + 2nβ + nγ.
CostTerms butterfly_cost(int ranks, int64_t bytes, const AllreduceOptions&) {
  const Fold fold(ranks);
  const int rounds = fold.levels;
  const double n = static_cast<double>(bytes), f = fold.extras > 0 ? 1 : 0;
  return {rounds + 2 * f, rounds * n + 2 * f * n, rounds * n + f * n};
}

// The whole vector once per round; a folding partner also sends the result
// back, an extra rank only its vector.
int64_t butterfly_sent_bytes(int rank, int ranks, int64_t count) {
  const Fold fold(ranks);
  if (fold.is_extra(rank)) return 4 * count;
  const int rounds = fold.levels;
  return 4 * count * (rounds + (fold.partner(rank) >= 0 ? 1 : 0));
}

// Fold in (round 0 if N is not a power of two), log₂p2 swaps of the whole
// vector, fold out.
StepList butterfly_steps(int ranks, int64_t count, const AllreduceOptions&) {
  StepList list{.algorithm = "butterfly", .ranks = ranks, .count = count, .rounds = {}};
  if (ranks == 1 || count == 0) return list;
  const Fold fold(ranks);
  int round = fold_in_steps(fold, count, list);
  for (int distance = 1; distance < fold.p2; distance *= 2, ++round)
    for (int r = 0; r < fold.p2; ++r)
      list.add(round, {.src = r, .dst = r ^ distance, .offset = 0, .count = count, .reduce = true});
  fold_out_steps(fold, count, round, list);
  return list;
}

std::unique_ptr<Allreducer> make_butterfly_allreducer(const AllreduceOptions&) {
  return std::make_unique<ButterflyAllreducer>();
}

}  // namespace psar
