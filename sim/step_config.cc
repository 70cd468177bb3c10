// The step's spec from the config, and the checks every spec passes
// (sim/step.h): step_from_config, gpt_shape_from_config, check_step.
#include <string>

#include "allreduce/algorithms.h"
#include "allreduce/allreducer.h"
#include "core/errors.h"
#include "modelpar/pp/partition.h"
#include "ps/sharding.h"
#include "sim/step.h"

namespace psar::sim {

using psar::detail::concat;

void check_step(const StepSpec& s, const ClusterSpec& c) {
  if (c.gpus_per_node % s.tp != 0)
    throw ConfigError(concat("parallel.tp = ", s.tp, " does not divide cluster.gpus_per_node = ",
                             c.gpus_per_node, " (a tensor-parallel group stays inside a node)"));
  if (s.model.heads % s.tp != 0 || s.model.hidden % s.tp != 0)
    throw ConfigError(concat("parallel.tp = ", s.tp, " does not divide model.heads = ",
                             s.model.heads, " and model.d_model = ", s.model.hidden));
  if (s.model.vocab <= 0)
    throw ConfigError("model.vocab must be set (> 0) to simulate the LM head");
  if (s.pp * s.tp * s.dp != c.gpus())
    throw ConfigError(concat("parallel.pp · parallel.tp = ", s.pp * s.tp,
                             " does not divide the cluster's ", c.gpus(),
                             " GPUs (cluster.nodes · cluster.gpus_per_node)"));
  if (s.microbatch < 1 || s.batch != s.microbatch * s.microbatches * s.dp)
    throw ConfigError(concat("train.batch_size = ", s.batch, " is not a multiple of d·m = ", s.dp,
                             "·", s.microbatches, " (parallel.microbatches)"));
  if (s.sync == "ps" && (s.pp > 1 || s.tp > 1))
    throw ConfigError(
        "sync.backend = ps: the simulator's parameter server syncs data "
        "parallelism only (parallel.pp = parallel.tp = 1)");
  if (s.sync != "ps") find_allreducer(s.sync);
  if (s.sequence_parallel && s.tp < 2)
    throw ConfigError(
        "parallel.sequence_parallel needs parallel.tp > 1 (it splits the "
        "sequence over the tensor-parallel group)");
  if (s.tp_comm_overlap && !s.sequence_parallel)
    throw ConfigError(
        "simulate.tp_comm_overlap needs parallel.sequence_parallel (Megatron-Core overlaps "
        "the all-gathers and reduce-scatters of sequence parallelism with the GEMMs)");
  if (s.zero < 0 || s.zero > 3)
    throw ConfigError(concat("sync.zero = ", s.zero, ": expected 0, 1, 2 or 3"));
  if (s.zero > 0 && s.sync == "ps")
    throw ConfigError(
        "sync.zero > 0 with sync.backend = ps: ZeRO shards over an allreduce "
        "backend's reduce-scatter and all-gather");
  find_allreducer(s.tp_allreduce);
  if (static_cast<int>(s.vstage_layers.size()) != s.pp * s.chunks)
    throw ConfigError(concat("parallel.stage_layers: ", s.vstage_layers.size(),
                             " entries for p·v = ", s.pp * s.chunks, " virtual stages"));
}

GptShape gpt_shape_from_config(const Config& c) {
  GptShape g{c.get_int("model.layers"), c.get_int("model.d_model"), c.get_int("model.heads"),
             c.get_int("model.seq_len"), c.get_int("model.vocab")};
  g.kv_heads = c.get_int("simulate.kv_heads");
  g.ffn = c.get_int("simulate.ffn");
  g.swiglu = c.get_string("simulate.mlp") == "swiglu";
  if (g.kv_heads < 0 || g.ffn < 0)
    throw ConfigError("simulate.kv_heads and simulate.ffn must be at least 0 (0: the default)");
  if (g.kv_heads > 0 && g.heads % g.kv_heads != 0)
    throw ConfigError(
        concat("simulate.kv_heads = ", g.kv_heads, " does not divide model.heads = ", g.heads));
  return g;
}

StepSpec step_from_config(const Config& c, const ClusterSpec& cluster) {
  if (c.get_string("model.type") != "gpt")
    throw ConfigError("model.type = " + c.get_string("model.type") +
                      ": psar simulate models a GPT (model.type: gpt)");
  StepSpec s;
  s.model = gpt_shape_from_config(c);
  s.tp = static_cast<int>(c.get_int("parallel.tp"));
  s.pp = static_cast<int>(c.get_int("parallel.pp"));
  if (s.tp < 1 || s.pp < 1) throw ConfigError("parallel.tp and parallel.pp must be at least 1");
  if (cluster.gpus() % (s.tp * s.pp) != 0)
    throw ConfigError(concat("parallel.pp · parallel.tp = ", s.pp * s.tp,
                             " does not divide the cluster's ", cluster.gpus(),
                             " GPUs (cluster.nodes · cluster.gpus_per_node)"));
  s.dp = cluster.gpus() / (s.tp * s.pp);
  s.order = c.get_string("parallel.order");
  s.batch = c.get_int("train.batch_size");
  s.microbatches = static_cast<int>(c.get_int("parallel.microbatches"));
  if (s.microbatches < 1) throw ConfigError("parallel.microbatches must be at least 1");
  if (s.batch % (static_cast<int64_t>(s.dp) * s.microbatches) != 0)
    throw ConfigError(concat("train.batch_size = ", s.batch, " is not a multiple of d·m = ", s.dp,
                             "·", s.microbatches,
                             " (d = GPUs / (p·t), m = "
                             "parallel.microbatches)"));
  s.microbatch = s.batch / (static_cast<int64_t>(s.dp) * s.microbatches);
  s.chunks = static_cast<int>(c.get_int("parallel.chunks"));
  s.schedule = c.get_string("parallel.schedule");
  s.scatter_gather = c.get_bool("parallel.scatter_gather");
  s.blocking_p2p = c.get_bool("simulate.blocking_p2p");
  s.tp_comm_overlap = c.get_bool("simulate.tp_comm_overlap");
  const pp::EndCosts ends{c.get_bool("parallel.account_embedding") ? 1 : 0,
                          c.get_bool("parallel.account_head") ? 1 : 0};
  const auto counts = c.has("parallel.stage_layers") ? c.get_int_list("parallel.stage_layers")
                                                     : std::vector<int64_t>{};
  s.vstage_layers =
      pp::partition_layers(static_cast<int>(s.model.layers), s.pp, s.chunks, counts, ends);
  s.sync = c.get_string("sync.backend");
  s.ps_servers = static_cast<int>(c.get_int("ps.servers"));
  s.ps_colocated = c.get_bool("ps.colocated");
  s.ps_chunk_bytes = c.get_bytes("ps.chunk_bytes");
  s.ps_shard_chunks = c.get_int("ps.shard_chunks");
  ps::chunk_floats_for(s.ps_chunk_bytes, 0, s.ps_shard_chunks);  // its ConfigErrors
  s.overlap = c.get_bool("sync.overlap");
  s.bucket_bytes = c.get_bytes("sync.bucket_bytes");
  if (s.ps_chunk_bytes < 1 || s.bucket_bytes < 1)
    throw ConfigError("ps.chunk_bytes and sync.bucket_bytes must be positive");
  s.tp_allreduce = c.get_string("parallel.tp_allreduce");
  s.allreduce = allreduce_options(c);
  s.recompute = parse_recompute(c.get_string("train.recompute"));
  s.sequence_parallel = c.get_bool("parallel.sequence_parallel");
  s.zero = static_cast<int>(c.get_int("sync.zero"));
  s.flash_attention = c.get_bool("simulate.flash_attention");
  s.overlap_param_gather = c.get_bool("simulate.overlap_param_gather");
  if (s.overlap_param_gather && s.zero != 1 && s.zero != 2)
    throw ConfigError(concat("simulate.overlap_param_gather needs sync.zero = 1 or 2 (it overlaps "
                             "their weight all-gather), got sync.zero = ", s.zero));
  s.dtype_bytes = static_cast<int>(c.get_int("simulate.dtype_bytes"));
  s.grad_bytes = static_cast<int>(c.get_int("simulate.grad_bytes"));
  s.symmetric = c.get_bool("simulate.symmetric");
  if (s.dtype_bytes < 1 || s.grad_bytes < 1)
    throw ConfigError("simulate.dtype_bytes and simulate.grad_bytes must be at least 1");
  check_step(s, cluster);
  return s;
}

}  // namespace psar::sim
