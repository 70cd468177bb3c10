#include "sim/step.h"

#include <algorithm>
#include <map>
#include <numeric>

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

// The allreduce whose steps a name stands for: its own, or ring's for the
// algorithms whose schedule is not psar's (mpi, nccl: both ring-shaped).
StepList allreduce_steps(const std::string& name, int ranks, int64_t count,
                         const AllreduceOptions& options) {
  const AllreducerEntry& e = find_allreducer(name);
  return e.steps ? e.steps(ranks, count, options)
                 : find_allreducer("ring").steps(ranks, count, options);
}

// The parameter server as a step list on d workers (ranks 0..d-1) and S
// shards (ranks d..d+S-1): every worker pushes slice k of its gradient
// (Partition{count, S}) to shard k, which adds it; then every shard sends its
// updated slice back to every worker.
StepList ps_steps(int workers, int servers, int64_t count) {
  StepList list{.algorithm = "ps", .ranks = workers + servers, .count = count, .rounds = {}};
  const Partition shards{count, servers};
  for (int k = 0; k < servers; ++k)
    for (int w = 0; w < workers; ++w) {
      list.add(0, {.src = w, .dst = workers + k, .offset = shards.offset(k),
                   .count = shards.size(k), .reduce = true});
      list.add(1, {.src = workers + k, .dst = w, .offset = shards.offset(k),
                   .count = shards.size(k), .reduce = false});
    }
  return list;
}

}  // namespace

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

StepSpec step_from_config(const Config& c, const ClusterSpec& cluster) {
  if (c.get_string("model.type") != "gpt")
    throw ConfigError("model.type = " + c.get_string("model.type") +
                      ": psar simulate models a GPT (model.type: gpt)");
  StepSpec s;
  s.model = {c.get_int("model.layers"), c.get_int("model.d_model"), c.get_int("model.heads"),
             c.get_int("model.seq_len"), c.get_int("model.vocab")};
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
  s.tp_allreduce = c.get_string("parallel.tp_allreduce");
  s.segment_bytes = c.get_bytes("sync.segment_bytes");
  s.recompute = c.get_bool("simulate.recompute");
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
  AllreduceOptions ar_options;
  ar_options.segment_bytes = s.segment_bytes;

  // One tensor-parallel all-reduce of the residual stream [b, s, h].
  const int64_t stream = s.microbatch * s.model.seq * s.model.hidden;
  StepResult out;
  if (t > 1) {
    const StepList list = allreduce_steps(s.tp_allreduce, t, stream, ar_options);
    std::vector<int> ranks;
    for (int j = 0; j < t; ++j) ranks.push_back(gpu(j, 0, 0));
    out.tp_allreduce_s =
        run_groups(net, {{&list, ranks, 0.0, static_cast<double>(s.dtype_bytes)}})[0];
  }

  // Compute of one action from the FLOPs of its layers.
  const double rate = cluster.gpu.peak_flops * cluster.gpu.gemm_efficiency;
  const double ovh = cluster.gpu.kernel_overhead;
  const double block_f = block_forward_flops(s.model, s.microbatch) / t / rate +
                         kKernelsPerBlockForward * ovh;
  const double head_f = head_forward_flops(s.model, s.microbatch) / t / rate +
                        kKernelsHeadForward * ovh;
  const double tp2 = 2 * out.tp_allreduce_s;  // g forward, or f backward, per block
  const pp::Schedule schedule =
      pp::make_schedule(s.schedule, {p, s.microbatches, v, static_cast<int>(s.model.layers)});
  struct Cost {
    double compute = 0, tp = 0;
  };
  auto cost = [&](int stage, const pp::Action& a) {
    const int u = schedule.virtual_stage(stage, a.chunk);
    const double layers = s.vstage_layers[static_cast<size_t>(u)];
    const bool head = u == schedule.virtual_stages() - 1;
    const double again = s.recompute ? 1 : 0;  // recomputed forward before the backward
    switch (a.op) {
      case pp::Op::kForward:
        return Cost{layers * block_f + (head ? head_f : 0), layers * tp2};
      case pp::Op::kBackward:
        return Cost{layers * (2 + again) * block_f + (head ? 2 * head_f : 0),
                    layers * (1 + again) * tp2};
      case pp::Op::kBackwardInput:
        return Cost{layers * (1 + again) * block_f + (head ? head_f : 0),
                    layers * (1 + again) * tp2};
      case pp::Op::kBackwardWeight:
        return Cost{layers * block_f + (head ? head_f : 0), 0.0};
    }
    return Cost{};
  };

  // Transfers between stages: every replica's TP group sends at once; with
  // scatter/gather each TP rank sends 1/t and the receivers all-gather.
  const bool sg = s.scatter_gather && t > 1;
  const int64_t wire = sg ? Partition{stream, t}.largest() : stream;
  double gather_s = 0;
  if (sg) {
    const StepList ag = ring_all_gather_steps(t, stream);
    std::vector<int> ranks;
    for (int j = 0; j < t; ++j) ranks.push_back(gpu(j, 0, 0));
    gather_s = run_groups(net, {{&ag, ranks, 0.0, static_cast<double>(s.dtype_bytes)}})[0];
  }
  std::map<std::pair<int, int>, std::vector<double>> transfer;  // (from, to) -> [replica] s
  StepList hop{.algorithm = "p2p", .ranks = 2 * t, .count = wire, .rounds = {}};
  for (int j = 0; j < t; ++j)
    hop.add(0, {.src = j, .dst = t + j, .offset = 0, .count = wire, .reduce = false});
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

  // Data-parallel sync: every (stage, TP rank) group at once, each starting
  // when its stage's last action is done.
  double done = out.pipeline_s;
  if (d > 1) {
    std::map<int64_t, StepList> lists;  // by gradient count
    std::vector<GroupRun> runs;
    std::vector<int> run_stage;
    for (int st = 0; st < p; ++st) {
      const int64_t count = out.stages[static_cast<size_t>(st)].params;
      auto [it, fresh] = lists.try_emplace(count);
      if (fresh)
        it->second = s.sync == "ps" ? ps_steps(d, s.ps_servers, count)
                                    : allreduce_steps(s.sync, d, count, ar_options);
      for (int j = 0; j < t; ++j) {
        GroupRun r{&it->second, {}, stage_end[static_cast<size_t>(st)],
                   static_cast<double>(s.grad_bytes)};
        for (int i = 0; i < d; ++i) r.endpoint.push_back(gpu(j, i, st));
        for (int k = 0; k < (s.sync == "ps" ? s.ps_servers : 0); ++k)
          r.endpoint.push_back(dedicated_ps ? cluster.gpus() + k : r.endpoint[static_cast<size_t>(k % d)]);
        runs.push_back(std::move(r));
        run_stage.push_back(st);
      }
    }
    const std::vector<double> ends = run_groups(net, runs);
    for (size_t k = 0; k < ends.size(); ++k) {
      auto& times = out.stages[static_cast<size_t>(run_stage[k])];
      times.sync_s = std::max(times.sync_s, ends[k] - times.end_s);
      done = std::max(done, ends[k]);
    }
  }
  out.step_s = done;
  out.sync_exposed_s = done - out.pipeline_s;
  out.gpus = cluster.gpus();
  out.flops = step_flops(g, s.batch, s.recompute);
  out.tflops_per_gpu = out.flops / (out.step_s * out.gpus) / 1e12;
  return out;
}

}  // namespace psar::sim
