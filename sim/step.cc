#include "sim/step.h"

#include <algorithm>
#include <map>
#include <numeric>

#include "allreduce/algorithms.h"
#include "allreduce/allreducer.h"
#include "allreduce/partition.h"
#include "core/errors.h"
#include "modelpar/grid.h"
#include "modelpar/pp/generators.h"
#include "modelpar/pp/partition.h"
#include "modelpar/pp/simulate.h"
#include "sim/collective.h"

namespace psar::sim {

using psar::detail::concat;

namespace {

// The program an allreduce name stands for: its own, or for a library peer
// (mpi, nccl) the program its registry entry says it is timed as.
Program allreduce_program(const std::string& name, int ranks, int64_t count,
                          const AllreduceOptions& options, const std::vector<int>& node = {}) {
  const AllreducerEntry& e = find_allreducer(name);
  if (e.program) return e.program_for(ranks, count, options, node);
  if (!e.timed_as)
    throw ConfigError("allreduce '" + name + "' has no program to simulate and names none to "
                      "be timed as (its registry entry's timed_as)");
  return find_allreducer(e.timed_as).program_for(ranks, count, options);
}

}  // namespace

Program ps_program(int workers, int servers, int64_t count, int64_t chunk) {
  PSAR_CHECK(workers >= 1 && servers >= 1 && chunk >= 1, "ps_program: ", workers, " workers, ",
             servers, " servers, chunks of ", chunk);
  Program list("ps", workers + servers, count);
  const Partition shards{count, servers};
  for (int k = 0; k < servers; ++k) {
    const int64_t size = shards.size(k);
    const int64_t chunks = std::max<int64_t>(1, (size + chunk - 1) / chunk);
    for (int64_t c = 0; c < chunks; ++c) {
      const int64_t offset = shards.offset(k) + c * chunk;
      const int64_t n = std::min(chunk, size - c * chunk);
      const int round = static_cast<int>(c);
      for (int w = 0; w < workers; ++w) {
        list.transfer(round, w, workers + k, offset, n, true);
        list.transfer(round + 1, workers + k, w, offset, n, false);
      }
    }
  }
  list.finish();
  return list;
}


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
    throw ConfigError(concat("train.batch_size = ", s.batch, " is not a multiple of d·m = ",
                             s.dp, "·", s.microbatches, " (parallel.microbatches)"));
  if (s.sync == "ps" && (s.pp > 1 || s.tp > 1))
    throw ConfigError("sync.backend = ps: the simulator's parameter server syncs data "
                      "parallelism only (parallel.pp = parallel.tp = 1)");
  if (s.sync != "ps") find_allreducer(s.sync);
  if (s.sequence_parallel && s.tp < 2)
    throw ConfigError("parallel.sequence_parallel needs parallel.tp > 1 (it splits the "
                      "sequence over the tensor-parallel group)");
  if (s.zero < 0 || s.zero > 3)
    throw ConfigError(concat("sync.zero = ", s.zero, ": expected 0, 1, 2 or 3"));
  if (s.zero > 0 && s.sync == "ps")
    throw ConfigError("sync.zero > 0 with sync.backend = ps: ZeRO shards over an allreduce "
                      "backend's reduce-scatter and all-gather");
  find_allreducer(s.tp_allreduce);
  if (static_cast<int>(s.vstage_layers.size()) != s.pp * s.chunks)
    throw ConfigError(concat("parallel.stage_layers: ", s.vstage_layers.size(),
                             " entries for p·v = ", s.pp * s.chunks, " virtual stages"));
}

