// naive — all-to-all: every rank sends its whole vector to each of the N-1
// others and adds the N vectors itself, in rank order x0 + x1 + … + x(N-1),
// so every rank performs the same additions in the same order and holds
// identical bits. Cost: one step of N-1 concurrent messages; each rank sends
// and receives (N-1)·n bytes, N(N-1)·n in all (the seed's N²·M), and reduces
// (N-1)·n: (N-1)α + (N-1)·n(β+γ) when sends serialize on a rank's link — the
// volume grows with N², which is the scalability problem the other algorithms
// solve. Receives are double-buffered (scratch 3n: two landing slots and the
// accumulator), so memory does not grow with N. Any N ≥ 1, any count.

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
    if (static_cast<int64_t>(acc_.size()) != count) {
      acc_.assign(static_cast<size_t>(count), 0.0f);
      for (auto& s : slots_) s.assign(static_cast<size_t>(count), 0.0f);
    }
    constexpr int tag = allreduce_tags::kNaive;
    std::vector<Request> sends;
    for (int peer = 0; peer < n; ++peer)
      if (peer != me) sends.push_back(comm.isend(peer, std::span<const float>(data), tag));

    // The k-th other rank (in rank order) lands in slot k % 2.
    std::vector<int> others;
    for (int peer = 0; peer < n; ++peer)
      if (peer != me) others.push_back(peer);
    Request recvs[2];
    auto post = [&](size_t k) {
      if (k < others.size())
        recvs[k % 2] = comm.irecv(others[k], std::span<float>(slots_[k % 2]), tag);
    };
    post(0);
    post(1);
    // term(i, k): rank i's vector; k receives the index into `others` of the
    // slot it occupies (-1 for our own), to be released once added.
    int arrived = 0;
    auto term = [&](int i, int& k) -> const float* {
      if (i == me) {
        k = -1;
        return data.data();
      }
      k = arrived++;
      recvs[k % 2].wait();
      return slots_[k % 2].data();
    };
    auto release = [&](int k) {
      if (k >= 0) post(static_cast<size_t>(k) + 2);
    };

    int k0 = 0, k1 = 0;
    const float* x0 = term(0, k0);
    const float* x1 = term(1, k1);
    ops::add(acc_.data(), x0, x1, count);
    release(k0);
    release(k1);
    for (int i = 2; i < n; ++i) {
      int k = 0;
      const float* x = term(i, k);
      ops::add_inplace(acc_.data(), x, count);
      release(k);
    }
    wait_all(sends);
    std::memcpy(data.data(), acc_.data(), static_cast<size_t>(count) * sizeof(float));
  }

 private:
  std::vector<float> acc_;
  std::vector<float> slots_[2];
};

}  // namespace

std::unique_ptr<Allreducer> make_naive_allreducer(const AllreduceOptions&) {
  return std::make_unique<NaiveAllreducer>();
}

}  // namespace psar
