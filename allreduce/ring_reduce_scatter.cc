// ring reduce-scatter — the first N-1 steps of the ring schedule
// (allreduce/ring_pipeline.h): at step s rank r sends its running partial sum
// of chunk (r-s-1) mod N to r+1 and adds the partial sum of chunk (r-s-2) mod N
// that arrives from r-1, so after N-1 steps rank r holds the complete sum of
// chunk r. Cost: (N-1) steps; each rank sends and receives (N-1) chunks, i.e.
// (N-1)/N·n bytes up to the one-element rounding of Partition, and adds as
// many: (N-1)α + (N-1)/N·n(β+γ). Segmented and pipelined like the ring
// allreduce. Same count on every rank; any count ≥ 0 and any N ≥ 1.

#include <cstring>

#include "allreduce/collectives.h"
#include "allreduce/ring_pipeline.h"
#include "allreduce/tags.h"
#include "core/errors.h"

namespace psar {

RingReduceScatter::RingReduceScatter(CollectiveOptions options)
    : options_(options), ring_(std::make_unique<RingPipeline>()) {
  if (options_.segment_bytes <= 0)
    throw ConfigError("reduce-scatter segment size must be positive, got " +
                      std::to_string(options_.segment_bytes));
}

RingReduceScatter::~RingReduceScatter() = default;

void RingReduceScatter::reduce_scatter(Comm& comm, std::span<float> data) {
  Comm::OpScope op(comm, "ring reduce-scatter");
  ring_->plan(comm, static_cast<int64_t>(data.size()), options_.segment_bytes);
  ring_->run(comm, data, 0, comm.size() - 1, allreduce_tags::kReduceScatter);
}

void RingReduceScatter::reduce_scatter(Comm& comm, std::span<const float> input,
                                       std::span<float> output) {
  const Partition pieces{static_cast<int64_t>(input.size()), comm.size()};
  PSAR_CHECK(static_cast<int64_t>(output.size()) == pieces.size(comm.rank()),
             "reduce-scatter output holds ", output.size(), " floats, piece ", comm.rank(),
             " of ", input.size(), " over ", comm.size(), " ranks holds ",
             pieces.size(comm.rank()));
  work_.assign(input.begin(), input.end());
  reduce_scatter(comm, std::span<float>(work_));
  if (!output.empty())
    std::memcpy(output.data(), work_.data() + pieces.offset(comm.rank()),
                output.size() * sizeof(float));
}

StepList ring_reduce_scatter_steps(int ranks, int64_t count) {
  return ring_schedule_steps("ring reduce-scatter", ranks, count, 0, ranks - 1);
}

}  // namespace psar
