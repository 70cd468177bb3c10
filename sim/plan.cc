#include "sim/plan.h"

#include <algorithm>
#include <limits>

#include "core/errors.h"
#include "modelpar/pp/generators.h"
#include "modelpar/pp/partition.h"

namespace psar::sim {

using psar::detail::concat;

Memory stage_memory(const StepSpec& s, int stage) {
  Memory m;
  m.stage = stage;
  m.params = stage_params(s, stage);
  const double params = static_cast<double>(m.params), d = s.dp;
  m.weights = params * s.dtype_bytes / (s.zero >= 3 ? d : 1);
  m.gradients = params * s.grad_bytes / (s.zero >= 2 ? d : 1);
  m.optimizer = params * kAdamBytesPerParam / (s.zero >= 1 ? d : 1);
  if (s.zero >= 3 && s.dp > 1)
    m.gathered = 2.0 * static_cast<double>(block_params(s.model) / s.tp) * s.dtype_bytes;

  const pp::ScheduleShape shape{s.pp, s.microbatches, s.chunks, static_cast<int>(s.model.layers)};
  m.in_flight = s.pp == 1 ? 1 : pp::find_schedule(s.schedule).peak(shape, stage);
  int chunk_layers = 0;  // the stage's largest chunk
  for (int c = 0; c < s.chunks; ++c)
    chunk_layers = std::max(chunk_layers, s.vstage_layers[static_cast<size_t>(c * s.pp + stage)]);
  const ActivationOptions kept_by{s.recompute, s.sequence_parallel, s.flash_attention};
  const double kept = block_activation_bytes(s.model, s.microbatch, s.tp, s.dtype_bytes, kept_by);
  m.activations = static_cast<double>(m.in_flight) * chunk_layers * kept;
  // The block being recomputed holds what the recomputation brings back.
  ActivationOptions all = kept_by;
  all.recompute = Recompute::kNone;
  const double working = block_activation_bytes(s.model, s.microbatch, s.tp, s.dtype_bytes, all);
  if (s.recompute == Recompute::kFull) m.activations += working;
  if (s.recompute == Recompute::kSelective)
    m.activations += working - block_activation_bytes(s.model, s.microbatch, s.tp,
                                                      s.dtype_bytes, kept_by);
  if (stage == s.pp - 1)
    m.activations += static_cast<double>(kLogitBytes) * static_cast<double>(s.microbatch) *
                     static_cast<double>(s.model.seq) * static_cast<double>(s.model.vocab) / s.tp;
  return m;
}

Memory peak_memory(const StepSpec& s) {
  Memory best = stage_memory(s, 0);
  for (int st = 1; st < s.pp; ++st) {
    const Memory m = stage_memory(s, st);
    if (m.total() > best.total()) best = m;
  }
  return best;
}

namespace {

std::vector<int> divisors(int n) {
  std::vector<int> out;
  for (int k = 1; k <= n; ++k)
    if (n % k == 0) out.push_back(k);
  return out;
}

}  // namespace

Plan plan(const ClusterSpec& cluster, const PlanOptions& o) {
  const GptShape& g = o.model;
  if (g.layers < 1 || g.hidden < 1 || g.heads < 1 || g.seq < 1 || g.vocab < 1)
    throw ConfigError(
        "model.layers, model.d_model, model.heads, model.seq_len and model.vocab "
        "must all be positive to plan");
  if (o.batch < 1) throw ConfigError("train.batch_size must be positive to plan");
  std::vector<int> tps = o.tps;
  if (tps.empty()) tps = divisors(cluster.gpus_per_node);
  for (int t : tps)
    if (t < 1 || cluster.gpus_per_node % t != 0)
      throw ConfigError(concat("parallel.tp = ", t,
                               " does not divide cluster.gpus_per_node = ", cluster.gpus_per_node,
                               " (a tensor-parallel group stays inside a node)"));
  std::erase_if(tps, [&](int t) { return g.heads % t != 0 || g.hidden % t != 0; });
  if (tps.empty())
    throw ConfigError(concat("model.heads = ", g.heads, " and model.d_model = ", g.hidden,
                             ": no tensor-parallel degree t dividing cluster.gpus_per_node = ",
                             cluster.gpus_per_node, " divides both"));

  if (o.memory_margin < 0 || o.memory_margin >= 1)
    throw ConfigError(concat("cluster.gpu.memory_margin = ", o.memory_margin,
                             ": the share of memory kept free must be in [0, 1)"));
  const double usable = static_cast<double>(cluster.gpu.memory) * (1 - o.memory_margin);
  std::vector<const pp::ScheduleEntry*> schedules;
  for (const pp::ScheduleEntry& e : pp::schedule_registry())
    if (o.schedules.empty() || std::ranges::find(o.schedules, e.name) != o.schedules.end())
      schedules.push_back(&e);
  if (schedules.empty()) throw ConfigError("parallel.schedule: no registered schedule to plan with");
  const pp::ScheduleEntry* first_plain = nullptr;
  for (const pp::ScheduleEntry* e : schedules)
    if (!first_plain && e->caps.max_chunks == 1) first_plain = e;
  // v: the given list, or every v for which p·v divides the layers.
  auto chunk_list = [&](int p) {
    if (!o.chunks.empty()) return o.chunks;
    std::vector<int> out;
    for (int v = 1; p * v <= g.layers; ++v)
      if (v == 1 || g.layers % (p * v) == 0) out.push_back(v);
    return out;
  };
  auto sp = [&](int t) { return o.sequence_parallel && t > 1; };

  Plan out;
  out.smallest_total = std::numeric_limits<double>::infinity();
  bool batch_usable = false;
  const int n = cluster.gpus();
  for (int t : tps) {
    for (int p : divisors(n / t)) {
      if (p > g.layers) break;
      const int d = n / (p * t);
      if (o.batch % d != 0) continue;
      for (int64_t b : o.microbatches) {
        if (b < 1 || (o.batch / d) % b != 0) continue;
        const int m = static_cast<int>(o.batch / d / b);
        for (const pp::ScheduleEntry* e : schedules) {
          for (int v : chunk_list(p)) {
            // An interleaved schedule at v = 1 is 1F1B: tried once, as 1F1B.
            // Without a pipeline every schedule is the same: tried once.
            if (p == 1 ? v > 1 || e != first_plain : (v > 1) != (e->caps.max_chunks > 1))
              continue;
            const pp::ScheduleShape shape{p, m, v, static_cast<int>(g.layers)};
            if (p > 1 && !pp::admits(e->caps, shape)) continue;
            if (v > 1 && g.layers % (p * v) != 0) continue;
            batch_usable = true;
            for (int sg = 0; sg < (t > 1 && p > 1 && !sp(t) ? 2 : 1); ++sg) {
              StepSpec s;
              s.model = g;
              s.pp = p;
              s.tp = t;
              s.dp = d;
              s.order = o.order;
              s.batch = o.batch;
              s.microbatches = m;
              s.microbatch = b;
              s.chunks = v;
              s.schedule = p == 1 ? "1f1b" : e->name;
              s.scatter_gather = sg == 1;
              s.vstage_layers = pp::partition_layers(static_cast<int>(g.layers), p, v);
              s.sync = o.sync;
              s.tp_allreduce = o.tp_allreduce;
              s.recompute = o.recompute;
              s.sequence_parallel = sp(t);
              s.flash_attention = o.flash_attention;
              s.zero = d > 1 ? o.zero : 0;
              s.dtype_bytes = o.dtype_bytes;
              s.grad_bytes = o.grad_bytes;
              const Memory mem = peak_memory(s);
              ++out.enumerated;
              if (mem.total() < out.smallest_total) {
                out.smallest_total = mem.total();
                out.smallest = s;
              }
              if (mem.total() > usable) continue;
              StepResult r = simulate_step(cluster, s);
              r.order.clear();
              out.ranked.push_back({s, mem, std::move(r)});
            }
          }
        }
      }
    }
  }
  if (!batch_usable)
    throw ConfigError(concat("train.batch_size = ", o.batch, ": no grid of the ", n,
                             " GPUs has a d·b·m (m ≥ p) equal to it with b in the micro-batch "
                             "sizes tried"));
  if (out.ranked.empty())
    throw ConfigError(concat("cluster.gpu.memory = ", cluster.gpu.memory / double(1 << 30),
                             " GiB (", 100 * (1 - o.memory_margin),
                             " % usable, cluster.gpu.memory_margin): the model fits at no grid of ", n,
                             " GPUs; the least any needs is ", out.smallest_total / double(1 << 30),
                             " GiB (p=", out.smallest.pp, " t=", out.smallest.tp,
                             " d=", out.smallest.dp, " b=", out.smallest.microbatch, ")"));
  std::stable_sort(out.ranked.begin(), out.ranked.end(),
                   [](const auto& a, const auto& b) { return a.result.step_s < b.result.step_s; });
  return out;
}

}  // namespace psar::sim
