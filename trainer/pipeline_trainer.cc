#include "trainer/pipeline_trainer.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <numeric>

#include "core/errors.h"
#include "core/ops.h"
#include "core/timer.h"
#include "core/trace.h"
#include "modelpar/pp/executor.h"
#include "modelpar/pp/generators.h"
#include "modelpar/pp/partition.h"
#include "trainer/gradient_sync.h"
#include "trainer/pipeline_meter.h"
#include "trainer/run_common.h"
#include "workloads/pipeline_stages.h"

namespace psar {

namespace {

using psar::detail::concat;

struct PipelinePlan {
  pp::Schedule schedule;
  StageLayout layout;
  std::vector<int> layers_per_stage;  // [stage] Σ over its chunks
};

// Every check before the first step: the grid, the model's layers, the
// schedule's shape (its generator's ConfigError), the split of the batch.
PipelinePlan plan_pipeline(const Config& config, const Dataset& train, ProcessGrid& grid,
                           const StepPlan& steps) {
  const GridShape& g = grid.shape();
  if (g.tp != 1)
    throw ConfigError(concat("parallel.tp = ", g.tp, " with parallel.pp = ", g.pp,
                             ": tensor and pipeline parallelism in one run are not supported "
                             "yet; set one of them to 1"));
  const int p = g.pp, d = g.dp;
  const int v = static_cast<int>(config.get_int("parallel.chunks"));
  const int m = static_cast<int>(config.get_int("parallel.microbatches"));
  const int layers = pipeline_layers(config, train);
  std::vector<int64_t> counts;
  if (config.has("parallel.stage_layers")) counts = config.get_int_list("parallel.stage_layers");

  PipelinePlan plan;
  plan.schedule = pp::make_schedule(config.get_string("parallel.schedule"), {p, m, v, layers});
  plan.layout.stages = p;
  plan.layout.chunks = v;
  plan.layout.stage = grid.coord().pp;
  plan.layout.microbatches = m;
  const pp::EndCosts ends{config.get_bool("parallel.account_embedding") ? 1 : 0,
                          config.get_bool("parallel.account_head") ? 1 : 0};
  plan.layout.layers = pp::partition_layers(layers, p, v, counts, ends);
  if (steps.batch_size % (static_cast<int64_t>(d) * m) != 0)
    throw ConfigError(concat("train.batch_size ", steps.batch_size, " is not divisible by d·m = ",
                             d, "·", m, " = ", d * m, " (", d,
                             " data-parallel replicas of the pipeline, each cutting its slice "
                             "into parallel.microbatches = ", m, ")"));
  plan.layout.microbatch_rows = steps.batch_size / (static_cast<int64_t>(d) * m);
  plan.layers_per_stage.assign(static_cast<size_t>(p), 0);
  for (int u = 0; u < p * v; ++u)
    plan.layers_per_stage[static_cast<size_t>(u % p)] += plan.layout.layers[static_cast<size_t>(u)];
  return plan;
}

// Test loss and accuracy through the pipeline: the test set split over the
// replicas, each slice pushed through the p·v virtual stages in chunks of
// rows (a forward-only pass, one chunk of rows at a time). Its transfers are
// tagged above every tag of a batch (p2p.h): 2·p·v·m + the producer.
EvalStats evaluate_pipeline(PipelineStages& model, const StageLayout& layout, const Dataset& test,
                            Comm& pipeline, Comm& dp, Comm& world) {
  EvalStats total;
  std::vector<float> x, y;
  const int p = layout.stages, last = layout.vstages() - 1;
  const int tag0 = 2 * layout.vstages() * layout.microbatches;
  for_each_eval_batch(test, dp.rank(), dp.size(), [&](const Batch& batch) {
    for (int c = 0; c < layout.chunks; ++c) {
      const int u = layout.vstage(c);
      if (u > 0) {
        x.resize(static_cast<size_t>(model.eval_numel(u - 1, batch.size)));
        pipeline.recv((u - 1) % p, std::span<float>(x), tag0 + u - 1);
      }
      if (u < last) y.resize(static_cast<size_t>(model.eval_numel(u, batch.size)));
      const EvalStats s =
          model.eval_forward(c, batch, x, u < last ? std::span<float>(y) : std::span<float>());
      if (u < last) {
        pipeline.send((u + 1) % p, std::span<const float>(y), tag0 + u);
      } else {
        total.loss_sum += s.loss_sum;
        total.correct += s.correct;
        total.count += s.count;
      }
    }
  });
  return sum_eval(world, total);  // only the ranks of the last virtual stage hold counts
}

// The whole model in the serial arena's order: each stage's arena holds its
// chunks in order; virtual stage u = c·p + s is chunk c of stage s. A tied
// parameter's copy (the GPT's head on the last stage) is left out: the
// serial model holds it once.
std::vector<float> gather_params(ParamStore& store, const std::vector<std::pair<int, int>>& chunks,
                                 const std::vector<TiedParam>& tied, const StageLayout& layout,
                                 Comm& pipeline) {
  std::vector<float> mine;
  std::vector<int64_t> chunk_floats;
  for (const auto& [begin, end] : chunks) {
    const size_t before = mine.size();
    for (int k = begin; k < end; ++k) {
      const bool copy = std::any_of(tied.begin(), tied.end(),
                                    [&](const TiedParam& t) { return t.copy && t.param == k; });
      if (copy) continue;
      const auto values = store.param(k).span();
      mine.insert(mine.end(), values.begin(), values.end());
    }
    chunk_floats.push_back(static_cast<int64_t>(mine.size() - before));
  }
  const auto sizes = pipeline.allgather_bytes(std::as_bytes(std::span<const int64_t>(chunk_floats)));
  const auto arenas = pipeline.allgather_bytes(std::as_bytes(std::span<const float>(mine)));
  std::vector<float> out;
  for (int u = 0; u < layout.vstages(); ++u) {
    const int s = u % layout.stages, c = u / layout.stages;
    std::vector<int64_t> n(static_cast<size_t>(layout.chunks));
    std::memcpy(n.data(), sizes[static_cast<size_t>(s)].data(), n.size() * sizeof(int64_t));
    const int64_t first = std::accumulate(n.begin(), n.begin() + c, int64_t{0});
    const auto* arena = reinterpret_cast<const float*>(arenas[static_cast<size_t>(s)].data());
    out.insert(out.end(), arena + first, arena + first + n[static_cast<size_t>(c)]);
  }
  return out;
}

// Tags of the tied parameters' exchanges: above every tag of a batch and of
// the evaluation (p2p.h), two per tied parameter.
int tied_tag(const StageLayout& layout, size_t k, int which) {
  return 2 * layout.vstages() * layout.microbatches + layout.vstages() + 2 * static_cast<int>(k) +
         which;
}

// Megatron's embedding-group all-reduce: each tied parameter's gradient
// becomes the sum of its two copies' on both ranks (a + b = b + a in IEEE
// arithmetic, so both hold the same bits).
void reduce_tied_gradients(ParamStore& store, const std::vector<TiedParam>& tied,
                           const StageLayout& layout, Comm& pipeline, std::vector<float>& scratch) {
  for (size_t k = 0; k < tied.size(); ++k) {
    const std::span<float> grad = store.grad(tied[k].param).span();
    scratch.resize(grad.size());
    pipeline.sendrecv(tied[k].peer, std::span<const float>(grad), tied[k].peer,
                      std::span<float>(scratch), tied_tag(layout, k, 0));
    ops::add_inplace(grad.data(), scratch.data(), static_cast<int64_t>(grad.size()));
  }
}

// After the step, the owner's values overwrite the copy's. Both took a step
// on the same summed gradient, but the data-parallel reduction adds the
// replicas' gradients in an order that depends on where a value sits in the
// rank's arena (the ring starts each chunk at a different rank), and the two
// copies sit at different places: with three or more replicas the two sums
// can round differently, and the copies would drift apart.
void share_tied_params(ParamStore& store, const std::vector<TiedParam>& tied,
                       const StageLayout& layout, Comm& pipeline) {
  for (size_t k = 0; k < tied.size(); ++k) {
    const std::span<float> values = store.param(tied[k].param).span();
    if (tied[k].copy)
      pipeline.recv(tied[k].peer, values, tied_tag(layout, k, 1));
    else
      pipeline.send(tied[k].peer, std::span<const float>(values), tied_tag(layout, k, 1));
  }
}

// At the end of a run: the two copies of every tied parameter hold the same
// bits (the gathered model keeps only the owner's).
void check_tied_params(ParamStore& store, const std::vector<TiedParam>& tied,
                       const StageLayout& layout, Comm& pipeline, std::vector<float>& scratch) {
  for (size_t k = 0; k < tied.size(); ++k) {
    const std::span<float> values = store.param(tied[k].param).span();
    if (tied[k].copy) {
      pipeline.send(tied[k].peer, std::span<const float>(values), tied_tag(layout, k, 0));
      continue;
    }
    scratch.resize(values.size());
    pipeline.recv(tied[k].peer, std::span<float>(scratch), tied_tag(layout, k, 0));
    PSAR_CHECK(std::memcmp(scratch.data(), values.data(), values.size() * sizeof(float)) == 0,
               "tied parameter ", store.infos()[static_cast<size_t>(tied[k].param)].name,
               ": the copy on pipeline stage ", tied[k].peer, " differs from stage ",
               layout.stage, "'s");
  }
}

}  // namespace

TrainResult train_pipeline(Comm& world, ProcessGrid& grid, const Config& config,
                           const TrainOptions& options, const DatasetPair& data,
                           const NetModel& network) {
  const Stopwatch wall;
  TrainResult result;
  const StepPlan plan = plan_steps(config, data.train->size());
  const PipelinePlan pipe_plan = plan_pipeline(config, *data.train, grid, plan);
  const StageLayout& layout = pipe_plan.layout;
  Comm& pipeline = grid.pp();
  Comm& dp = grid.dp();
  const bool last_stage = layout.stage == layout.stages - 1;

  // ---- this stage's chunks and parameters -------------------------------------
  std::unique_ptr<PipelineStages> model = make_pipeline_stages(config, *data.train, layout);
  ParamStore store;
  std::vector<std::pair<int, int>> chunk_params;  // [chunk] its parameters' store indices
  for (int c = 0; c < layout.chunks; ++c) {
    const int before = static_cast<int>(store.infos().size());
    model->declare(store, c);
    chunk_params.emplace_back(before, static_cast<int>(store.infos().size()));
  }
  const auto seed = static_cast<uint64_t>(config.get_int("train.seed"));
  store.finalize(seed);
  model->bind(store);
  const std::vector<TiedParam> tied = model->tied_params();
  std::vector<float> tied_scratch;

  // ---- gradient synchronization over the replicas of this stage ---------------
  OptimizerOptions optimizer = optimizer_options(config);
  optimizer.total_steps = plan.total_steps;
  SyncInit init{world, config, store, optimizer, &dp};
  SyncSetup setup = make_gradient_sync(config.get_string("sync.backend"), init);
  PSAR_CHECK(setup.sync && !setup.serve, "a pipeline run got a parameter-server setup");
  Comm& workers = *setup.workers;
  GradientSync& sync = *setup.sync;
  const int d = dp.size();
  const int64_t local_batch = plan.batch_size / d;
  result.workers = d;
  begin_run_files(workers, config, options.out_dir);

  // ---- the loop --------------------------------------------------------------
  Tracer tracer(config.get_bool("train.trace"));
  pp::StageExecutor executor(pipe_plan.schedule, pipeline, *model, {&tracer});
  PipelineMeter meter(pipe_plan.schedule, layout.stage);
  RunFiles files{options.out_dir, sync.name(), network.describe()};
  files.rows.reserve(static_cast<size_t>(plan.total_steps));
  // One origin for every rank's track: the host clock is shared, a barrier's
  // exit is not simultaneous.
  tracer.set_origin(workers.allreduce_max(now_seconds()));
  Batch batch;
  std::vector<int64_t> order;
  int64_t order_epoch = -1;
  double train_time = 0;
  const bool lead = world.rank() == 0;
  for (int64_t step = 0; step < plan.total_steps; ++step) {
    const Stopwatch step_clock;
    const int64_t epoch = step / plan.steps_per_epoch, pos = step % plan.steps_per_epoch;
    if (epoch != order_epoch) {
      order = epoch_order(data.train->size(), seed, epoch);
      order_epoch = epoch;
    }
    data.train->gather(std::span<const int64_t>(order).subspan(
                           static_cast<size_t>(pos * plan.batch_size + dp.rank() * local_batch),
                           static_cast<size_t>(local_batch)),
                       batch);
    model->set_batch(batch);
    store.zero_grads();
    const CommCounters pipe0 = pipeline.counters(), sync0 = sync.counters();
    const pp::StageRun run = executor.run();
    double sync_s = 0;
    {
      ScopedTimer t(sync_s);
      Tracer::Scope span(tracer, "sync", "sync");
      reduce_tied_gradients(store, tied, layout, pipeline, tied_scratch);
      sync.step(store.params(), store.grads());
      share_tied_params(store, tied, layout, pipeline);
    }
    meter.add(run, plan.total_steps == 1 || step > 0);
    const CommCounters pipe1 = pipeline.counters(), sync1 = sync.counters();
    const double step_s = step_clock.seconds();
    train_time += step_s;
    const double loss = model->batch_loss();
    files.rows.push_back(
        {step + 1, static_cast<double>(step + 1) / plan.steps_per_epoch, loss, step_s,
         run.compute_s, sync_s,
         pipe1.bytes_sent - pipe0.bytes_sent + sync1.bytes_sent - sync0.bytes_sent,
         pipe1.bytes_recv - pipe0.bytes_recv + sync1.bytes_recv - sync0.bytes_recv,
         pipe1.messages_sent - pipe0.messages_sent + sync1.messages_sent - sync0.messages_sent});
    result.losses.push_back(loss);

    const bool last = step + 1 == plan.total_steps;
    if ((step + 1) % plan.log_every == 0 || last) {
      const double mean_loss = world.allreduce_sum(last_stage ? loss : 0.0) / d;
      if (lead && options.verbose)
        print_progress(plan, step, mean_loss, result.test_accuracy, train_time);
      if (last) result.final_loss = mean_loss;
    }
    if (model->evaluates() && plan.eval_after(step + 1)) {
      const EvalStats s = evaluate_pipeline(*model, layout, *data.test, pipeline, dp, world);
      result.test_accuracy = s.count ? static_cast<double>(s.correct) / s.count : 0.0;
      result.test_loss = s.count ? s.loss_sum / s.count : 0.0;
      files.evals.row({CsvWriter::num(step + 1),
                       CsvWriter::num(static_cast<double>(step + 1) / plan.steps_per_epoch),
                       CsvWriter::num(result.test_loss), CsvWriter::num(result.test_accuracy)});
      if (lead && options.verbose) print_eval(step + 1, result.test_loss, result.test_accuracy);
    }
  }

  // ---- results: the replica's loss on every stage, the whole model ------------
  const auto losses =
      pipeline.allgather_bytes(std::as_bytes(std::span<const double>(result.losses)));
  std::memcpy(result.losses.data(), losses.back().data(), result.losses.size() * sizeof(double));
  for (size_t k = 0; k < files.rows.size(); ++k) files.rows[k].loss = result.losses[k];
  check_tied_params(store, tied, layout, pipeline, tied_scratch);
  result.params = gather_params(store, chunk_params, tied, layout, pipeline);
  result.steps = plan.total_steps;
  result.epochs = static_cast<double>(plan.total_steps) / plan.steps_per_epoch;
  result.wall_s = workers.allreduce_max(wall.seconds());
  result.samples_per_s =
      static_cast<double>(plan.batch_size) * plan.total_steps / workers.allreduce_max(train_time);

  const PipelineMeter::Summary bubble = meter.write(pipeline, world, dp.rank(), *model,
                                                    pipe_plan.layers_per_stage, options.out_dir);
  if (lead && options.verbose)
    std::printf("pipeline %s: bubble %.4f measured (idle share %.4f), %.4f simulated at the "
                "measured costs, %.4f closed form\n",
                pp::describe(pipe_plan.schedule).c_str(), bubble.bubble, bubble.idle_share,
                bubble.bubble_sim, bubble.bubble_formula);
  write_run_files(workers, world, config, files, result, tracer);
  return result;
}

}  // namespace psar
