// psar plan CONFIG.yaml [--gpus N] [--batch B] [--memory 80G] [--layers L]
//   [--hidden H] [--heads A] [--seq S] [--vocab V] [--tp 1,2,..]
//   [--microbatch 1,2,4,8] [--chunks 1,2,4] [--top N] [--format table|csv|json]
//
// The parallelism planner (sim/plan.h; docs/simulate.md): every
// (p, t, d, b, m, v, scatter/gather) of the config's GPT on its cluster that
// fits in cluster.gpu.memory, ranked by the simulated step, the top N printed
// with their memory and time breakdown; then the notes' rules as checks
// (t ≤ GPUs per node, p just large enough to fit, d to scale). The flags are
// shorthands for --set of model.*, train.batch_size, cluster.*; a model or
// cluster no grid can hold is a ConfigError naming the field (exit 2).

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <string>

#include "core/csv.h"
#include "core/errors.h"
#include "sim/plan.h"
#include "tools/cli.h"
#include "trainer/schema.h"

namespace psar {

namespace {

constexpr const char* kUsage =
    "usage: psar plan CONFIG.yaml [--gpus N] [--batch B] [--memory 80G] [--layers L] "
    "[--hidden H] [--heads A] [--seq S] [--vocab V] [--tp LIST] [--microbatch LIST] "
    "[--chunks LIST] [--top N] [--format table|csv|json] [--set key=value ...]";

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

std::string num(double v) { return CsvWriter::num(v); }

// A difference of sums that should be 0 can come out as 1e-17.
double tiny(double seconds) { return std::abs(seconds) < 1e-12 ? 0.0 : seconds; }

template <typename T>
std::vector<T> int_list(const std::string& flag, const std::string& text) {
  std::vector<T> out;
  for (const auto& item : split_list_arg(text))
    out.push_back(static_cast<T>(parse_int_arg("psar plan", flag, item, 1)));
  if (out.empty()) throw ConfigError("psar plan: " + flag + " needs at least one value");
  return out;
}

const char* kColumns[] = {"rank",
                          "p",
                          "t",
                          "d",
                          "b",
                          "m",
                          "v",
                          "schedule",
                          "scatter_gather",
                          "mem_weights_gib",
                          "mem_grads_gib",
                          "mem_adam_gib",
                          "mem_act_gib",
                          "mem_total_gib",
                          "in_flight",
                          "step_s",
                          "compute_s",
                          "tp_s",
                          "idle_s",
                          "sync_exposed_s",
                          "bubble",
                          "tflops_per_gpu"};

std::vector<std::string> row(int rank, const sim::Candidate& c) {
  const auto& s = c.spec;
  const auto& r = c.result;
  const auto& st = r.stages[static_cast<size_t>(c.memory.stage)];
  return {std::to_string(rank),
          std::to_string(s.pp),
          std::to_string(s.tp),
          std::to_string(s.dp),
          std::to_string(s.microbatch),
          std::to_string(s.microbatches),
          std::to_string(s.chunks),
          s.schedule,
          s.scatter_gather ? "true" : "false",
          num(c.memory.weights / kGiB),
          num(c.memory.gradients / kGiB),
          num(c.memory.optimizer / kGiB),
          num(c.memory.activations / kGiB),
          num(c.memory.total() / kGiB),
          std::to_string(c.memory.in_flight),
          num(r.step_s),
          num(st.compute_s),
          num(st.tp_s),
          num(tiny(st.idle_s)),
          num(r.sync_exposed_s),
          num(r.bubble_fraction),
          num(r.tflops_per_gpu)};
}

// The flags that stand for a config key: --batch 512 is --set train.batch_size=512.
const std::map<std::string, std::string> kKeyFlags = {
    {"--batch", "train.batch_size"}, {"--memory", "cluster.gpu.memory"},
    {"--layers", "model.layers"},    {"--hidden", "model.d_model"},
    {"--heads", "model.heads"},      {"--seq", "model.seq_len"},
    {"--vocab", "model.vocab"}};

}  // namespace

int cmd_plan(CliContext& ctx) {
  std::string config_path, format = "table";
  int top = 10;
  int64_t gpus = 0;
  sim::PlanOptions options;
  std::vector<std::string> overrides = ctx.overrides;
  std::vector<std::string> args = ctx.args;
  if (!args.empty() && !args.front().empty() && args.front()[0] != '-') {
    config_path = args.front();  // the config comes first
    args.erase(args.begin());
  }
  for (const auto& [flag, value] : split_flags("psar plan", args, kUsage)) {
    if (flag == "--help") {
      std::printf("%s\n", kUsage);
      return 0;
    }
    if (flag.empty() || flag[0] != '-') {
      throw ConfigError("psar plan: '" + flag + "': the config file comes first\n" + kUsage);
    } else if (flag == "--gpus")
      gpus = parse_int_arg("psar plan", flag, value, 1);
    else if (const auto key = kKeyFlags.find(flag); key != kKeyFlags.end())
      overrides.push_back(key->second + "=" + value);
    else if (flag == "--tp")
      options.tps = int_list<int>(flag, value);
    else if (flag == "--microbatch")
      options.microbatches = int_list<int64_t>(flag, value);
    else if (flag == "--chunks")
      options.chunks = int_list<int>(flag, value);
    else if (flag == "--top")
      top = static_cast<int>(parse_int_arg("psar plan", flag, value, 1));
    else if (flag == "--format") {
      if (value != "table" && value != "csv" && value != "json")
        throw ConfigError("psar plan: --format must be table, csv or json, got '" + value + "'");
      format = value;
    } else {
      throw ConfigError("psar plan: unknown option '" + flag + "'\n" + kUsage);
    }
  }
  if (config_path.empty()) throw ConfigError(kUsage);
  const Config probe = Config::load_file(config_path, config_schema(), overrides);
  if (gpus > 0) {
    const int64_t per_node = probe.get_int("cluster.gpus_per_node");
    if (per_node < 1 || gpus % per_node != 0)
      throw ConfigError(psar::detail::concat("--gpus = ", gpus,
                                             ": no grid can use it, it is not a multiple of "
                                             "cluster.gpus_per_node = ",
                                             per_node, " (cluster.nodes = GPUs / gpus_per_node)"));
    overrides.push_back("cluster.nodes=" + std::to_string(gpus / per_node));
  }
  const Config config = Config::load_file(config_path, config_schema(), overrides);
  if (config.get_string("model.type") != "gpt")
    throw ConfigError("model.type = " + config.get_string("model.type") +
                      ": psar plan models a GPT (model.type: gpt)");
  const sim::ClusterSpec cluster = sim::cluster_from_config(config);
  options.model = sim::gpt_shape_from_config(config);
  options.batch = config.get_int("train.batch_size");
  options.recompute = parse_recompute(config.get_string("train.recompute"));
  options.sequence_parallel = config.get_bool("parallel.sequence_parallel");
  options.flash_attention = config.get_bool("simulate.flash_attention");
  options.zero = static_cast<int>(config.get_int("sync.zero"));
  options.memory_margin = config.get_float("cluster.gpu.memory_margin");
  options.dtype_bytes = static_cast<int>(config.get_int("simulate.dtype_bytes"));
  options.grad_bytes = static_cast<int>(config.get_int("simulate.grad_bytes"));
  options.sync = config.get_string("sync.backend");
  if (options.sync == "ps") options.sync = "ring";  // the PS syncs d only; plan the allreduce
  options.tp_allreduce = config.get_string("parallel.tp_allreduce");
  options.order = config.get_string("parallel.order");

  const auto t0 = std::chrono::steady_clock::now();
  const sim::Plan plan = sim::plan(cluster, options);
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const size_t shown = std::min(plan.ranked.size(), static_cast<size_t>(top));

  if (format == "csv") {
    CsvWriter csv(std::vector<std::string>(std::begin(kColumns), std::end(kColumns)));
    for (size_t i = 0; i < shown; ++i) csv.row(row(static_cast<int>(i + 1), plan.ranked[i]));
    std::fputs(csv.text().c_str(), stdout);
    return 0;
  }
  if (format == "json") {
    std::string j = "{\n  \"gpus\": " + std::to_string(cluster.gpus()) +
                    ",\n  \"memory_gib\": " + num(cluster.gpu.memory / kGiB) +
                    ",\n  \"enumerated\": " + std::to_string(plan.enumerated) +
                    ",\n  \"fitting\": " + std::to_string(plan.ranked.size()) +
                    ",\n  \"planner_wall_s\": " + num(wall) + ",\n  \"top\": [";
    for (size_t i = 0; i < shown; ++i) {
      const auto cells = row(static_cast<int>(i + 1), plan.ranked[i]);
      j += std::string(i ? "," : "") + "\n    {";
      for (size_t k = 0; k < cells.size(); ++k) {
        const bool text = std::string(kColumns[k]) == "schedule";
        j += std::string(k ? ", " : "") + "\"" + kColumns[k] +
             "\": " + (text ? "\"" + cells[k] + "\"" : cells[k]);
      }
      j += "}";
    }
    j += "\n  ]\n}\n";
    std::fputs(j.c_str(), stdout);
    return 0;
  }

  const auto& g = options.model;
  std::printf("model           L=%ld h=%ld a=%ld s=%ld V=%ld (%.4g B parameters), B=%ld%s\n",
              static_cast<long>(g.layers), static_cast<long>(g.hidden), static_cast<long>(g.heads),
              static_cast<long>(g.seq), static_cast<long>(g.vocab),
              static_cast<double>(sim::model_params(g)) / 1e9, static_cast<long>(options.batch),
              options.recompute != Recompute::kNone
                  ? (std::string(", ") + recompute_name(options.recompute) +
                     " recomputation").c_str()
                  : "");
  std::printf("cluster         %d GPUs (%d nodes of %d), %.4g GiB each\n", cluster.gpus(),
              cluster.nodes, cluster.gpus_per_node, cluster.gpu.memory / kGiB);
  std::printf(
      "memory model    weights %d B + gradients %d B + Adam %d B per parameter, ZeRO stage %d "
      "over d; activations: schedule peak in flight x layers x per-layer bytes%s%s "
      "(sim/plan.h); %.0f %% of memory kept free\n",
      options.dtype_bytes, options.grad_bytes, sim::kAdamBytesPerParam, options.zero,
      options.sequence_parallel ? ", sequence parallel" : "",
      options.flash_attention ? ", flash attention" : "", 100 * options.memory_margin);
  std::printf("candidates      %d enumerated, %zu fit, planner %.2f s\n\n", plan.enumerated,
              plan.ranked.size(), wall);
  std::printf(
      "%4s %4s %2s %4s %2s %5s %2s %-11s %2s | %7s %7s %7s %7s %7s %4s | %8s %8s %8s "
      "%8s %8s %6s %7s\n",
      "rank", "p", "t", "d", "b", "m", "v", "schedule", "sg", "weights", "grads", "adam", "act",
      "total", "infl", "step_s", "compute", "tp", "idle", "dp_sync", "bubble", "TFLOP/s");
  for (size_t i = 0; i < shown; ++i) {
    const auto& c = plan.ranked[i];
    const auto& s = c.spec;
    const auto& st = c.result.stages[static_cast<size_t>(c.memory.stage)];
    std::printf(
        "%4zu %4d %2d %4d %2ld %5d %2d %-11s %2s | %7.2f %7.2f %7.2f %7.2f %7.2f %4d | "
        "%8.4g %8.4g %8.4g %8.4g %8.4g %6.3f %7.1f\n",
        i + 1, s.pp, s.tp, s.dp, static_cast<long>(s.microbatch), s.microbatches, s.chunks,
        s.schedule.c_str(), s.scatter_gather ? "y" : "n", c.memory.weights / kGiB,
        c.memory.gradients / kGiB, c.memory.optimizer / kGiB, c.memory.activations / kGiB,
        c.memory.total() / kGiB, c.memory.in_flight, c.result.step_s, st.compute_s, st.tp_s,
        tiny(st.idle_s), c.result.sync_exposed_s, c.result.bubble_fraction,
        c.result.tflops_per_gpu);
  }
  std::printf(
      "(memory in GiB per GPU of the fullest stage; time in s, compute/tp/idle of "
      "that stage)\n\n");

  // The notes' rules (docs/simulate.md, "psar plan"): t up to the GPUs of a node,
  // the model-parallel size t·p just large enough to fit, d for the rest.
  // The rule's grid: the smallest fitting t·p, at it the largest t; its best
  // candidate against the planner's first.
  const sim::Candidate& best = plan.ranked.front();
  int rule_mp = 0, rule_t = 0, min_p_at_best_t = best.spec.pp;
  for (const auto& c : plan.ranked) {
    const int mp = c.spec.tp * c.spec.pp;
    if (rule_mp == 0 || mp < rule_mp) rule_mp = mp, rule_t = 0;
    if (mp == rule_mp) rule_t = std::max(rule_t, c.spec.tp);
    if (c.spec.tp == best.spec.tp) min_p_at_best_t = std::min(min_p_at_best_t, c.spec.pp);
  }
  size_t rule_rank = 0;  // ranked is fastest first: the first match is its best
  for (size_t i = 0; i < plan.ranked.size() && !rule_rank; ++i)
    if (plan.ranked[i].spec.tp == rule_t &&
        plan.ranked[i].spec.tp * plan.ranked[i].spec.pp == rule_mp)
      rule_rank = i + 1;
  const auto& rule = plan.ranked[rule_rank - 1];
  auto mark = [](bool ok) { return ok ? "ok" : "no"; };
  std::printf("check t <= GPUs per node   %s  best t=%d, %d GPUs per node\n",
              mark(best.spec.tp <= cluster.gpus_per_node), best.spec.tp, cluster.gpus_per_node);
  std::printf("check p just large to fit  %s  best p=%d; the smallest p that fits at t=%d is %d\n",
              mark(best.spec.pp == min_p_at_best_t), best.spec.pp, best.spec.tp, min_p_at_best_t);
  std::printf(
      "check d to scale           %s  best d=%d; the smallest fitting t·p is %d, "
      "leaving d=%d\n",
      mark(best.spec.dp == cluster.gpus() / rule_mp), best.spec.dp, rule_mp,
      cluster.gpus() / rule_mp);
  std::printf(
      "rule's grid                t=%d p=%d d=%d ranks %zu of %zu: %.1f TFLOP/s per GPU "
      "vs the best %.1f (%+.1f %%)\n",
      rule.spec.tp, rule.spec.pp, rule.spec.dp, rule_rank, plan.ranked.size(),
      rule.result.tflops_per_gpu, best.result.tflops_per_gpu,
      100.0 * (rule.result.tflops_per_gpu / best.result.tflops_per_gpu - 1.0));
  return 0;
}

}  // namespace psar