int64_t stage_params(const StepSpec& s, int stage) {
  const GptShape& g = s.model;
  const int p = s.pp;
  int64_t params = 0;
  for (int c = 0; c < s.chunks; ++c)  // virtual stage c·p + stage (pp::Schedule::virtual_stage)
    params += s.vstage_layers[static_cast<size_t>(c * p + stage)] * block_params(g);
  if (stage == 0) params += g.vocab * g.hidden + g.seq * g.hidden;
  if (stage == p - 1) params += 2 * g.hidden + (p > 1 ? g.vocab * g.hidden : 0);
  return params / s.tp;
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
    throw ConfigError(concat("simulate.kv_heads = ", g.kv_heads, " does not divide model.heads = ",
                             g.heads));
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
    throw ConfigError(concat("train.batch_size = ", s.batch, " is not a multiple of d·m = ",
                             s.dp, "·", s.microbatches, " (d = GPUs / (p·t), m = "
                             "parallel.microbatches)"));
  s.microbatch = s.batch / (static_cast<int64_t>(s.dp) * s.microbatches);
  s.chunks = static_cast<int>(c.get_int("parallel.chunks"));
  s.schedule = c.get_string("parallel.schedule");
  s.scatter_gather = c.get_bool("parallel.scatter_gather");
  const pp::EndCosts ends{c.get_bool("parallel.account_embedding") ? 1 : 0,
                          c.get_bool("parallel.account_head") ? 1 : 0};
  const auto counts = c.has("parallel.stage_layers") ? c.get_int_list("parallel.stage_layers")
                                                     : std::vector<int64_t>{};
  s.vstage_layers = pp::partition_layers(static_cast<int>(s.model.layers), s.pp, s.chunks, counts,
                                         ends);
  s.sync = c.get_string("sync.backend");
  s.ps_servers = static_cast<int>(c.get_int("ps.servers"));
  s.ps_colocated = c.get_bool("ps.colocated");
  s.ps_chunk_bytes = c.get_bytes("ps.chunk_bytes");
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
  s.dtype_bytes = static_cast<int>(c.get_int("simulate.dtype_bytes"));
  s.grad_bytes = static_cast<int>(c.get_int("simulate.grad_bytes"));
  s.symmetric = c.get_bool("simulate.symmetric");
  if (s.dtype_bytes < 1 || s.grad_bytes < 1)
    throw ConfigError("simulate.dtype_bytes and simulate.grad_bytes must be at least 1");
  check_step(s, cluster);
  return s;
}

