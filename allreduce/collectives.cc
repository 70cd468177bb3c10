#include "allreduce/collectives.h"

#include <cstring>
#include <iterator>

#include "allreduce/algorithms.h"
#include "allreduce/tags.h"
#include "core/errors.h"

namespace psar {

namespace {
const CollectiveEntry kCollectives[] = {
    {"ring_reduce_scatter", CollectiveKind::kReduceScatter, &ring_reduce_scatter_program,
     "N-1 ring steps, each rank ends with the sum of its piece"},
    {"ring_all_gather", CollectiveKind::kAllGather, &ring_all_gather_program,
     "N-1 ring steps, each rank's piece to every rank"},
    {"tree_broadcast", CollectiveKind::kBroadcast, &tree_broadcast_program,
     "the root's vector down the binary tree, pipelined"},
    {"tree_reduce", CollectiveKind::kReduce, &tree_reduce_program,
     "the sum up the binary tree to the root, pipelined"},
};

CollectiveOptions checked(CollectiveOptions options, const char* what) {
  if (options.segment_bytes <= 0)
    throw ConfigError(std::string(what) + " segment size must be positive, got " +
                      std::to_string(options.segment_bytes));
  return options;
}
}  // namespace

std::span<const CollectiveEntry> collective_registry() { return kCollectives; }

ProgramCollective::ProgramCollective(ProgramFn program, CollectiveOptions options, int tag)
    : fn_(program), options_(options), tag_(tag) {}

void ProgramCollective::run(Comm& comm, std::span<float> data, int root,
                            const std::vector<int>& node, const std::vector<int64_t>& split) {
  // The plan stands while the shape does (compared in place: no copy of the
  // node map or the split per call).
  const bool same = planned_ && planned_rank_ == comm.rank() && shape_.ranks == comm.size() &&
                    shape_.count == static_cast<int64_t>(data.size()) && shape_.root == root &&
                    shape_.node == node && shape_.split == split;
  if (!same) {
    const ProgramShape shape{.ranks = comm.size(), .count = static_cast<int64_t>(data.size()),
                             .segment_bytes = options_.segment_bytes, .dtype = options_.dtype,
                             .root = root, .node = node, .split = split};
    PSAR_CHECK(0 <= root && root < comm.size(), "collective root ", root, " outside ",
               comm.size(), " ranks");
    program_ = fn_(shape);
    engine_.plan(program_, comm.rank(),
                 {.segment_bytes = options_.segment_bytes, .dtype = options_.dtype,
                  .accumulate_in_dtype = options_.accumulate_in_dtype, .tag = tag_});
    shape_ = shape;
    planned_rank_ = comm.rank();
    planned_ = true;
  }
  Comm::OpScope op(comm, program_.name);
  engine_.run(comm, data);
}

RingReduceScatter::RingReduceScatter(CollectiveOptions options)
    : run_(&ring_reduce_scatter_program, checked(options, "reduce-scatter"),
           allreduce_tags::kReduceScatter) {}

void RingReduceScatter::reduce_scatter(Comm& comm, std::span<float> data) { run_.run(comm, data); }

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

RingAllGather::RingAllGather(CollectiveOptions options)
    : run_(&ring_all_gather_program, checked(options, "all-gather"), allreduce_tags::kAllGather) {}

void RingAllGather::all_gather(Comm& comm, std::span<float> data) { run_.run(comm, data); }

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

TreeBroadcast::TreeBroadcast(CollectiveOptions options)
    : run_(&tree_broadcast_program, checked(options, "broadcast"), allreduce_tags::kBroadcast) {}

void TreeBroadcast::broadcast(Comm& comm, std::span<float> data, int root) {
  run_.run(comm, data, root);
}

TreeReduce::TreeReduce(CollectiveOptions options)
    : run_(&tree_reduce_program, checked(options, "reduce"), allreduce_tags::kReduce) {}

void TreeReduce::reduce(Comm& comm, std::span<float> data, int root) { run_.run(comm, data, root); }

}  // namespace psar
