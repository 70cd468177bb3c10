#include "allreduce/sharded.h"

#include "allreduce/collectives.h"
#include "allreduce/tags.h"
#include "comm/comm.h"
#include "core/errors.h"

namespace psar {

namespace {
// A program algorithm's pair: each collective planned once per (ranks, count, split).
class ProgramSharded final : public ShardedCollectives {
 public:
  ProgramSharded(const AllreducerEntry& entry, const AllreduceOptions& options)
      : name_(entry.name),
        nodes_(entry, name_ + " reduce-scatter/all-gather"),
        reduce_scatter_(entry.reduce_scatter, collective_options(options),
                        allreduce_tags::kReduceScatter),
        all_gather_(entry.all_gather, collective_options(options), allreduce_tags::kAllGather) {}
  std::string name() const override { return name_; }
  void reduce_scatter(Comm& comm, std::span<float> data,
                      const std::vector<int64_t>& split) override {
    reduce_scatter_.run(comm, data, 0, nodes_.get(comm), split);
  }
  void all_gather(Comm& comm, std::span<float> data, const std::vector<int64_t>& split) override {
    all_gather_.run(comm, data, 0, nodes_.get(comm), split);
  }

 private:
  std::string name_;
  NodeMapCache nodes_;  // one map for both collectives
  ProgramCollective reduce_scatter_, all_gather_;
};
}  // namespace

void check_shards(const std::string& algorithm, int ranks) {
  const AllreducerEntry& e = find_allreducer(algorithm);
  if (!e.shards())
    throw ConfigError("allreduce algorithm '" + algorithm +
                      "' has no reduce-scatter and all-gather to shard with");
  // A generator refuses a group it cannot split (halving_doubling: not 2^k).
  if (e.reduce_scatter) e.reduce_scatter({.ranks = ranks, .count = ranks});
}

std::unique_ptr<ShardedCollectives> make_sharded_collectives(const std::string& algorithm,
                                                             const AllreduceOptions& options) {
  const AllreducerEntry& e = find_allreducer(algorithm);
  if (!e.shards())
    throw ConfigError("allreduce algorithm '" + algorithm +
                      "' has no reduce-scatter and all-gather to shard with");
  if (options.segment_bytes <= 0)
    throw ConfigError(algorithm + " reduce-scatter: segment size must be positive, got " +
                      std::to_string(options.segment_bytes));
  if (e.make_sharded) return e.make_sharded(options);
  return std::make_unique<ProgramSharded>(e, options);
}

}  // namespace psar
