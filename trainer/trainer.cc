#include "trainer/trainer.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>

#include "core/csv.h"
#include "core/errors.h"
#include "core/log.h"
#include "core/ops.h"
#include "core/rng.h"
#include "core/timer.h"
#include "core/trace.h"
#include "comm/netem.h"
#include "modelpar/grid.h"
#include "allreduce/allreducer.h"
#include "trainer/gradient_sync.h"
#include "workloads/model.h"

namespace psar {

namespace {

OptimizerOptions optimizer_options(const Config& c) {
  OptimizerOptions o;
  o.type = c.get_string("optimizer.type");
  o.lr = static_cast<float>(c.get_float("optimizer.lr"));
  o.momentum = static_cast<float>(c.get_float("optimizer.momentum"));
  o.weight_decay = static_cast<float>(c.get_float("optimizer.weight_decay"));
  o.beta1 = static_cast<float>(c.get_float("optimizer.beta1"));
  o.beta2 = static_cast<float>(c.get_float("optimizer.beta2"));
  o.eps = static_cast<float>(c.get_float("optimizer.eps"));
  o.schedule = c.get_string("optimizer.schedule");
  o.warmup_steps = c.get_int("optimizer.warmup_steps");
  return o;
}

// The same permutation of [0, n) on every rank for a given (seed, epoch).
std::vector<int64_t> epoch_order(int64_t n, uint64_t seed, int64_t epoch) {
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  const uint64_t stream = fnv1a("shuffle") + static_cast<uint64_t>(epoch);
  for (int64_t i = n - 1; i > 0; --i) {
    const auto b = Philox::block(seed, stream, static_cast<uint64_t>(i));
    const uint64_t r = (uint64_t{b[0]} << 32 | b[1]) % static_cast<uint64_t>(i + 1);
    std::swap(order[static_cast<size_t>(i)], order[static_cast<size_t>(r)]);
  }
  return order;
}

// Test loss and accuracy, the test set split evenly over the workers.
EvalStats evaluate(Model& model, const Dataset& test, Comm& workers) {
  const int64_t n = test.size();
  const int64_t lo = n * workers.rank() / workers.size(), hi = n * (workers.rank() + 1) / workers.size();
  constexpr int64_t kChunk = 1000;
  EvalStats total;
  Batch batch;
  std::vector<int64_t> rows;
  for (int64_t start = lo; start < hi; start += kChunk) {
    rows.resize(static_cast<size_t>(std::min(kChunk, hi - start)));
    std::iota(rows.begin(), rows.end(), start);
    test.gather(rows, batch);
    const EvalStats s = model.evaluate(batch);
    total.loss_sum += s.loss_sum;
    total.correct += s.correct;
    total.count += s.count;
  }
  total.loss_sum = workers.allreduce_sum(total.loss_sum);
  total.correct = static_cast<int64_t>(workers.allreduce_sum(static_cast<double>(total.correct)));
  total.count = static_cast<int64_t>(workers.allreduce_sum(static_cast<double>(total.count)));
  return total;
}

std::string hms(double s) {
  char buf[32];
  const long t = std::lround(std::max(0.0, s));
  if (t >= 3600) std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
  else std::snprintf(buf, sizeof buf, "%ld:%02ld", t / 60, t % 60);
  return buf;
}

struct StepRow {
  int64_t step;
  double epoch, loss, step_s, compute_s, sync_s;
  int64_t bytes_sent, bytes_recv, messages;
};

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
    if (pp != 1)
      throw ConfigError("parallel.pp > 1: pipeline-parallel training is not in psar train yet; "
                        "psar schedule simulates the schedules");
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
  const bool has_steps = config.has("train.steps"), has_epochs = config.has("train.epochs");
  if (has_steps == has_epochs)
    throw ConfigError("set exactly one of train.steps and train.epochs");
  const int64_t batch_size = config.get_int("train.batch_size");
  if (batch_size <= 0) throw ConfigError("train.batch_size must be positive");
  if (batch_size > data.train->size())
    throw ConfigError("train.batch_size " + std::to_string(batch_size) + " exceeds the " +
                      std::to_string(data.train->size()) + " training samples");
  const int64_t steps_per_epoch = data.train->size() / batch_size;
  const int64_t total_steps =
      has_steps ? config.get_int("train.steps")
                : static_cast<int64_t>(std::ceil(config.get_float("train.epochs") * steps_per_epoch));
  if (total_steps <= 0) throw ConfigError("train.steps/epochs must give at least one step");
  const int64_t log_every = std::max<int64_t>(1, config.get_int("train.log_every"));
  const int64_t eval_every = config.get_int("train.eval_every");

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
  const bool write = lead && !options.out_dir.empty();
  if (write) {
    make_dirs(options.out_dir);
    write_file_atomic(options.out_dir + "/config.yaml", config.dump());
  }

