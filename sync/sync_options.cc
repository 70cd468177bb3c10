#include "sync/sync_options.h"

#include <algorithm>

#include "core/errors.h"
#include "ps/curve.h"
#include "ps/sharding.h"

namespace psar {

ps::PsOptions ps_options(const Config& config, const OptimizerOptions& optimizer) {
  ps::PsOptions o;
  o.servers = static_cast<int>(config.get_int("ps.servers"));
  o.colocated = config.get_bool("ps.colocated");
  o.server.consistency = ps::parse_consistency(config.get_string("ps.consistency"));
  o.server.staleness = static_cast<int>(config.get_int("ps.staleness"));
  o.server.backup_workers = static_cast<int>(config.get_int("ps.backup_workers"));
  o.server.continue_on_failure = config.get_string("ps.on_worker_failure") == "continue";
  if (o.server.staleness < 0)
    throw ConfigError("ps.staleness: must be >= 0, got " + std::to_string(o.server.staleness));
  o.interface = config.get_string("ps.interface");
  o.align_shards = config.get_bool("ps.align_shards");
  o.chunk_bytes = config.get_bytes("ps.chunk_bytes");
  o.shard_chunks = config.get_int("ps.shard_chunks");
  ps::chunk_floats_for(o.chunk_bytes, 0, o.shard_chunks);  // a ConfigError now rather than at launch
  const double timeout = config.get_duration("ps.timeout");
  if (!(timeout > 0))
    throw ConfigError("ps.timeout: must be positive, got " + std::to_string(timeout) + " s");
  o.set_timeout(timeout);
  o.server.security = ps::parse_security(config.get_string("ps.security"));
  if (o.server.security == ps::Security::kCurve) ps::require_curve();
  o.server.optimizer = optimizer;
  return o;
}

SyncOptions sync_options(const Config& c) {
  SyncOptions o;
  o.backend = c.get_string("sync.backend");
  o.algorithm = c.get_string("sync.algorithm");
  o.allreduce = allreduce_options(c);
  o.zero = static_cast<int>(c.get_int("sync.zero"));
  const auto floats = [&](const char* key) {
    return std::max<int64_t>(1, c.get_bytes(key) / static_cast<int64_t>(sizeof(float)));
  };
  o.priority = c.get_string("sync.priority");
  o.overlap = {c.get_bool("sync.overlap"), floats("sync.bucket_bytes"),
               o.priority == "front_first", floats("sync.priority_chunk_bytes")};
  o.gather_sparse_tables = c.get_string("sync.sparse_tables") == "gather";
  if (c.has("sync.tuning")) o.tuning = c.get_string("sync.tuning");
  o.timeout = c.get_duration("sync.timeout");
  o.ps = ps_options(c);
  o.ps_sparse = c.get_bool("ps.sparse");
  o.model_type = c.get_string("model.type");
  o.device = c.get_string("train.device");
  return o;
}

}  // namespace psar
