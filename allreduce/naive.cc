// naive — all-to-all: every rank sends its whole vector to each of the N-1
// others and adds the N vectors itself, in rank order x0 + x1 + … + x(N-1),
// so every rank performs the same additions in the same order and holds
// identical bits. Cost: one step of N-1 concurrent messages; each rank sends
// and receives (N-1)·n bytes, N(N-1)·n in all (the textbook's N²·M), and reduces
// (N-1)·n: (N-1)α + (N-1)·n(β+γ) when sends serialize on a rank's link — the
// volume grows with N², which is the scalability problem the other algorithms
// solve. Messages go in shifted order (rank r sends to r+1, r+2, … and
// receives from r-1, r-2, …), so no receiver gets all N-1 at once; every
// vector lands in its own slot (scratch N·n: N-1 slots and the accumulator —
// memory grows with N too), and the sum waits for all of them. Any N ≥ 1,
// any count.

#include <cstring>
#include <vector>

#include "allreduce/algorithms.h"
#include "allreduce/tags.h"
#include "core/ops.h"

namespace psar {

namespace {

class NaiveAllreducer final : public Allreducer {
 public:
  std::string name() const override { return "naive"; }

  void allreduce(Comm& comm, std::span<float> data) override {
    const int n = comm.size(), me = comm.rank();
    const auto count = static_cast<int64_t>(data.size());
    if (n == 1 || count == 0) return;
    Comm::OpScope op(comm, "naive allreduce");
    if (static_cast<int64_t>(acc_.size()) != count || slots_.size() != static_cast<size_t>(n) ||
        !slots_[static_cast<size_t>(me)].empty()) {
      acc_.assign(static_cast<size_t>(count), 0.0f);
      slots_.assign(static_cast<size_t>(n), {});
      for (int peer = 0; peer < n; ++peer)
        if (peer != me) slots_[static_cast<size_t>(peer)].assign(static_cast<size_t>(count), 0.0f);
    }
    constexpr int tag = allreduce_tags::kNaive;
    // Shifted order: at position k every rank sends to me + k and receives
    // from me - k, so each rank receives exactly one message per position
    // instead of all N-1 converging on rank 0 first, and completes its
    // receives in the order they arrive (which a NIC, real or emulated, needs
    // to serialize them as they came).
    std::vector<Request> recvs, sends;
    for (int k = 1; k < n; ++k) {
      const int from = (me - k + n) % n;
      recvs.push_back(comm.irecv(from, std::span<float>(slots_[static_cast<size_t>(from)]), tag));
    }
    for (int k = 1; k < n; ++k)
      sends.push_back(comm.isend((me + k) % n, std::span<const float>(data), tag));
    wait_all(recvs);
    // The same additions in the same (rank) order on every rank.
    auto term = [&](int i) -> const float* {
      return i == me ? data.data() : slots_[static_cast<size_t>(i)].data();
    };
    ops::add(acc_.data(), term(0), term(1), count);
    for (int i = 2; i < n; ++i) ops::add_inplace(acc_.data(), term(i), count);
    wait_all(sends);
    std::memcpy(data.data(), acc_.data(), static_cast<size_t>(count) * sizeof(float));
  }

 private:
  std::vector<float> acc_;
  std::vector<std::vector<float>> slots_;  // one landing slot per other rank
};

}  // namespace

// (N-1) messages of n bytes, each added: (N-1)α + (N-1)·n·(β+γ).
CostTerms naive_cost(int ranks, int64_t bytes, const AllreduceOptions&) {
  const double peers = ranks - 1, n = static_cast<double>(bytes);
  return {peers, peers * n, peers * n};
}

// The whole vector to each of the N-1 others.
int64_t naive_sent_bytes(int, int ranks, int64_t count) { return (ranks - 1) * count * 4; }

// One round: the whole vector from every rank to every other, each added.
StepList naive_steps(int ranks, int64_t count, const AllreduceOptions&) {
  StepList list{.algorithm = "naive", .ranks = ranks, .count = count, .rounds = {}};
  if (ranks == 1 || count == 0) return list;
  for (int r = 0; r < ranks; ++r)
    for (int k = 1; k < ranks; ++k)
      list.add(0, {.src = r, .dst = (r + k) % ranks, .offset = 0, .count = count, .reduce = true});
  return list;
}

std::unique_ptr<Allreducer> make_naive_allreducer(const AllreduceOptions&) {
  return std::make_unique<NaiveAllreducer>();
}

}  // namespace psar
