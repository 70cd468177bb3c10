// ring — reduce-scatter then all-gather around the ring r -> r+1
// (allreduce/ring_pipeline.h has the schedule). The vector of n bytes is cut
// into N chunks; in N-1 steps every rank passes a running partial sum of one
// chunk to its right neighbour and adds the one arriving from its left, so
// rank r ends holding the complete sum of chunk r; in N-1 more steps the
// complete chunks travel once around the ring. Cost: 2(N-1) steps; each rank
// sends 2(N-1)/N·n bytes (exactly 2n minus its chunks r and r+1 under
// Partition's rounding), 2(N-1)·n in all, and reduces (N-1)/N·n:
// 2(N-1)α + (N-1)/N·n(2β+γ) — bandwidth-optimal and balanced, but with N-1
// times the latency term of a tree. Every chunk is summed by exactly one rank
// and copied to the rest, so all ranks hold identical bits. Chunks are cut
// into segments that stream through the ring (a segment is forwarded as soon
// as it is reduced, the next is in flight meanwhile). Any N ≥ 1, any count.

#include "allreduce/algorithms.h"
#include "allreduce/partition.h"
#include "allreduce/ring_pipeline.h"
#include "allreduce/tags.h"
#include "core/errors.h"

namespace psar {

namespace {

class RingAllreducer final : public Allreducer {
 public:
  explicit RingAllreducer(const AllreduceOptions& options) : options_(options) {}
  std::string name() const override { return "ring"; }

  void allreduce(Comm& comm, std::span<float> data) override {
    Comm::OpScope op(comm, "ring allreduce");
    ring_.plan(comm, static_cast<int64_t>(data.size()), options_.segment_bytes);
    ring_.run(comm, data, 0, 2 * (comm.size() - 1), allreduce_tags::kRing);
  }

 private:
  AllreduceOptions options_;
  RingPipeline ring_;
};

}  // namespace

// 2(N-1) steps; (N-1)/N·n sent twice and reduced once: 2(N-1)α + (N-1)/N·n(2β+γ).
CostTerms ring_cost(int ranks, int64_t bytes, const AllreduceOptions&) {
  const double share = static_cast<double>(ranks - 1) / ranks * static_cast<double>(bytes);
  return {2.0 * (ranks - 1), 2 * share, share};
}

// Rank r reduces every chunk but r (which it ends owning) and forwards every
// chunk but r+1 (the one it receives last): 2n less those two chunks.
int64_t ring_sent_bytes(int rank, int ranks, int64_t count) {
  if (ranks == 1) return 0;
  const Partition chunks{count, ranks};
  return 4 * (2 * count - chunks.size(rank) - chunks.size((rank + 1) % ranks));
}

StepList ring_steps(int ranks, int64_t count, const AllreduceOptions&) {
  return ring_schedule_steps("ring", ranks, count, 0, 2 * (ranks - 1));
}

std::unique_ptr<Allreducer> make_ring_allreducer(const AllreduceOptions& options) {
  if (options.segment_bytes <= 0)
    throw ConfigError("ring allreduce: segment size must be positive, got " +
                      std::to_string(options.segment_bytes));
  return std::make_unique<RingAllreducer>(options);
}

}  // namespace psar