  // ---- the loop --------------------------------------------------------------
  Tracer tracer(config.get_bool("train.trace"));
  if (tracer.enabled()) {
    workers.barrier();
    tracer.set_origin(now_seconds());
  }
  std::vector<StepRow> rows;
  rows.reserve(static_cast<size_t>(total_steps));
  CsvWriter evals({"step", "epoch", "test_loss", "test_accuracy"});
  Batch batch;
  std::vector<int64_t> order;
  int64_t order_epoch = -1;
  CommCounters before = sync.counters();
  double train_time = 0;
  auto run_eval = [&](int64_t step) {
    const EvalStats s = evaluate(*model, *data.test, dp);
    result.test_accuracy = s.count ? static_cast<double>(s.correct) / s.count : 0.0;
    result.test_loss = s.count ? s.loss_sum / s.count : 0.0;
    evals.row({CsvWriter::num(step), CsvWriter::num(static_cast<double>(step) / steps_per_epoch),
               CsvWriter::num(result.test_loss), CsvWriter::num(result.test_accuracy)});
    if (lead && options.verbose)
      std::printf("eval  step %ld  test_loss %.4f  test_accuracy %.2f%%\n",
                  static_cast<long>(step), result.test_loss, 100.0 * result.test_accuracy);
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
    rows.push_back({step + 1, static_cast<double>(step + 1) / steps_per_epoch, loss, step_s,
                    compute_s, sync_s, now.bytes_sent - before.bytes_sent,
                    now.bytes_recv - before.bytes_recv, now.messages_sent - before.messages_sent});
    before = now;
    result.losses.push_back(loss);

    const bool last = step + 1 == total_steps;
    if ((step + 1) % log_every == 0 || last) {
      const double mean_loss = dp.allreduce_sum(loss) / N;
      if (lead && options.verbose) {
        const double sps = static_cast<double>(batch_size) * (step + 1) / train_time;
        const double eta = train_time / (step + 1) * static_cast<double>(total_steps - step - 1);
        char acc[16] = "-";
        if (result.test_accuracy >= 0)
          std::snprintf(acc, sizeof acc, "%.2f%%", 100.0 * result.test_accuracy);
        std::printf("epoch %ld  step %ld/%ld  loss %.4f  acc %s  %.0f samples/s  ETA %s\n",
                    static_cast<long>(epoch + 1), static_cast<long>(step + 1),
                    static_cast<long>(total_steps), mean_loss, acc, sps, hms(eta).c_str());
        std::fflush(stdout);
      }
      if (last) result.final_loss = mean_loss;
    }
    const bool epoch_end = (step + 1) % steps_per_epoch == 0;
    if ((eval_every > 0 && (step + 1) % eval_every == 0) || (eval_every <= 0 && epoch_end)) {
      run_eval(step + 1);
    } else if (last) {
      run_eval(step + 1);
    }
  }

  result.steps = total_steps;
  result.epochs = static_cast<double>(total_steps) / steps_per_epoch;
  result.params.assign(store.params().begin(), store.params().end());
  result.wall_s = workers.allreduce_max(wall.seconds());
  result.samples_per_s = static_cast<double>(batch_size) * total_steps /
                         workers.allreduce_max(train_time);

  // ---- outputs: every rank's rows gathered to rank 0 --------------------------
  std::string mine_csv;
  for (const auto& r : rows) {
    char buf[320];
    std::snprintf(buf, sizeof buf, "%d,%ld,%.6f,%.9g,%.9g,%.9g,%.9g,%ld,%ld,%ld\n", workers.rank(),
                  static_cast<long>(r.step), r.epoch, r.loss, r.step_s, r.compute_s, r.sync_s,
                  static_cast<long>(r.bytes_sent), static_cast<long>(r.bytes_recv),
                  static_cast<long>(r.messages));
    mine_csv += buf;
  }
  const auto all = workers.allgather_bytes(std::as_bytes(std::span<const char>(mine_csv)));
  if (write) {
    std::string steps_csv =
        "rank,step,epoch,loss,step_s,compute_s,sync_s,bytes_sent,bytes_recv,messages\n";
    for (const auto& part : all)
      steps_csv.append(reinterpret_cast<const char*>(part.data()), part.size());
    write_file_atomic(options.out_dir + "/steps.csv", steps_csv);
    evals.write(options.out_dir + "/eval.csv");
    CsvWriter summary({"experiment", "sync", "world_size", "steps", "epochs", "final_loss",
                       "test_accuracy", "wall_s", "samples_per_s", "network"});
    summary.row({config.get_string("experiment.name"), sync.name(), CsvWriter::num(world.size()),
                 CsvWriter::num(result.steps), CsvWriter::num(result.epochs),
                 CsvWriter::num(result.final_loss), CsvWriter::num(result.test_accuracy),
                 CsvWriter::num(result.wall_s), CsvWriter::num(result.samples_per_s),
                 network.describe()});
    summary.write(options.out_dir + "/summary.csv");
  }
  if (tracer.enabled()) {
    const std::string mine_trace = tracer.events_json(workers.rank());
    const auto traces = workers.allgather_bytes(std::as_bytes(std::span<const char>(mine_trace)));
    if (write) {
      std::vector<std::string> parts;
      for (const auto& t : traces) parts.emplace_back(reinterpret_cast<const char*>(t.data()), t.size());
      write_file_atomic(options.out_dir + "/trace.json", Tracer::document(parts));
    }
  }
  return result;
}

}  // namespace psar
