#include "trainer/loop_options.h"

#include <algorithm>

#include "core/errors.h"

namespace psar {

namespace {

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
  StepOptions& st = o.steps;
  st.has_steps = c.has("train.steps");
  st.has_epochs = c.has("train.epochs");
  if (st.has_steps == st.has_epochs)
    throw ConfigError("set exactly one of train.steps and train.epochs");
  if (st.has_steps) st.steps = c.get_int("train.steps");
  if (st.has_epochs) st.epochs = c.get_float("train.epochs");
  st.batch_size = c.get_int("train.batch_size");
  if (st.batch_size <= 0) throw ConfigError("train.batch_size must be positive");
  st.log_every = std::max<int64_t>(1, c.get_int("train.log_every"));
  st.eval_every = c.get_int("train.eval_every");
  const bool nccl = c.get_string("sync.backend") == "nccl" ||
                    (par.t > 1 && par.tp_allreduce == "nccl");
  o.records = {c.get_string("experiment.name"), c.get_string("train.device"),
               nccl ? c.get_string("sync.nccl_algo") : "",
               nccl ? c.get_string("sync.nccl_proto") : ""};

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
  return o;
}
}  // namespace

RunOptions run_options(const Config& config, int rank, int world_size) {
  RunOptions o;
  o.loop = loop_options(config);
  o.sync = sync_options(config);
  o.workload = workload_options(config);
  o.optimizer = optimizer_options(config);
  o.hetero = HeteroPlan::from_config(config, world_size);
  o.network = net_model_of_rank(config, rank, world_size);
  return o;
}

}  // namespace psar
