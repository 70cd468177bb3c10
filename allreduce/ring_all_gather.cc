// ring all-gather — the last N-1 steps of the ring schedule
// (allreduce/ring_pipeline.h): rank r starts with chunk r; at step t it sends
// chunk (r-t) mod N to r+1 and receives chunk (r-t-1) mod N from r-1 straight
// into place, forwarding it at the next step. Cost: (N-1) steps; each rank
// sends and receives (N-1) chunks, (N-1)/N·n bytes up to the one-element
// rounding of Partition: (N-1)α + (N-1)/N·nβ, no reduction. Segmented and
// pipelined like the ring allreduce. Same count on every rank.

#include <cstring>

#include "allreduce/collectives.h"
#include "allreduce/ring_pipeline.h"
#include "allreduce/tags.h"
#include "core/errors.h"

namespace psar {

RingAllGather::RingAllGather(CollectiveOptions options)
    : options_(options), ring_(std::make_unique<RingPipeline>()) {
  if (options_.segment_bytes <= 0)
    throw ConfigError("all-gather segment size must be positive, got " +
                      std::to_string(options_.segment_bytes));
}

RingAllGather::~RingAllGather() = default;

void RingAllGather::all_gather(Comm& comm, std::span<float> data) {
  Comm::OpScope op(comm, "ring all-gather");
  const int n = comm.size();
  ring_->plan(comm, static_cast<int64_t>(data.size()), options_.segment_bytes);
  ring_->run(comm, data, n - 1, 2 * (n - 1), allreduce_tags::kAllGather);
}

void RingAllGather::all_gather(Comm& comm, std::span<const float> input,
                               std::span<float> output) {
  const Partition pieces{static_cast<int64_t>(output.size()), comm.size()};
  PSAR_CHECK(static_cast<int64_t>(input.size()) == pieces.size(comm.rank()),
             "all-gather input holds ", input.size(), " floats, piece ", comm.rank(), " of ",
             output.size(), " over ", comm.size(), " ranks holds ", pieces.size(comm.rank()));
  if (!input.empty())
    std::memcpy(output.data() + pieces.offset(comm.rank()), input.data(),
                input.size() * sizeof(float));
  all_gather(comm, output);
}

StepList ring_all_gather_steps(int ranks, int64_t count) {
  return ring_schedule_steps("ring all-gather", ranks, count, ranks - 1, 2 * (ranks - 1));
}

}  // namespace psar
