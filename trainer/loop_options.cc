#include "trainer/loop_options.h"

#include <algorithm>

#include "core/errors.h"

namespace psar {

LoopOptions loop_options(const Config& c) {
  LoopOptions o;
  ParallelOptions& par = o.parallel;
  par.t = static_cast<int>(c.get_int("parallel.tp"));
  par.p = static_cast<int>(c.get_int("parallel.pp"));
  par.v = static_cast<int>(c.get_int("parallel.chunks"));
  par.m = static_cast<int>(c.get_int("parallel.microbatches"));
  par.order = c.get_string("parallel.order");
  par.schedule = c.get_string("parallel.schedule");
  par.scatter_gather = c.get_bool("parallel.scatter_gather");
  par.hybrid = c.get_bool("parallel.hybrid");
  if (c.has("parallel.stage_layers")) par.stage_layers = c.get_int_list("parallel.stage_layers");
  par.ends = {c.get_bool("parallel.account_embedding") ? 1 : 0,
              c.get_bool("parallel.account_head") ? 1 : 0};
  par.tp_allreduce = c.get_string("parallel.tp_allreduce");
  par.tp_split = c.get_string("parallel.tp_split");

  o.model_type = c.get_string("model.type");
  o.sync_backend = c.get_string("sync.backend");
  const auto floats = [&](const char* key) {
    return std::max<int64_t>(1, c.get_bytes(key) / static_cast<int64_t>(sizeof(float)));
  };
  o.overlap = {c.get_bool("sync.overlap"), floats("sync.bucket_bytes"),
               c.get_string("sync.priority") == "front_first", floats("sync.priority_chunk_bytes")};

  o.device = parse_device(c.get_string("train.device"), "train.device");
  o.seed = static_cast<uint64_t>(c.get_int("train.seed"));
  o.trace = c.get_bool("train.trace");
  o.checkpoint_every = c.get_int("train.checkpoint_every");
  if (o.checkpoint_every < 0)
    throw ConfigError("train.checkpoint_every must be >= 0, got " +
                      std::to_string(o.checkpoint_every));
  // Stopping early (docs/checkpoints.md): at a step, after a duration of
  // this process's run. A resumed run past exit_at_step runs on.
  o.exit_at_step = c.get_int("train.exit_at_step");
  o.exit_after = c.get_duration("train.exit_after");
  if (o.exit_at_step < 0 || o.exit_after < 0)
    throw ConfigError("train.exit_at_step and train.exit_after must be >= 0 (0 = off)");
  o.sync_timeout = c.get_duration("sync.timeout");

  o.survives_worker_failure = c.get_string("ps.on_worker_failure") == "continue";
  o.ps_timeout = c.get_duration("ps.timeout");
  return o;
}

}  // namespace psar
