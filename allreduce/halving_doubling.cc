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

#include <vector>

#include "allreduce/algorithms.h"
#include "allreduce/fold.h"
#include "allreduce/partition.h"
#include "allreduce/tags.h"
#include "core/ops.h"

namespace psar {

namespace {

struct Range {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
};

class HalvingDoublingAllreducer final : public Allreducer {
 public:
  std::string name() const override { return "halving_doubling"; }

  void allreduce(Comm& comm, std::span<float> data) override {
    const auto count = static_cast<int64_t>(data.size());
    if (comm.size() == 1 || count == 0) return;
    Comm::OpScope op(comm, "halving-doubling allreduce");
    plan(comm, count);
    const Fold fold(comm.size());
    const int me = comm.rank();
    fold_in(comm, fold, data, std::span<float>(scratch_));
    if (!fold.is_extra(me)) {
      constexpr int tag = allreduce_tags::kHalvingDoubling;
      auto part = [&](Range r) {
        return data.subspan(static_cast<size_t>(r.begin), static_cast<size_t>(r.size()));
      };
      for (const Round& round : rounds_) {  // halving: reduce-scatter
        const auto landing = std::span<float>(scratch_).first(static_cast<size_t>(round.keep.size()));
        comm.sendrecv(round.partner, std::span<const float>(part(round.give)), round.partner,
                      landing, tag);
        ops::add_inplace(part(round.keep).data(), landing.data(), round.keep.size());
      }
      for (auto it = rounds_.rbegin(); it != rounds_.rend(); ++it)  // doubling: all-gather
        comm.sendrecv(it->partner, std::span<const float>(part(it->keep)), it->partner,
                      part(it->give), tag);
    }
    fold_out(comm, fold, data);
  }

 private:
  struct Round {
    int partner;
    Range keep, give;  // halves of the range held before this round
  };

  void plan(const Comm& comm, int64_t count) {
    if (count == count_ && comm.rank() == rank_ && comm.size() == size_) return;
    count_ = count;
    rank_ = comm.rank();
    size_ = comm.size();
    const Fold fold(size_);
    rounds_.clear();
    Range held{0, count};
    for (int d = fold.p2 / 2; d >= 1 && !fold.is_extra(rank_); d /= 2) {
      const Range lower{held.begin, held.begin + Partition{held.size(), 2}.size(0)};
      const Range upper{lower.end, held.end};
      const bool keep_lower = (rank_ & d) == 0;
      rounds_.push_back({rank_ ^ d, keep_lower ? lower : upper, keep_lower ? upper : lower});
      held = rounds_.back().keep;
    }
    // Folding lands a whole vector; halving lands at most the first half.
    scratch_.assign(static_cast<size_t>(count), 0.0f);
  }

  int64_t count_ = -1;
  int rank_ = -1, size_ = 0;
  std::vector<Round> rounds_;
  std::vector<float> scratch_;
};

}  // namespace

// 2L steps (L = log₂p2) moving (p2-1)/p2·n twice and reducing it once:
// 2Lα + (p2-1)/p2·n(2β+γ); folding adds 2α + 2nβ + nγ.
CostTerms halving_doubling_cost(int ranks, int64_t bytes, const AllreduceOptions&) {
  const Fold fold(ranks);
  const int rounds = fold.levels;
  const double n = static_cast<double>(bytes), f = fold.extras > 0 ? 1 : 0;
  const double share = static_cast<double>(fold.p2 - 1) / fold.p2 * n;
  return {2.0 * rounds + 2 * f, 2 * share + 2 * f * n, share + f * n};
}

// A core rank sends, in each halving round, the half it gives away and, in
// the matching doubling round, the half it kept: the whole range it held
// before the round. Ranges halve by Partition's rounding, the lower half the
// larger. Folding: as the butterfly.
int64_t halving_doubling_sent_bytes(int rank, int ranks, int64_t count) {
  const Fold fold(ranks);
  if (fold.is_extra(rank)) return 4 * count;
  int64_t sent = fold.partner(rank) >= 0 ? count : 0, held = count;
  for (int d = fold.p2 / 2; d >= 1; d /= 2) {
    sent += held;
    const int64_t lower = Partition{held, 2}.size(0);
    held = (rank & d) == 0 ? lower : held - lower;
  }
  return 4 * sent;
}

// Fold in, log₂p2 halving rounds (each rank gives away the half it does not
// keep, reduced by the partner), log₂p2 doubling rounds in reverse (each rank
// sends the half it kept, copied by the partner), fold out.
StepList halving_doubling_steps(int ranks, int64_t count, const AllreduceOptions&) {
  StepList list{.algorithm = "halving_doubling", .ranks = ranks, .count = count, .rounds = {}};
  if (ranks == 1 || count == 0) return list;
  const Fold fold(ranks);
  const int first = fold_in_steps(fold, count, list), levels = fold.levels;
  for (int r = 0; r < fold.p2; ++r) {
    Range held{0, count};
    int i = 0;
    for (int d = fold.p2 / 2; d >= 1; d /= 2, ++i) {
      const Range lower{held.begin, held.begin + Partition{held.size(), 2}.size(0)};
      const Range upper{lower.end, held.end};
      const bool keep_lower = (r & d) == 0;
      const Range keep = keep_lower ? lower : upper, give = keep_lower ? upper : lower;
      list.add(first + i, {.src = r, .dst = r ^ d, .offset = give.begin, .count = give.size(),
                           .reduce = true});
      list.add(first + 2 * levels - 1 - i, {.src = r, .dst = r ^ d, .offset = keep.begin,
                                            .count = keep.size(), .reduce = false});
      held = keep;
    }
  }
  fold_out_steps(fold, count, first + 2 * levels, list);
  return list;
}

std::unique_ptr<Allreducer> make_halving_doubling_allreducer(const AllreduceOptions&) {
  return std::make_unique<HalvingDoublingAllreducer>();
}

}  // namespace psar
