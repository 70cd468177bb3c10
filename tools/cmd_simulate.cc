// psar simulate CONFIG.yaml [--set key=value ...] [--json FILE] [--csv FILE]
//
// One training step of the config's GPT on the modelled cluster of its
// cluster.* keys (sim/step.h; docs/simulate.md): the step time, its
// breakdown (compute, tensor-parallel all-reduces, pipeline idle, exposed
// data-parallel sync), TFLOP/s per GPU and the bubble. Runs without MPI; a
// config the cluster cannot hold is a ConfigError naming the field (exit 2).

#include <chrono>
#include <cstdio>
#include <string>

#include "core/csv.h"
#include "core/errors.h"
#include "sim/step.h"
#include "tools/cli.h"
#include "trainer/schema.h"

namespace psar {

namespace {

constexpr const char* kUsage =
    "usage: psar simulate CONFIG.yaml [--set key=value ...] [--json FILE] [--csv FILE]";

std::string num(double v) { return CsvWriter::num(v); }

std::string to_json(const sim::StepSpec& s, const sim::StepResult& r, double wall_s) {
  std::string j = "{\n";
  auto field = [&](const std::string& k, const std::string& v, bool last = false) {
    j += "  \"" + k + "\": " + v + (last ? "\n" : ",\n");
  };
  field("gpus", std::to_string(r.gpus));
  field("pp", std::to_string(s.pp));
  field("tp", std::to_string(s.tp));
  field("dp", std::to_string(s.dp));
  field("batch", std::to_string(s.batch));
  field("microbatch", std::to_string(s.microbatch));
  field("microbatches", std::to_string(s.microbatches));
  field("chunks", std::to_string(s.chunks));
  field("schedule", "\"" + s.schedule + "\"");
  field("scatter_gather", s.scatter_gather ? "true" : "false");
  field("sync", "\"" + s.sync + "\"");
  field("step_s", num(r.step_s));
  field("pipeline_s", num(r.pipeline_s));
  field("sync_exposed_s", num(r.sync_exposed_s));
  field("bubble_fraction", num(r.bubble_fraction));
  field("idle_share", num(r.idle_share));
  field("tp_allreduce_s", num(r.tp_allreduce_s));
  field("transfer_s", num(r.transfer_s));
  field("embedding_sync_s", num(r.embedding_sync_s));
  field("flops", num(r.flops));
  field("tflops_per_gpu", num(r.tflops_per_gpu));
  field("model_flops", num(r.model_flops));
  field("mfu", num(r.mfu));
  field("simulator_wall_s", num(wall_s));
  j += "  \"stages\": [";
  for (size_t i = 0; i < r.stages.size(); ++i) {
    const auto& st = r.stages[i];
    j += std::string(i ? ",\n" : "\n") + "    {\"stage\": " + std::to_string(i) +
         ", \"compute_s\": " + num(st.compute_s) + ", \"tp_s\": " + num(st.tp_s) +
         ", \"idle_s\": " + num(st.idle_s) + ", \"end_s\": " + num(st.end_s) +
         ", \"sync_s\": " + num(st.sync_s) + ", \"params_per_gpu\": " +
         std::to_string(st.params) + "}";
  }
  j += "\n  ]\n}\n";
  return j;
}

}  // namespace

int cmd_simulate(CliContext& ctx) {
  std::string config_path, json_path, csv_path;
  for (size_t i = 0; i < ctx.args.size(); ++i) {
    const std::string& a = ctx.args[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= ctx.args.size()) throw ConfigError("psar simulate: " + a + " needs a value");
      return ctx.args[++i];
    };
    if (a == "--json") json_path = value();
    else if (a == "--csv") csv_path = value();
    else if (a == "-h" || a == "--help") {
      std::printf("%s\n", kUsage);
      return 0;
    } else if (!a.empty() && a[0] == '-') {
      throw ConfigError("psar simulate: unknown option '" + a + "'\n" + kUsage);
    } else if (config_path.empty()) {
      config_path = a;
    } else {
      throw ConfigError("psar simulate: more than one config file given\n" + std::string(kUsage));
    }
  }
  if (config_path.empty()) throw ConfigError(kUsage);
  const Config config = Config::load_file(config_path, config_schema(), ctx.overrides);
  const sim::ClusterSpec cluster = sim::cluster_from_config(config);
  const sim::StepSpec spec = sim::step_from_config(config, cluster);

  const auto t0 = std::chrono::steady_clock::now();
  const sim::StepResult r = sim::simulate_step(cluster, spec);
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  std::printf("grid            p=%d t=%d d=%d (%d GPUs on %d nodes of %d)\n", spec.pp, spec.tp,
              spec.dp, r.gpus, cluster.nodes, cluster.gpus_per_node);
  std::printf("batch           B=%ld b=%ld m=%d v=%d %s%s, sync %s\n",
              static_cast<long>(spec.batch), static_cast<long>(spec.microbatch),
              spec.microbatches, spec.chunks, spec.schedule.c_str(),
              spec.scatter_gather ? " + scatter/gather" : "", spec.sync.c_str());
  std::printf("step_s          %.6g\n", r.step_s);
  std::printf("pipeline_s      %.6g\n", r.pipeline_s);
  const auto& s0 = r.stages.front();
  std::printf("  stage 0       compute %.6g  tp all-reduce %.6g  idle %.6g\n", s0.compute_s,
              s0.tp_s, s0.idle_s);
  std::printf("sync_exposed_s  %.6g  (%s)\n", r.sync_exposed_s, spec.sync.c_str());
  std::printf("bubble          %.4f  (idle / busy; idle share %.4f)\n", r.bubble_fraction,
              r.idle_share);
  std::printf("tp_allreduce_s  %.6g  (one [b, s, h] all-reduce)\n", r.tp_allreduce_s);
  std::printf("transfer_s      %.6g  (one activation, stage 0 -> 1)\n", r.transfer_s);
  std::printf("embedding_sync_s %.6g  (the tied embedding's gradient all-reduce)\n",
              r.embedding_sync_s);
  std::printf("tflops_per_gpu  %.2f  (%.4g FLOP per step)\n", r.tflops_per_gpu, r.flops);
  std::printf("mfu             %.4f  (%.4g model FLOP per step, without recomputation)\n",
              r.mfu, r.model_flops);
  std::printf("simulator_s     %.3f\n", wall);
  if (!json_path.empty()) write_file_atomic(json_path, to_json(spec, r, wall));
  if (!csv_path.empty()) {
    CsvWriter csv({"gpus", "pp", "tp", "dp", "batch", "microbatch", "microbatches", "chunks",
                   "schedule", "scatter_gather", "sync", "step_s", "pipeline_s",
                   "sync_exposed_s", "bubble_fraction", "idle_share", "tflops_per_gpu",
                   "simulator_wall_s"});
    csv.row({std::to_string(r.gpus), std::to_string(spec.pp), std::to_string(spec.tp),
             std::to_string(spec.dp), std::to_string(spec.batch), std::to_string(spec.microbatch),
             std::to_string(spec.microbatches), std::to_string(spec.chunks), spec.schedule,
             spec.scatter_gather ? "true" : "false", spec.sync, num(r.step_s), num(r.pipeline_s),
             num(r.sync_exposed_s), num(r.bubble_fraction), num(r.idle_share),
             num(r.tflops_per_gpu), num(wall)});
    csv.write(csv_path);
  }
  return 0;
}

}  // namespace psar