StepResult simulate_step(const ClusterSpec& cluster, const StepSpec& s) {
  check_step(s, cluster);
  const int p = s.pp, t = s.tp, d = s.dp, v = s.chunks;
  const GridShape grid = make_grid_shape(cluster.gpus(), t, p, s.order);
  auto gpu = [&](int tp, int dp, int pp) { return grid_rank(grid, {tp, dp, pp}); };
  const bool dedicated_ps = s.sync == "ps" && !s.ps_colocated;
  const Network net(cluster, dedicated_ps ? s.ps_servers : 0);
  const AllreduceOptions ar_options = activation_allreduce_options(s.allreduce);

  // One tensor-parallel all-reduce of the residual stream [b, s, h].
  const int64_t stream = s.microbatch * s.model.seq * s.model.hidden;
  StepResult out;
  if (t > 1) {
    std::vector<int> ranks, node;
    for (int j = 0; j < t; ++j) ranks.push_back(gpu(j, 0, 0));
    for (int r : ranks) node.push_back(r / cluster.gpus_per_node);
    if (s.sequence_parallel) {  // a reduce-scatter and an all-gather in place of each
      const ProgramShape shape{.ranks = t, .count = stream, .segment_bytes = s.allreduce.segment_bytes,
                               .dtype = ElementType::kFp32, .root = 0, .node = node};
      const Program rs = ring_reduce_scatter_program(shape), ag = ring_all_gather_program(shape);
      const double D = s.dtype_bytes;
      out.tp_allreduce_s = run_groups(net, {{&rs, ranks, 0.0, D}})[0] +
                           run_groups(net, {{&ag, ranks, 0.0, D}})[0];
    } else {
      const Program list = allreduce_program(s.tp_allreduce, t, stream, ar_options, node);
      out.tp_allreduce_s =
          run_groups(net, {{&list, ranks, 0.0, static_cast<double>(s.dtype_bytes)}})[0];
    }
  }

  // Compute of one action from its layers' GEMMs (sim/gpt_cost.h), their
  // memory-bound kernels and kernel launches: the forward's, and as many
  // again in each half of the backward.
  const double ovh = cluster.gpu.kernel_overhead;
  const GemmSeconds block =
      block_gemm_seconds(s.model, s.microbatch, t, cluster.gpu, s.flash_attention);
  const GemmSeconds head = head_gemm_seconds(s.model, s.microbatch, t, cluster.gpu);
  const double memory_s =
      cluster.gpu.memory_bandwidth > 0
          ? block_memory_bytes(s.model, s.microbatch, t, s.dtype_bytes, s.flash_attention,
                               s.sequence_parallel) /
                cluster.gpu.memory_bandwidth
          : 0.0;
  // What the recomputation runs before each block's backward: the whole
  // forward (full), or the attention core's two GEMMs, its softmax and
  // dropout (selective: four kernels, no TP communication).
  const double core_s =
      attention_core_seconds(s.model, s.microbatch, t, cluster.gpu, s.flash_attention) +
      kAttentionCoreKernels * ovh +
      (cluster.gpu.memory_bandwidth > 0
           ? attention_core_memory_bytes(s.model, s.microbatch, t, s.dtype_bytes,
                                         s.flash_attention) /
                 cluster.gpu.memory_bandwidth
           : 0.0);
  const double bw = cluster.gpu.memory_bandwidth;
  const double logits = static_cast<double>(s.microbatch) * static_cast<double>(s.model.seq) *
                        static_cast<double>(s.model.vocab) / t;
  const double ce_f = bw > 0 ? logits * (s.dtype_bytes + kCrossEntropyForwardBytes) / bw : 0.0,
               ce_b = bw > 0 ? logits * (s.dtype_bytes + kCrossEntropyBackwardBytes) / bw : 0.0;
  const double block_k = kKernelsPerBlockForward * ovh + memory_s,
               head_k = kKernelsHeadForward * ovh;
  const double block_f = block.forward + block_k, block_bi = block.input_grad + block_k,
               block_bw = block.weight_grad + block_k;
  const double head_f = head.forward + head_k + ce_f, head_bi = head.input_grad + head_k + ce_b,
               head_bw = head.weight_grad + head_k;
  const double tp2 = 2 * out.tp_allreduce_s;  // g forward, or f backward, per block
  const bool full = s.recompute == Recompute::kFull;
  const double again_s = full ? block_f : s.recompute == Recompute::kSelective ? core_s : 0.0;
  const double again_tp = full ? tp2 : 0.0;
  // ZeRO-3: one block's weights all-gathered over the data-parallel group
  // (16-bit) and its gradients reduce-scattered (sync.dtype), on the
  // communication stream; an action of k blocks waits for the first
  // gather and then runs at the slower of its compute and the stream.
  double zero3_gather = 0, zero3_scatter = 0;
  if (s.zero == 3 && d > 1) {
    std::vector<int> ranks, node;
    for (int i = 0; i < d; ++i) ranks.push_back(gpu(0, i, 0));
    for (int r : ranks) node.push_back(r / cluster.gpus_per_node);
    const ProgramShape shape{.ranks = d, .count = block_params(s.model) / t,
                             .segment_bytes = s.allreduce.segment_bytes, .dtype = ElementType::kFp32,
                             .root = 0, .node = node};
    const Program ag = ring_all_gather_program(shape), rs = ring_reduce_scatter_program(shape);
    zero3_gather = run_groups(net, {{&ag, ranks, 0.0, static_cast<double>(s.dtype_bytes)}})[0];
    zero3_scatter = run_groups(net, {{&rs, ranks, 0.0, static_cast<double>(element_size(s.allreduce.dtype))}})[0];
  }
  auto streamed = [&](double compute, double layers, double per_layer) {
    if (per_layer <= 0 || layers <= 0) return compute;
    return per_layer + std::max(compute, (layers - 1) * per_layer);
  };
  const pp::Schedule schedule =
      pp::make_schedule(s.schedule, {p, s.microbatches, v, static_cast<int>(s.model.layers)});
  struct Cost {
    double compute = 0, tp = 0;
  };
  auto cost = [&](int stage, const pp::Action& a) {
    const int u = schedule.virtual_stage(stage, a.chunk);
    const double layers = s.vstage_layers[static_cast<size_t>(u)];
    const bool head = u == schedule.virtual_stages() - 1;
    Cost c;
    double comm = 0;  // ZeRO-3's stream per block
    switch (a.op) {
      case pp::Op::kForward:
        c = {layers * block_f + (head ? head_f : 0), layers * tp2};
        comm = zero3_gather;
        break;
      case pp::Op::kBackward:
        c = {layers * (block_bi + block_bw + again_s) + (head ? head_bi + head_bw : 0),
             layers * (tp2 + again_tp)};
        comm = zero3_gather + zero3_scatter;
        break;
      case pp::Op::kBackwardInput:
        c = {layers * (block_bi + again_s) + (head ? head_bi : 0), layers * (tp2 + again_tp)};
        comm = zero3_gather;
        break;
      case pp::Op::kBackwardWeight:
        c = {layers * block_bw + (head ? head_bw : 0), 0.0};
        comm = zero3_scatter;
        break;
    }
    c.compute = streamed(c.compute + c.tp, layers, comm) - c.tp;
    return c;
  };

  // Transfers between stages: every replica's TP group sends at once; with
  // scatter/gather each TP rank sends 1/t and the receivers all-gather.
  // With sequence parallelism the activation is split over the TP group
  // already: each rank sends its 1/t and nothing is gathered.
  const bool sg = (s.scatter_gather || s.sequence_parallel) && t > 1;
  const int64_t wire = sg ? Partition{stream, t}.largest() : stream;
  double gather_s = 0;
  if (sg && !s.sequence_parallel) {
    const Program ag = ring_all_gather_program(ProgramShape{.ranks = t, .count = stream, .segment_bytes = s.allreduce.segment_bytes, .dtype = ElementType::kFp32, .root = 0, .node = {}});
    std::vector<int> ranks;
    for (int j = 0; j < t; ++j) ranks.push_back(gpu(j, 0, 0));
    gather_s = run_groups(net, {{&ag, ranks, 0.0, static_cast<double>(s.dtype_bytes)}})[0];
  }
  std::map<std::pair<int, int>, std::vector<double>> transfer;  // (from, to) -> [replica] s
  Program hop("p2p", 2 * t, wire);
  for (int j = 0; j < t; ++j) hop.transfer(0, j, t + j, 0, wire, false);
  auto transfer_s = [&](int from, int to) -> const std::vector<double>& {
    auto [it, fresh] = transfer.try_emplace({from, to});
    if (fresh) {
      std::vector<GroupRun> runs;
      for (int i = 0; i < d; ++i) {
        GroupRun r{&hop, {}, 0.0, static_cast<double>(s.dtype_bytes)};
        for (int j = 0; j < t; ++j) r.endpoint.push_back(gpu(j, i, from));
        for (int j = 0; j < t; ++j) r.endpoint.push_back(gpu(j, i, to));
        runs.push_back(std::move(r));
      }
      it->second = run_groups(net, runs);
      for (double& x : it->second) x += gather_s;
    }
    return it->second;
  };
  if (p > 1) out.transfer_s = transfer_s(0, 1)[0];

  // The pipeline of each replica (replica 0 alone when symmetric).
  const int replicas = s.symmetric ? 1 : d;
  std::vector<double> stage_end(static_cast<size_t>(p), 0.0);
  std::vector<std::vector<pp::ActionSpan>> spans0;  // replica 0's, per stage
  out.stages.assign(static_cast<size_t>(p), {});
  for (int i = 0; i < replicas; ++i) {
    const pp::Prediction pr = pp::simulate_costs(
        schedule,
        [&](int stage, const pp::Action& a) {
          const Cost c = cost(stage, a);
          return c.compute + c.tp;
        },
        [&](const pp::Transfer& tr) {
          return transfer_s(tr.from_stage, tr.to_stage)[static_cast<size_t>(i)];
        });
    for (int st = 0; st < p; ++st) {
      const auto& spans = pr.spans[static_cast<size_t>(st)];
      const double end = spans.empty() ? 0.0 : spans.back().end;
      stage_end[static_cast<size_t>(st)] = std::max(stage_end[static_cast<size_t>(st)], end);
    }
    out.pipeline_s = std::max(out.pipeline_s, pr.makespan);
    if (i == 0) {
      spans0 = pr.spans;
      out.bubble_fraction = pr.bubble_fraction;
      out.idle_share = pr.idle_share;
      for (int st = 0; st < p; ++st) {
        auto& times = out.stages[static_cast<size_t>(st)];
        std::vector<pp::Action> actions;
        for (const auto& span : pr.spans[static_cast<size_t>(st)]) {
          const Cost c = cost(st, span.action);
          times.compute_s += c.compute;
          times.tp_s += c.tp;
          actions.push_back(span.action);
        }
        times.idle_s = pr.makespan - times.compute_s - times.tp_s;
        out.order.push_back(std::move(actions));
      }
    }
  }

  const GptShape& g = s.model;
  for (int st = 0; st < p; ++st) {
    out.stages[static_cast<size_t>(st)].params = stage_params(s, st);
    out.stages[static_cast<size_t>(st)].end_s = stage_end[static_cast<size_t>(st)];
  }

  // Data-parallel sync: every (stage, TP rank) group at once. Without
  // overlap each starts when its stage's last action is done and syncs the
  // stage's whole gradient; with overlap, bucket by bucket (below).
  double done = out.pipeline_s;
  // Each stage's optimizer step on the shard its GPUs step.
  std::vector<double> opt(static_cast<size_t>(p), 0.0);
  for (int st = 0; st < p; ++st)
    if (bw > 0)
      opt[static_cast<size_t>(st)] = static_cast<double>(out.stages[static_cast<size_t>(st)].params) /
                                     (s.zero > 0 ? d : 1) * kAdamStepBytesPerParam / bw;
  const bool step_inside_sync = d > 1 && (s.zero == 1 || s.zero == 2);
  auto stepped = [&](std::vector<double> at) {  // the RS ends, plus the step
    for (int st = 0; st < p; ++st) at[static_cast<size_t>(st)] += opt[static_cast<size_t>(st)];
    return at;
  };
  // By gradient count and the group's node map (what the hierarchical
  // program reads; the others ignore it).
  std::map<std::pair<int64_t, std::vector<int>>, Program> lists;
  const int64_t ps_chunk = std::max<int64_t>(1, s.ps_chunk_bytes / s.grad_bytes);
  const AllreduceOptions& dp_options = s.allreduce;  // the gradients on the wire in sync.dtype
  const double wire_bytes = s.sync == "ps" ? s.grad_bytes : element_size(dp_options.dtype);
  auto sync_list = [&](int64_t count, const std::vector<int>& gpus) -> const Program* {
    std::vector<int> node;
    for (int g : gpus) node.push_back(g / cluster.gpus_per_node);
    auto [it, fresh] = lists.try_emplace({count, node});
    if (fresh)
      it->second = s.sync == "ps" ? ps_program(d, s.ps_servers, count, ps_chunk)
                   : s.zero > 0
                       ? ring_reduce_scatter_program({.ranks = d, .count = count,
                                                      .segment_bytes = s.allreduce.segment_bytes,
                                                      .dtype = s.allreduce.dtype, .root = 0,
                                                      .node = node})
                       : allreduce_program(s.sync, d, count, dp_options, node);
    return &it->second;
  };
  // ZeRO 1 and 2: once a stage's gradients are reduce-scattered and its
  // shard stepped, its 16-bit weights are all-gathered (every group at once).
  std::map<int64_t, Program> gathers;
  auto gather_weights = [&](const std::vector<double>& from) {
    std::vector<GroupRun> runs;
    for (int st = 0; st < p; ++st)
      for (int j = 0; j < t; ++j) {
        const int64_t count = out.stages[static_cast<size_t>(st)].params;
        auto [it, fresh] = gathers.try_emplace(count);
        if (fresh)
          it->second = ring_all_gather_program({.ranks = d, .count = count,
                                                .segment_bytes = s.allreduce.segment_bytes,
                                                .dtype = ElementType::kFp32, .root = 0,
                                                .node = {}});
        std::vector<int> gpus;
        for (int i = 0; i < d; ++i) gpus.push_back(gpu(j, i, st));
        runs.push_back({&it->second, gpus, from[static_cast<size_t>(st)],
                        static_cast<double>(s.dtype_bytes)});
      }
    const std::vector<double> ends = run_groups(net, runs);
    std::vector<double> stage_done(static_cast<size_t>(p), 0.0);
    for (size_t k = 0; k < ends.size(); ++k) {
      double& at = stage_done[k / static_cast<size_t>(t)];
      at = std::max(at, ends[k]);
    }
    return stage_done;
  };
  auto group = [&](int st, int j, int64_t count, double start) {
    std::vector<int> gpus;
    for (int i = 0; i < d; ++i) gpus.push_back(gpu(j, i, st));
    GroupRun r{sync_list(count, gpus), gpus, start, wire_bytes};
    for (int k = 0; k < (s.sync == "ps" ? s.ps_servers : 0); ++k)
      r.endpoint.push_back(dedicated_ps ? cluster.gpus() + k
                                        : r.endpoint[static_cast<size_t>(k % d)]);
    return r;
  };
  if (d > 1 && s.zero == 3) {
    // Gathered and scattered block by block inside the actions (above).
  } else if (d > 1 && !s.overlap) {
    std::vector<GroupRun> runs;
    std::vector<int> run_stage;
    for (int st = 0; st < p; ++st)
      for (int j = 0; j < t; ++j) {
        runs.push_back(group(st, j, out.stages[static_cast<size_t>(st)].params,
                             stage_end[static_cast<size_t>(st)]));
        run_stage.push_back(st);
      }
    std::vector<double> ends = run_groups(net, runs);
    if (s.zero > 0) {
      std::vector<double> scattered(static_cast<size_t>(p), 0.0);
      for (size_t k = 0; k < ends.size(); ++k)
        scattered[static_cast<size_t>(run_stage[k])] =
            std::max(scattered[static_cast<size_t>(run_stage[k])], ends[k]);
      const std::vector<double> gathered = gather_weights(stepped(scattered));
      for (size_t k = 0; k < ends.size(); ++k) ends[k] = gathered[static_cast<size_t>(run_stage[k])];
    }
    for (size_t k = 0; k < ends.size(); ++k) {
      auto& times = out.stages[static_cast<size_t>(run_stage[k])];
      times.sync_s = std::max(times.sync_s, ends[k] - times.end_s);
      done = std::max(done, ends[k]);
    }
  } else if (d > 1) {
    // Overlap as psar's (docs/overlap.md): a chunk's gradients are final
    // during its last backward (fused, or the weight half of a split one),
    // the head's first and then block by block from the chunk's last layer
    // down, each at its share of the action's time; chunks in the order
    // those actions end. The blocks fill buckets of sync.bucket_bytes
    // (sync/buckets.h's rule); the embedding, the head's copy and the
    // final layer norm — the tied ranges, synced after the buckets — form
    // the last, ready when the stage is done. One communication thread per
    // rank syncs the buckets in order, each once it is ready and the one
    // before it is done; the buckets of every group with a k-th bucket run
    // at once (their flows share links as if they started together).
    const int64_t capacity = std::max<int64_t>(1, s.bucket_bytes / s.grad_bytes);
    const int64_t per_block = block_params(g) / t;
    std::vector<std::vector<std::pair<double, int64_t>>> buckets(static_cast<size_t>(p));
    for (int st = 0; st < p; ++st) {
      const double shift = stage_end[static_cast<size_t>(st)] -
                           (spans0[static_cast<size_t>(st)].empty()
                                ? 0.0 : spans0[static_cast<size_t>(st)].back().end);
      std::vector<const pp::ActionSpan*> last(static_cast<size_t>(v), nullptr);
      for (const auto& span : spans0[static_cast<size_t>(st)])
        if (span.action.op == pp::Op::kBackward || span.action.op == pp::Op::kBackwardWeight)
          last[static_cast<size_t>(span.action.chunk)] = &span;
      std::erase(last, nullptr);
      std::sort(last.begin(), last.end(),
                [](const pp::ActionSpan* a, const pp::ActionSpan* b) { return a->end < b->end; });
      auto& out_b = buckets[static_cast<size_t>(st)];
      int64_t filled = 0;
      double ready = 0;
      auto close = [&] {
        if (filled > 0) out_b.emplace_back(ready, filled);
        filled = 0;
      };
      int64_t blocks = 0;
      for (const pp::ActionSpan* span : last) {
        const int u = schedule.virtual_stage(st, span->action.chunk);
        const int layers = s.vstage_layers[static_cast<size_t>(u)];
        const bool fused = span->action.op == pp::Op::kBackward;
        const double w_head = u == schedule.virtual_stages() - 1
                                  ? (fused ? head_bi + head_bw : head_bw) : 0.0;
        const double w_layer =
            fused ? block_bi + block_bw + again_s + tp2 + again_tp : block_bw;
        const double total = w_head + layers * w_layer;
        const double scale = total > 0 ? (span->end - span->start) / total : 0.0;
        for (int l = 0; l < layers; ++l, ++blocks) {
          const double at = shift + span->start + (w_head + (l + 1) * w_layer) * scale;
          if (per_block > capacity) {  // split into buckets of its own
            close();
            for (int64_t left = per_block; left > 0; left -= capacity)
              out_b.emplace_back(at, std::min(left, capacity));
            continue;
          }
          if (filled + per_block > capacity) close();
          filled += per_block;
          ready = at;
        }
      }
      close();
      const int64_t tail = out.stages[static_cast<size_t>(st)].params - blocks * per_block;
      if (tail > 0) out_b.emplace_back(stage_end[static_cast<size_t>(st)], tail);
    }
    std::vector<double> free_at(static_cast<size_t>(p), 0.0);  // a stage's thread, all j alike
    for (size_t k = 0;; ++k) {
      std::vector<GroupRun> runs;
      std::vector<int> run_stage;
      for (int st = 0; st < p; ++st) {
        const auto& b = buckets[static_cast<size_t>(st)];
        if (k >= b.size()) continue;
        const double start = std::max(b[k].first, free_at[static_cast<size_t>(st)]);
        for (int j = 0; j < t; ++j) {
          runs.push_back(group(st, j, b[k].second, start));
          run_stage.push_back(st);
        }
      }
      if (runs.empty()) break;
      const std::vector<double> ends = run_groups(net, runs);
      for (size_t r = 0; r < ends.size(); ++r) {
        double& at = free_at[static_cast<size_t>(run_stage[r])];
        at = std::max(at, ends[r]);
      }
    }
    if (s.zero > 0) {
      for (int st = 0; st < p; ++st)
        free_at[static_cast<size_t>(st)] =
            std::max(free_at[static_cast<size_t>(st)], out.stages[static_cast<size_t>(st)].end_s);
      free_at = gather_weights(stepped(free_at));
    }
    for (int st = 0; st < p; ++st) {
      auto& times = out.stages[static_cast<size_t>(st)];
      const double end = std::max(free_at[static_cast<size_t>(st)], times.end_s);
      times.sync_s = end - times.end_s;
      done = std::max(done, end);
    }
  }
  for (int st = 0; st < p; ++st) {
    auto& times = out.stages[static_cast<size_t>(st)];
    times.optimizer_s = opt[static_cast<size_t>(st)];
    done = std::max(done, times.end_s + times.sync_s + (step_inside_sync ? 0.0 : times.optimizer_s));
  }
  out.step_s = done;
  out.sync_exposed_s = done - out.pipeline_s;
  out.gpus = cluster.gpus();
  out.flops = step_flops(g, s.batch, s.recompute);
  out.tflops_per_gpu = out.flops / (out.step_s * out.gpus) / 1e12;
  out.model_flops = step_flops(g, s.batch, Recompute::kNone);
  out.mfu = out.model_flops / (out.step_s * out.gpus * cluster.gpu.peak_flops);
  return out;
}

}  // namespace psar::sim
