#include "ps/cost.h"

#include <algorithm>
#include <string>

#include "core/errors.h"
#include "ps/sharding.h"

namespace psar::ps {

PsCost ps_cost(int workers, int servers, int64_t bytes, int64_t chunk_bytes, int64_t shard_chunks,
               int workers_per_nic) {
  if (workers < 1) throw ConfigError("ps cost: need at least one worker, got " + std::to_string(workers));
  if (workers_per_nic < 1 || workers_per_nic > workers)
    throw ConfigError("ps cost: " + std::to_string(workers_per_nic) + " workers per NIC with " +
                      std::to_string(workers) + " workers");
  if (bytes < 0 || bytes % 4 != 0)
    throw ConfigError("ps cost: " + std::to_string(bytes) + " bytes is not a whole number of floats");
  const std::vector<KeyRange> plan = plan_shards(bytes / 4, servers);  // ConfigError for S < 1
  int64_t shard = 0;
  for (const KeyRange& r : plan) shard = std::max(shard, r.size());
  const int64_t chunk = std::min(shard, plan_chunk_floats(chunk_bytes, shard_chunks, plan, workers));
  PsCost c;
  c.shard_bytes = 4 * shard;
  c.chunk_bytes = 4 * chunk;
  const double busiest = std::max(static_cast<double>(workers) * static_cast<double>(c.shard_bytes),
                                  static_cast<double>(workers_per_nic) * static_cast<double>(bytes));
  const double fill =
      static_cast<double>(std::max(workers, servers)) * static_cast<double>(c.chunk_bytes);
  c.alpha = 2;
  c.beta = busiest + fill;
  c.sent_total = 2 * static_cast<int64_t>(workers) * bytes;
  c.sent_busiest = std::max(bytes, static_cast<int64_t>(workers) * c.shard_bytes);
  return c;
}

}  // namespace psar::ps
