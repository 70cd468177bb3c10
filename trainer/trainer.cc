#include "trainer/trainer.h"

#include <algorithm>
#include <cstdio>

#include "core/csv.h"
#include "core/errors.h"
#include "core/log.h"
#include "core/ops.h"
#include "core/timer.h"
#include "core/trace.h"
#include "comm/netem.h"
#include "modelpar/grid.h"
#include "allreduce/allreducer.h"
#include "trainer/gradient_sync.h"
#include "trainer/pipeline_trainer.h"
#include "trainer/run_common.h"
#include "workloads/model.h"

namespace psar {

namespace {

// Test loss and accuracy, the test set split evenly over the workers.
EvalStats evaluate(Model& model, const Dataset& test, Comm& workers) {
  EvalStats total;
  for_each_eval_batch(test, workers.rank(), workers.size(), [&](const Batch& batch) {
    const EvalStats s = model.evaluate(batch);
    total.loss_sum += s.loss_sum;
    total.correct += s.correct;
    total.count += s.count;
  });
  return sum_eval(workers, total);
}

}  // namespace

TrainResult train(Comm& world, const Config& config, const TrainOptions& options) {
  const Stopwatch wall;
  TrainResult result;
  world.set_timeout(config.get_duration("sync.timeout"));
  const NetModel network = apply_network_model(world, config);

  // ---- model, data, parameters: identical on every rank -------------------
  const DatasetPair data = load_dataset(config);
  const std::string sync_name = config.get_string("sync.backend");

  // ---- model parallelism: the (p, t, d) grid --------------------------------
  const int tp = static_cast<int>(config.get_int("parallel.tp"));
  const int pp = static_cast<int>(config.get_int("parallel.pp"));
  std::unique_ptr<ProcessGrid> grid;
  std::unique_ptr<Allreducer> tp_allreduce;
  ModelContext context;
  if (tp != 1 || pp != 1) {
    if (sync_name == "ps")
      throw ConfigError("sync.backend ps runs data parallelism only; set parallel.tp and "
                        "parallel.pp to 1, or choose an allreduce backend");
    grid = std::make_unique<ProcessGrid>(world, make_grid_shape(world.size(), tp, pp));
    if (pp != 1) return train_pipeline(world, *grid, config, options, data, network);
    tp_allreduce = make_allreducer(config.get_string("parallel.tp_allreduce"));
    context.tp = &grid->tp();
    context.tp_allreduce = tp_allreduce.get();
  }
  std::unique_ptr<Model> model = make_model(config, *data.train, context);
  ParamStore store;
  model->declare(store);
  const auto seed = static_cast<uint64_t>(config.get_int("train.seed"));
  store.finalize(seed);
  model->bind(store);

  // ---- steps ---------------------------------------------------------------
  const StepPlan plan = plan_steps(config, data.train->size());
  const int64_t batch_size = plan.batch_size, steps_per_epoch = plan.steps_per_epoch,
                total_steps = plan.total_steps;

  // ---- gradient synchronization ----------------------------------------------
  OptimizerOptions optimizer = optimizer_options(config);
  optimizer.total_steps = total_steps;
  SyncInit init{world, config, store, optimizer, grid ? &grid->dp() : nullptr};
  SyncSetup setup = make_gradient_sync(sync_name, init);
  if (setup.serve) {
    setup.serve();
    result.server = true;
    return result;
  }
  Comm& workers = *setup.workers;                 // every rank that trains
  Comm& dp = grid ? grid->dp() : workers;          // ranks that split the batch
  GradientSync& sync = *setup.sync;
  const int N = dp.size(), me = dp.rank();
  if (batch_size % N != 0)
    throw ConfigError("train.batch_size " + std::to_string(batch_size) + " is not divisible by " +
                      std::to_string(N) + " data-parallel ranks");
  const int64_t local_batch = batch_size / N;
  result.workers = N;

  const bool lead = workers.rank() == 0;
  begin_run_files(workers, config, options.out_dir);

  // ---- the loop --------------------------------------------------------------
  Tracer tracer(config.get_bool("train.trace"));
  // One origin for every rank's track: the host clock is shared, a barrier's
  // exit is not simultaneous (as in the pipeline trainer).
  if (tracer.enabled()) tracer.set_origin(workers.allreduce_max(now_seconds()));
  RunFiles files{options.out_dir, sync.name(), network.describe()};
  files.rows.reserve(static_cast<size_t>(total_steps));
  Batch batch;
  std::vector<int64_t> order;
  int64_t order_epoch = -1;
  CommCounters before = sync.counters();
  double train_time = 0;
  auto run_eval = [&](int64_t step) {
    const EvalStats s = evaluate(*model, *data.test, dp);
    result.test_accuracy = s.count ? static_cast<double>(s.correct) / s.count : 0.0;
    result.test_loss = s.count ? s.loss_sum / s.count : 0.0;
    files.evals.row({CsvWriter::num(step), CsvWriter::num(static_cast<double>(step) / steps_per_epoch),
               CsvWriter::num(result.test_loss), CsvWriter::num(result.test_accuracy)});
    if (lead && options.verbose) print_eval(step, result.test_loss, result.test_accuracy);
  };

  for (int64_t step = 0; step < total_steps; ++step) {
    const Stopwatch step_clock;
    const int64_t epoch = step / steps_per_epoch, pos = step % steps_per_epoch;
    if (epoch != order_epoch) {
      order = epoch_order(data.train->size(), seed, epoch);
      order_epoch = epoch;
    }
    const auto mine = std::span<const int64_t>(order).subspan(
        static_cast<size_t>(pos * batch_size + me * local_batch), static_cast<size_t>(local_batch));
    data.train->gather(mine, batch);

    store.zero_grads();
    double compute_s = 0, sync_s = 0, loss = 0;
    {
      ScopedTimer t(compute_s);
      Tracer::Scope span(tracer, "forward+backward", "forward");
      loss = model->forward_backward(batch, 1.0f);
    }
    {
      ScopedTimer t(sync_s);
      Tracer::Scope span(tracer, "sync", "sync");
      sync.step(store.params(), store.grads());
    }
    const CommCounters now = sync.counters();
    const double step_s = step_clock.seconds();
    train_time += step_s;
    files.rows.push_back({step + 1, static_cast<double>(step + 1) / steps_per_epoch, loss, step_s,
                    compute_s, sync_s, now.bytes_sent - before.bytes_sent,
                    now.bytes_recv - before.bytes_recv, now.messages_sent - before.messages_sent});
    before = now;
    result.losses.push_back(loss);

    const bool last = step + 1 == total_steps;
    if ((step + 1) % plan.log_every == 0 || last) {
      const double mean_loss = dp.allreduce_sum(loss) / N;
      if (lead && options.verbose)
        print_progress(plan, step, mean_loss, result.test_accuracy, train_time);
      if (last) result.final_loss = mean_loss;
    }
    if (plan.eval_after(step + 1)) run_eval(step + 1);
  }

  result.steps = total_steps;
  result.epochs = static_cast<double>(total_steps) / steps_per_epoch;
  result.params.assign(store.params().begin(), store.params().end());
  result.wall_s = workers.allreduce_max(wall.seconds());
  result.samples_per_s = static_cast<double>(batch_size) * total_steps /
                         workers.allreduce_max(train_time);

  // ---- outputs: every rank's rows gathered to rank 0 --------------------------
  write_run_files(workers, world, config, files, result, tracer);
  // Model-specific files (the GPT's tp.csv); collective, nothing without a run dir.
  model->write_run_files(files.out_dir, workers);
  return result;
}

}  // namespace psar
