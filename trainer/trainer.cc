#include "trainer/trainer.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <numeric>

#include "allreduce/allreducer.h"
#include "allreduce/partition.h"
#include "allreduce/staged.h"
#include "comm/netem.h"
#include "core/device.h"
#include "core/errors.h"
#include "core/ops.h"
#include "core/timer.h"
#include "core/trace.h"
#include "modelpar/grid.h"
#include "modelpar/pp/executor.h"
#include "modelpar/pp/generators.h"
#include "modelpar/pp/partition.h"
#include "modelpar/tp/group.h"
#include "modelpar/tp/shard.h"
#include "trainer/agreement.h"
#include "sync/allreduce_sync.h"
#include "trainer/axes.h"
#include "core/checkpoint.h"
#include "sync/gradient_sync.h"
#include "trainer/hetero.h"
#include "trainer/model_parts.h"
#include "sync/overlap.h"
#include "trainer/pipeline_meter.h"
#include "trainer/run_common.h"
#include "trainer/step_log.h"
#include "workloads/model.h"

namespace psar {

namespace {

// A sparse model's tables as the arena's head of equal rows (docs/sparse.md).
SparseRows sparse_rows(const Model& model) {
  SparseRows rows;
  for (const SparseTable& t : model.sparse_tables()) {
    PSAR_CHECK(t.offset == rows.floats && (rows.row_floats == 0 || rows.row_floats == t.dim),
               "embedding table ", t.name, " is not the next equal-width rows of the arena's head");
    rows.row_floats = t.dim;
    rows.floats += t.rows * t.dim;
  }
  return rows;
}

// The batch's touched rows as row numbers of the arena's head, ascending.
std::vector<int64_t> touched_rows(const Model& model, const SparseRows& space) {
  std::vector<int64_t> rows;
  const auto tables = model.sparse_tables();
  for (size_t t = 0; t < tables.size(); ++t)
    for (const int64_t r : model.touched_rows(static_cast<int>(t)))
      rows.push_back(tables[t].offset / space.row_floats + r);
  return rows;  // tables in arena order, rows ascending within each
}

using psar::detail::concat;

// parallel.*: the grid, the schedule and the micro-batches.
struct Parallel {
  int t = 1, p = 1, v = 1, m = 1;
  std::string order, schedule;
  bool scatter_gather = false;
  bool hybrid = false;  // the hybrid CNN: the workers are one TP group that also splits the batch

  explicit Parallel(const Config& c)
      : t(static_cast<int>(c.get_int("parallel.tp"))),
        p(static_cast<int>(c.get_int("parallel.pp"))),
        v(static_cast<int>(c.get_int("parallel.chunks"))),
        m(static_cast<int>(c.get_int("parallel.microbatches"))),
        order(c.get_string("parallel.order")),
        schedule(c.get_string("parallel.schedule")),
        scatter_gather(c.get_bool("parallel.scatter_gather")),
        hybrid(c.get_bool("parallel.hybrid")) {}
};

// The rows of one micro-batch: B/(d·m), or a ConfigError naming the keys.
int64_t microbatch_rows(int64_t batch, int d, int m) {
  if (batch % (static_cast<int64_t>(d) * m) != 0)
    throw ConfigError(concat("train.batch_size ", batch, " is not divisible by d·m = ", d, "·", m,
                             " = ", d * m, " (", d,
                             " data-parallel replicas, each cutting its slice into "
                             "parallel.microbatches = ", m, ")"));
  return batch / (static_cast<int64_t>(d) * m);
}

// Test loss and accuracy through the pipeline: the test set split over the
// replicas, each slice pushed through the p·v virtual stages in chunks of
// rows (a forward-only pass). Its transfers are tagged above every tag of a
// batch (p2p.h): 2·p·v·m + the producer. Only TP rank 0 of the last stage
// adds its counts (its TP group computed the same ones).
// alone: this rank evaluates the whole test set by itself (no pipeline, no
// sum: ps.on_worker_failure continue, where a dead worker's slice would be lost).
EvalStats evaluate(Model& model, const StageLayout& layout, const Dataset& test, ProcessGrid& grid,
                   Comm& workers, bool alone) {
  EvalStats total;
  std::vector<float> x, y;
  const int p = layout.stages, last = layout.vstages() - 1;
  const int tag0 = 2 * layout.vstages() * layout.microbatches;
  Comm& pipeline = grid.pp();
  for_each_eval_batch(test, alone ? 0 : grid.dp().rank(), alone ? 1 : grid.dp().size(),
                      [&](const Batch& batch) {
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
      } else if (grid.coord().tp == 0) {
        total.loss_sum += s.loss_sum;
        total.correct += s.correct;
        total.count += s.count;
      }
    }
  });
  return alone ? total : sum_eval(workers, total);
}

// Floats this stage sends over the pipeline per batch: m activations per
// chunk that is not the last virtual stage, m gradients per chunk that is
// not the first; 1/t of each with scatter/gather.
int64_t pp_floats_formula(const Model& model, const StageLayout& layout, int sg) {
  if (layout.stages == 1) return 0;
  int64_t floats = 0;
  for (int c = 0; c < layout.chunks; ++c) {
    const int u = layout.vstage(c);
    if (u < layout.vstages() - 1) floats += layout.microbatches * model.boundary_numel(u) / sg;
    if (u > 0) floats += layout.microbatches * model.boundary_numel(u - 1) / sg;
  }
  return floats;
}

// This rank's parameters, counted from the serial shapes and their splits.
// The overlapped sync's buckets: this rank's tensors in the order the
// backward makes them final — chunk by chunk in the order of their last
// weight-gradient action, each chunk's tensors from its last down — the
// tied parameters left to the finalize step (their gradients are summed over
// their pair first).
std::vector<ArenaRange> overlap_buckets(const ParamStore& store, const pp::Schedule& schedule,
                                        int stage,
                                        const std::vector<std::pair<int, int>>& chunk_params,
                                        const std::vector<TiedParam>& tied,
                                        int64_t bucket_floats) {
  std::vector<int> last(chunk_params.size(), -1), order(chunk_params.size());
  const auto& actions = schedule.actions.at(static_cast<size_t>(stage));
  for (size_t k = 0; k < actions.size(); ++k)
    if (actions[k].op == pp::Op::kBackward || actions[k].op == pp::Op::kBackwardWeight)
      last[static_cast<size_t>(actions[k].chunk)] = static_cast<int>(k);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int a, int b) {
    return last[static_cast<size_t>(a)] < last[static_cast<size_t>(b)];
  });
  std::vector<BucketTensor> tensors;
  for (int c : order) {
    const auto [begin, end] = chunk_params[static_cast<size_t>(c)];
    for (int k = end; k-- > begin;) {
      const ParamInfo& info = store.infos()[static_cast<size_t>(k)];
      const bool skip = std::any_of(tied.begin(), tied.end(),
                                    [&](const TiedParam& t) { return t.param == k; });
      tensors.push_back({{info.offset, info.offset + info.numel}, skip});
    }
  }
  return plan_buckets(tensors, bucket_floats);
}

int64_t dp_floats_formula(const Model& model, const ParamStore& store, int t) {
  const ShardedParams* sharded = model.sharded_params();
  if (!sharded) return static_cast<int64_t>(store.size());
  int64_t n = 0;
  for (const auto& e : sharded->entries()) n += numel(shard_shape(e.full.shape, e.spec, t));
  return n;
}

// The checkpoint --resume continues from: the latest complete one in
// out_dir as world rank 0 sees it (broadcast, so every rank reads the same
// one), checked against this job on every rank. -1 for a new run.
// `resize`: whether it was written by another data-parallel size (dp_resize).
int64_t find_resume_step(Comm& world, const Config& config, const TrainOptions& options,
                         const JobIdentity& job, DpResize& resize) {
  const std::string& from = options.resume_from;
  if (from.empty()) return -1;
  int64_t step = world.rank() == 0 ? latest_checkpoint(from) : 0;
  world.broadcast_bytes(std::as_writable_bytes(std::span<int64_t>(&step, 1)), 0);
  if (step < 0)
    throw agreed(ConfigError("--resume " + from + ": no complete checkpoint in " + from +
                             "/checkpoints (set train.checkpoint_every to write them)"));
  const std::string dir = checkpoint_dir(from, step);
  const CheckpointFile manifest = CheckpointFile::read(manifest_path(dir));
  check_resumable(manifest, config, job, dir);
  resize = dp_resize(manifest, config, job);
  if (step >= job.total_steps)
    throw agreed(ConfigError("--resume: the checkpoint " + dir + " is at step " +
                             std::to_string(step) + " and this run has " +
                             std::to_string(job.total_steps) +
                             " steps: nothing is left to run (raise train.steps or train.epochs "
                             "to continue it)"));
  return step;
}

// This worker's part of a checkpoint: its slice of the parameters, the
// optimizer state it keeps, where the data order stands, the model's RNG.
CheckpointFile rank_checkpoint(int rank, const GridCoord& coord, int64_t step, const StepPlan& plan,
                               uint64_t seed, const ParamStore& store, GradientSync& sync,
                               const Model& model) {
  CheckpointFile f;
  f.set("kind", "rank");
  f.set_int("rank", rank);
  f.set("coord",
        std::to_string(coord.pp) + " " + std::to_string(coord.tp) + " " + std::to_string(coord.dp));
  f.set_int("step", step);
  f.set_int("epoch", step / plan.steps_per_epoch);
  f.set_int("epoch_position", step % plan.steps_per_epoch);
  f.set("data_order", "epoch_order(seed " + std::to_string(seed) + ", epoch " +
                          std::to_string(step / plan.steps_per_epoch) + ")");
  f.set_int("model_batches_seen", static_cast<int64_t>(model.batches_seen()));
  f.set_int("params", static_cast<int64_t>(store.size()));
  f.add_blob("params", store.params());
  if (Optimizer* opt = sync.optimizer()) {
    f.set_int("optimizer_steps", opt->steps());
    const auto state = opt->state();
    for (size_t b = 0; b < state.size(); ++b)
      f.add_blob("optimizer." + std::to_string(b), state[b]);
  }
  return f;
}

void restore_rank(const CheckpointFile& f, int rank, const GridCoord& coord, int64_t step,
                  ParamStore& store, GradientSync& sync, Model& model) {
  const std::string coord_text =
      std::to_string(coord.pp) + " " + std::to_string(coord.tp) + " " + std::to_string(coord.dp);
  if (f.get("kind") != "rank" || f.get_int("rank") != rank || f.get_int("step") != step ||
      f.get("coord") != coord_text || f.get_int("params") != static_cast<int64_t>(store.size()))
    throw DataError("checkpoint file '" + f.origin() + "' holds rank " + f.get("rank") +
                    " at step " + f.get("step") + ", grid coordinate (" + f.get("coord") + "), " +
                    f.get("params") + " parameters; expected rank " + std::to_string(rank) +
                    " at step " + std::to_string(step) + ", (" + coord_text + "), " +
                    std::to_string(store.size()));
  const auto params = f.blob("params");
  std::copy(params.begin(), params.end(), store.params().begin());
  if (Optimizer* opt = sync.optimizer()) {
    opt->set_steps(f.get_int("optimizer_steps"));
    const auto state = opt->state();
    for (size_t b = 0; b < state.size(); ++b) {
      const auto saved = f.blob("optimizer." + std::to_string(b));
      if (saved.size() != state[b].size())
        throw DataError("checkpoint file '" + f.origin() + "': optimizer state " +
                        std::to_string(b) + " holds " + std::to_string(saved.size()) +
                        " floats, expected " + std::to_string(state[b].size()));
      std::copy(saved.begin(), saved.end(), state[b].begin());
    }
  }
  model.set_batches_seen(static_cast<uint64_t>(f.get_int("model_batches_seen")));
}

// The bytes of the optimizer state this rank keeps (its buffers' sizes).
int64_t optimizer_state_bytes(GradientSync& sync) {
  int64_t bytes = 0;
  if (Optimizer* opt = sync.optimizer())
    for (const auto& b : opt->state()) bytes += static_cast<int64_t>(b.size_bytes());
  return bytes;
}

// A checkpoint written by `old_n` data-parallel replicas, resumed by replica
// `rank` of `n` of the same (stage, tensor rank) cell (dp_resize's reshard);
// `old_rank(q)` is the world rank that wrote the cell's replica q. The
// parameters (replicated over the cell), the step's counters and the model's
// RNG from replica 0's file, the optimizer state resharded from the old
// replicas' pieces (core/checkpoint.h).
void restore_resharded(const std::string& dir, int old_n, const std::function<int(int)>& old_rank,
                       int rank, int n, int64_t step, ParamStore& store, GradientSync& sync,
                       Model& model) {
  std::map<int, CheckpointFile> files;
  auto file = [&](int q) -> const CheckpointFile& {
    auto it = files.find(q);
    if (it == files.end())
      it = files.emplace(q, CheckpointFile::read(rank_checkpoint_path(dir, old_rank(q)))).first;
    return it->second;
  };
  const CheckpointFile& first = file(0);
  if (first.get_int("step") != step || first.get_int("params") != static_cast<int64_t>(store.size()))
    throw DataError("checkpoint file '" + first.origin() + "' holds step " + first.get("step") +
                    " and " + first.get("params") + " parameters; expected step " +
                    std::to_string(step) + " and " + std::to_string(store.size()));
  const auto params = first.blob("params");
  std::copy(params.begin(), params.end(), store.params().begin());
  model.set_batches_seen(static_cast<uint64_t>(first.get_int("model_batches_seen")));
  Optimizer* opt = sync.optimizer();
  if (!opt) return;
  opt->set_steps(first.get_int("optimizer_steps"));
  const auto state = opt->state();
  for (size_t b = 0; b < state.size(); ++b) {
    const std::string name = "optimizer." + std::to_string(b);
    const Partition before{static_cast<int64_t>(store.size()), old_n},
        after{static_cast<int64_t>(store.size()), n};
    std::vector<int64_t> bounds;
    for (int q = 0; q <= old_n; ++q) bounds.push_back(q == old_n ? before.count : before.offset(q));
    const auto piece = reshard_range(bounds, after.offset(rank), after.offset(rank) + after.size(rank),
                                     [&](int q) {
                                       const auto saved = file(q).blob(name);
                                       return std::vector<float>(saved.begin(), saved.end());
                                     });
    PSAR_CHECK(piece.size() == state[b].size(), "resharded optimizer state ", b, " holds ",
               piece.size(), " floats, the optimizer ", state[b].size());
    std::copy(piece.begin(), piece.end(), state[b].begin());
  }
}

// train.device, checked against this build, this machine and what runs on a
// CUDA device so far (docs/gpu.md): the MLP, the GPT and the CNN, one pipeline stage,
// tensor parallelism with the column_row split, no checkpoints, an allreduce
// backend. A ConfigError names the key.
Device training_device(const Config& config, const Parallel& par, const std::string& sync_name,
                       const SyncCapabilities& backend) {
  const Device device = parse_device(config.get_string("train.device"), "train.device");
  if (device == Device::kCpu) return device;
  require_device(device, "train.device");
  const auto refuse = [](const std::string& what) {
    throw ConfigError("train.device: cuda does not run " + what + " yet (docs/gpu.md)");
  };
  const std::string model = config.get_string("model.type");
  if (model != "mlp" && model != "gpt" && model != "cnn")
    refuse("model.type " + model + " (mlp, gpt and cnn do)");
  if (par.p > 1) refuse("pipeline parallelism (parallel.pp must be 1)");
  if (par.t > 1 && config.get_string("parallel.tp_split") != "column_row")
    refuse("parallel.tp_split " + config.get_string("parallel.tp_split") + " (column_row does)");
  if (config.get_int("train.checkpoint_every") > 0) refuse("checkpoints (train.checkpoint_every)");
  if (config.get_int("train.exit_at_step") > 0 || config.get_duration("train.exit_after") > 0)
    refuse("train.exit_at_step / train.exit_after (they end with a checkpoint)");
  if (!backend.model_parallel)
    refuse("sync.backend " + sync_name + " (choose an allreduce backend or nccl)");
  return device;
}

// Whether the run ends after a step: it runs on, exits (train.exit_at_step,
// train.exit_after) or stops on a signal (TrainOptions::stop_signal). The
// workers agree on the largest.
enum Stop { kRunOn = 0, kExit = 1, kTerminate = 2 };

// How far a run got, for the summary of a run that stops on an error.
struct Progress {
  bool lead = false;  // worker rank 0 of a run that started (its files exist)
  RunEnd end;
  int64_t steps_done = 0;
};

TrainResult run_training(Comm& world, const Config& config, const TrainOptions& options,
                         Progress& progress) {
  const Stopwatch wall;
  TrainResult result;
  world.set_timeout(config.get_duration("sync.timeout"));
  check_agreement(world, config, options.out_dir);
  const NetModel network = apply_network_model(world, config);
  const HeteroPlan hetero = HeteroPlan::from_config(config, world.size());

  // ---- data, steps, the grid: everything checked before any work ------------
  const DatasetPair data = load_dataset(config);
  const std::string sync_name = config.get_string("sync.backend");
  const Parallel par(config);
  const StepPlan plan = plan_steps(config, data.train->size());
  const int layers = model_layers(config, *data.train);
  const SyncCapabilities backend = sync_capabilities(sync_name, config);
  const Device device = training_device(config, par, sync_name, backend);
  if (device == Device::kCuda) use_cuda_device(local_cuda_device());
  // Every op of this thread runs on the training device (core/device.h).
  const DeviceScope on_device(device);
  if (!backend.model_parallel && par.t * par.p > 1)
    throw ConfigError(concat("sync.backend ", sync_name,
                             " runs data parallelism only (a shard group per model slice is not "
                             "built); parallel.tp = ", par.t, " and parallel.pp = ", par.p,
                             " need an allreduce backend"));
  std::vector<int64_t> counts;
  if (config.has("parallel.stage_layers")) counts = config.get_int_list("parallel.stage_layers");
  const pp::EndCosts ends{config.get_bool("parallel.account_embedding") ? 1 : 0,
                          config.get_bool("parallel.account_head") ? 1 : 0};
  const pp::Schedule schedule =
      pp::make_schedule(par.schedule, {par.p, par.m, par.v, layers});
  StageLayout layout;
  layout.stages = par.p;
  layout.chunks = par.v;
  layout.microbatches = par.m;
  layout.layers = pp::partition_layers(layers, par.p, par.v, counts, ends);

  // Model parallelism needs the grid before the model; data parallelism alone
  // builds it over the workers, which a backend with dedicated server ranks
  // splits off in its set-up (their number is known now).
  const int trainers = world.size() - backend.server_ranks;
  if (trainers < 1)
    throw ConfigError(concat("sync.backend ", sync_name, " takes ", backend.server_ranks,
                             " of the ", world.size(), " ranks as dedicated servers, which "
                             "leaves no worker"));
  // The hybrid CNN (workloads/cnn.h): the n workers are one tensor-parallel
  // group (d = 1: each gets the whole batch, the model takes its slice for
  // the convolutions), and the conv gradients are all-reduced over that
  // group with the --sync algorithm (hybrid_dp below).
  std::unique_ptr<Allreducer> hybrid_dp;
  if (par.hybrid) {
    if (par.t != 1 || par.p != 1)
      throw ConfigError(concat("parallel.hybrid splits the convolutions by the batch and the fully "
                               "connected layers by their columns over all the workers: set "
                               "parallel.tp = 1 and parallel.pp = 1 (got ", par.t, " and ", par.p,
                               ")"));
    const auto algos = allreducer_names(/*include_device=*/true);
    if (std::find(algos.begin(), algos.end(), sync_name) == algos.end())
      throw ConfigError("parallel.hybrid all-reduces the conv gradients over the workers with "
                        "an allreduce algorithm; sync.backend " + sync_name +
                        " is not one (choose ring, tree, mpi, ...)");
    if (config.get_bool("sync.overlap"))
      throw ConfigError("sync.overlap: parallel.hybrid syncs the conv gradients after the "
                        "backward only; set sync.overlap: false");
    hybrid_dp = make_allreducer(sync_name, allreduce_options(config));
    // On a CUDA device a host algorithm reduces a copy in pinned host memory.
    if (device != Device::kCpu && !find_allreducer(sync_name).device)
      hybrid_dp = stage_through_host(std::move(hybrid_dp));
  }
  const int grid_t = par.hybrid ? trainers : par.t;
  const GridShape shape = make_grid_shape(trainers, grid_t, par.p, par.order);
  layout.microbatch_rows = microbatch_rows(plan.batch_size, shape.dp, par.m);
  std::unique_ptr<ProcessGrid> grid;
  if (grid_t * par.p > 1) {
    grid = std::make_unique<ProcessGrid>(world, shape);
    layout.stage = grid->coord().pp;
  }
  std::unique_ptr<Allreducer> tp_allreduce;
  if (grid_t > 1) {
    const std::string name = config.get_string("parallel.tp_allreduce");
    tp_allreduce = make_allreducer(name, activation_allreduce_options(allreduce_options(config)));
    // On a CUDA device a host algorithm reduces a copy in pinned host memory.
    if (device != Device::kCpu && !find_allreducer(name).device)
      tp_allreduce = stage_through_host(std::move(tp_allreduce));
  }
  TpGroup tp(grid && grid_t > 1 ? &grid->tp() : nullptr, tp_allreduce.get());

  // ---- this rank's part of the model ----------------------------------------
  std::unique_ptr<Model> model = make_model(config, *data.train, {&tp, layout});
  ParamStore store;
  std::vector<std::pair<int, int>> chunk_params;  // [chunk] its parameters' store indices
  for (int c = 0; c < layout.chunks; ++c) {
    const int before = static_cast<int>(store.infos().size());
    model->declare(store, c);
    chunk_params.emplace_back(before, static_cast<int>(store.infos().size()));
  }
  const auto seed = static_cast<uint64_t>(config.get_int("train.seed"));
  store.finalize(seed, device);
  model->bind(store);
  const std::vector<TiedParam> tied = model->tied_params();
  std::vector<float> tied_scratch;
  check_parameter_counts(world, grid ? grid->coord().pp * grid_t + grid->coord().tp : 0,
                         static_cast<int64_t>(store.size()));

  // ---- checkpoints: the one to continue from, the plan -----------------------
  JobIdentity job;
  job.world_size = world.size();
  job.workers = trainers;
  job.pp = shape.pp;
  job.tp = shape.tp;
  job.dp = shape.dp;
  job.order = par.order;
  job.sync = sync_name;
  job.total_steps = plan.total_steps;
  job.psar_version = psar_version();
  DpResize resize;
  const int64_t first_step = find_resume_step(world, config, options, job, resize);
  const int64_t checkpoint_every = config.get_int("train.checkpoint_every");
  if (checkpoint_every < 0)
    throw ConfigError("train.checkpoint_every must be >= 0, got " +
                      std::to_string(checkpoint_every));
  // Stopping early (docs/checkpoints.md): at a step, after a duration of
  // this process's run. A resumed run past exit_at_step runs on.
  const int64_t exit_at_step = config.get_int("train.exit_at_step");
  const double exit_after = config.get_duration("train.exit_after");
  if (exit_at_step < 0 || exit_after < 0)
    throw ConfigError("train.exit_at_step and train.exit_after must be >= 0 (0 = off)");
  if (hetero.kill_rank >= 0 && hetero.kill_step >= plan.total_steps)
    throw ConfigError("hetero.kill_step " + std::to_string(hetero.kill_step) +
                      " is past the run's " + std::to_string(plan.total_steps) + " steps");
  // ps.on_worker_failure: continue — the workers' control plane (the step
  // log's gathers, the loss, the stop agreement, the end) goes on without a
  // worker that died (Comm::tolerate_failures); the evaluation is worker 0's
  // alone, over the whole test set. (sync_capabilities refused it for any
  // backend but the parameter server.)
  const bool survives = config.get_string("ps.on_worker_failure") == "continue";
  // The workers' control plane gives up on a dead worker after sync.timeout,
  // while the survivors are silent to the servers, which drop a worker
  // silent past ps.timeout: the first must come first.
  if (survives && !(config.get_duration("sync.timeout") < config.get_duration("ps.timeout")))
    throw ConfigError(concat("ps.on_worker_failure: continue needs sync.timeout (",
                             config.get_duration("sync.timeout"), " s) below ps.timeout (",
                             config.get_duration("ps.timeout"), " s): the workers must give up on a dead "
                      "worker before the servers give up on the live ones waiting for it"));
  if (survives && checkpoint_every > 0)
    throw ConfigError("train.checkpoint_every with ps.on_worker_failure: continue: a checkpoint "
                      "needs every worker's file, and a dead worker writes none (set "
                      "train.checkpoint_every 0)");
  if ((exit_at_step > 0 || exit_after > 0) && options.out_dir.empty())
    throw ConfigError("train.exit_at_step / train.exit_after end with a checkpoint: the run "
                      "needs a run directory (--out)");
  prepare_run_dir(world, options);

  // ---- gradient synchronization over this rank's data-parallel group --------
  OptimizerOptions optimizer = optimizer_options(config);
  optimizer.total_steps = plan.total_steps;
  SyncInit init{world,
                config,
                store,
                optimizer,
                grid ? &grid->dp() : nullptr,
                CheckpointPlan{options.out_dir, checkpoint_every, first_step,
                               options.resume_from},
                sparse_rows(*model)};
  SyncSetup setup = make_gradient_sync(sync_name, init);
  if (setup.serve) {
    setup.serve();
    result.server = true;
    return result;
  }
  Comm& workers = *setup.workers;  // every rank that trains
  workers.tolerate_failures(survives);
  GradientSync& sync = *setup.sync;
  // A backend whose servers keep the optimizer state (the parameter server)
  // saves it at train.checkpoint_every steps only: an early stop must fall on one.
  if (exit_at_step > 0 && !sync.optimizer() &&
      (checkpoint_every == 0 || exit_at_step % checkpoint_every != 0))
    throw ConfigError("train.exit_at_step " + std::to_string(exit_at_step) + " with sync.backend " +
                      sync_name + " must be a multiple of train.checkpoint_every (its servers " +
                      "save their state at those steps only)");
  PSAR_CHECK(workers.size() == trainers, "sync.backend ", sync_name, " left ", workers.size(),
             " workers, planned ", trainers);
  if (!grid) grid = std::make_unique<ProcessGrid>(workers, shape);
  Comm& dp = grid->dp();
  Comm& pipeline = grid->pp();
  const int d = dp.size();
  const int64_t local_batch = plan.batch_size / d;
  // Overlap: buckets synced on a communication thread while the backward runs.
  std::unique_ptr<OverlapSync> overlap;
  if (config.get_bool("sync.overlap")) {
    if (!sync.overlaps())
      throw ConfigError("sync.overlap: the " + sync.name() +
                        " backend syncs the whole model after the backward only; set "
                        "sync.overlap: false or choose an allreduce backend");
    const auto floats = [&](const char* key) {
      return std::max<int64_t>(1, config.get_bytes(key) / static_cast<int64_t>(sizeof(float)));
    };
    overlap = std::make_unique<OverlapSync>(
        sync, store,
        overlap_buckets(store, schedule, layout.stage, chunk_params, tied,
                        floats("sync.bucket_bytes")),
        dp,
        OverlapOptions{config.get_string("sync.priority") == "front_first",
                       floats("sync.priority_chunk_bytes")});
    // The layer-wise start hands the whole step to the communication thread:
    // no range may be left for the main thread (the PS has no pipeline, so no ties).
    PSAR_CHECK(!overlap->layerwise() || tied.empty(),
               "the layer-wise start of ", sync.name(), " with tied parameters");
  }
  const bool holds_loss = layout.stage == layout.stages - 1 && grid->coord().tp == 0;
  result.workers = d;
  result.first_step = first_step;
  const Stopwatch restore_clock;
  if (first_step >= 0) {
    const std::string dir = checkpoint_dir(options.resume_from, first_step);
    if (!resize.resized) {
      restore_rank(CheckpointFile::read(rank_checkpoint_path(dir, workers.rank())), workers.rank(),
                   grid->coord(), first_step, store, sync, *model);
    } else {  // onto another d: this rank's (stage, tensor rank) cell as the old grid held it
      const GridShape& now = grid->shape();
      const GridShape old_shape =
          make_grid_shape(now.pp * now.tp * resize.old_dp, now.tp, now.pp, par.order);
      const GridCoord& at = grid->coord();
      const auto old_rank = [&](int q) { return grid_rank(old_shape, {at.tp, q, at.pp}); };
      if (resize.reshard)  // a sharded optimizer state: each replica cuts its piece anew
        restore_resharded(dir, resize.old_dp, old_rank, grid->dp().rank(), grid->dp().size(),
                          first_step, store, sync, *model);
      else  // replicated: every replica restores the cell's replica 0
        restore_rank(CheckpointFile::read(rank_checkpoint_path(dir, old_rank(0))), old_rank(0),
                     {at.tp, 0, at.pp}, first_step, store, sync, *model);
    }
  }
  const double restore_s = workers.allreduce_max(restore_clock.seconds());
  begin_run_files(workers, config, options.out_dir);

  // ---- the loop --------------------------------------------------------------
  Tracer tracer(config.get_bool("train.trace"));
  pp::StageExecutor executor(schedule, pipeline, *model,
                             {.tracer = &tracer,
                              .scatter_gather = par.scatter_gather ? &grid->tp() : nullptr,
                              .gradient_sink = overlap.get(),
                              .param_gate = overlap && overlap->layerwise() ? overlap.get()
                                                                            : nullptr});
  PipelineMeter meter(schedule, layout.stage);
  const RunEnd run_end{options.out_dir, sync.name(), network.describe()};
  progress.end = run_end;
  progress.lead = workers.rank() == 0;
  StepLog log(workers, pipeline, grid->shape(), grid->coord(),
              {options.out_dir, grid_t > 1, first_step, options.resume_from});
  int64_t tp_formula = 0, gather_formula = 0;
  for (int c = 0; c < layout.chunks; ++c) {
    tp_formula += par.m * model->tp_allreduce_floats(c);
    gather_formula += par.m * model->tp_all_gather_floats(c);
  }
  const int64_t hybrid_floats = model->hybrid_data_parallel_floats();
  if (workers.rank() == 0 && options.verbose) {
    const std::string summary = model->summary();
    if (!summary.empty()) std::printf("%s\n", summary.c_str());
  }
  const int64_t pp_formula =
      pp_floats_formula(*model, layout, par.scatter_gather ? grid->tp().size() : 1);
  const int64_t dp_formula =
      par.hybrid ? hybrid_floats : dp_floats_formula(*model, store, grid->tp().size());
  // One origin for every rank's track: the host clock is shared, a barrier's
  // exit is not simultaneous.
  if (tracer.enabled()) tracer.set_origin(workers.allreduce_max(now_seconds()));
  Batch batch;
  std::vector<int64_t> order;
  int64_t order_epoch = -1;
  double train_time = 0;
  const bool lead = workers.rank() == 0;
  if (lead && options.verbose && !setup.endpoints.empty())
    std::fputs(setup.endpoints.c_str(), stdout);
  if (lead && options.verbose && first_step >= 0)
    std::printf("resumed from %s at step %ld (restored in %.3f s)\n",
                checkpoint_dir(options.resume_from, first_step).c_str(),
                static_cast<long>(first_step), restore_s);
  int64_t step = std::max<int64_t>(first_step, 0);
  // Writes this step's checkpoint: every worker its file, then (after a
  // barrier: every file, the shards' too, is in place) rank 0 the MANIFEST.
  auto write_checkpoint = [&](int64_t done) {
    const Stopwatch clock;
    const std::string dir = checkpoint_dir(options.out_dir, done);
    make_dirs(dir);
    const CheckpointFile mine =
        rank_checkpoint(workers.rank(), grid->coord(), done, plan, seed, store, sync, *model);
    const auto written = static_cast<double>(mine.write(rank_checkpoint_path(dir, workers.rank())));
    // The sum doubles as the barrier: every worker's file is in place after it.
    const double bytes = workers.allreduce_sum(written);
    if (lead) {
      make_manifest(done, config, job).write(manifest_path(dir));
      prune_checkpoints(options.out_dir, 2);
      if (options.verbose)
        std::printf("checkpoint step %ld: %d worker files, %.3f MB, in %.3f s -> %s\n",
                    static_cast<long>(done), workers.size(), bytes / 1e6, clock.seconds(),
                    dir.c_str());
    }
  };
  // The communication thread's spans on track 1 of this rank; layer-wise,
  // the pulls in flight on track 2. Returns the thread's time in the backend.
  auto trace_comm = [&](const std::vector<CommSpan>& spans) {
    double busy = 0;
    for (const CommSpan& c : spans) {
      if (!c.pull) busy += c.end - c.start;
      if (tracer.enabled())
        tracer.span(c.name, "comm", c.start, c.end, /*tid=*/c.pull ? 2 : 1,
                    concat("{\"floats\":", c.range.size(), ",\"begin\":", c.range.begin, "}"));
    }
    return busy;
  };
  for (; step < plan.total_steps; ++step) {
    progress.steps_done = step;
    if (hetero.kills(world.rank(), step)) kill_now(world.rank(), step);
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
    if (init.sparse.floats > 0) sync.set_touched_rows(touched_rows(*model, init.sparse));
    store.zero_grads();
    const TpCounters tp0 = tp.counters;
    const CommCounters tpc0 = grid->tp().counters(), pipe0 = pipeline.counters(),
                       sync0 = sync.counters();
    if (overlap) overlap->begin_step();
    const pp::StageRun run = executor.run();
    const double injected_s = inject_delay(hetero, world.rank(), step, run.compute_s, tracer);
    const TpCounters tp1 = tp.counters;
    const CommCounters tpc1 = grid->tp().counters(), pipe1 = pipeline.counters();
    // The finalize step: tied parameters over their pair, then the
    // data-parallel sync — all of it, or what the overlap left: waiting for
    // the buckets, then the tied parameters' ranges and the optimizer.
    double exposed_s = 0, sync_s = 0;
    int64_t hybrid_bytes = 0;
    {
      ScopedTimer t(exposed_s);
      Tracer::Scope span(tracer, "sync", "sync");
      if (hybrid_dp) {
        // The conv gradients: each rank's is its slice's, averaged over the group.
        const int64_t before = grid->tp().counters().bytes_sent;
        const std::span<float> conv = store.grads().subspan(0, static_cast<size_t>(hybrid_floats));
        hybrid_dp->allreduce(grid->tp(), conv);
        ops::scale(conv.data(), 1.0f / static_cast<float>(grid->tp().size()), hybrid_floats);
        hybrid_bytes = grid->tp().counters().bytes_sent - before;
      }
      if (!overlap) {
        reduce_tied_gradients(store, tied, layout, pipeline, tied_scratch);
        sync.step(store.params(), store.grads());
      } else {
        sync_s += trace_comm(overlap->wait());
        reduce_tied_gradients(store, tied, layout, pipeline, tied_scratch);
        for (const TiedParam& k : tied) {
          const ParamInfo& info = store.infos()[static_cast<size_t>(k.param)];
          const auto at = static_cast<size_t>(info.offset), n = static_cast<size_t>(info.numel);
          sync.sync_range(info.offset, store.params().subspan(at, n),
                          store.grads().subspan(at, n));
        }
        sync.finish(store.params(), store.grads());
      }
      share_tied_params(store, tied, layout, pipeline);
    }
    // Layer-wise, the forward's waits for its layers' parameters are exposed sync too.
    exposed_s += run.param_wait_s;
    sync_s += exposed_s;
    if (layout.stages > 1)
      meter.add(run, plan.total_steps == 1 || step > std::max<int64_t>(first_step, 0));
    const CommCounters sync1 = sync.counters();
    const double step_s = step_clock.seconds();
    train_time += step_s;
    const double loss = model->batch_loss();

    AxisRow axis;
    axis.step = step + 1;
    axis.compute_s = run.compute_s;
    axis.tp = tp1 - tp0;
    axis.tp_floats_formula = tp_formula;
    axis.tp_bytes_sent = tpc1.bytes_sent - tpc0.bytes_sent - run.gather_bytes_sent;
    axis.tp_messages = tpc1.messages_sent - tpc0.messages_sent;
    axis.pp_bytes_sent = pipe1.bytes_sent - pipe0.bytes_sent;
    axis.pp_floats_sent = axis.pp_bytes_sent / static_cast<int64_t>(sizeof(float));
    axis.pp_floats_formula = pp_formula;
    axis.pp_gather_bytes_sent = run.gather_bytes_sent;
    axis.pp_s = run.recv_wait_s + run.send_s + run.gather_s;
    axis.dp_floats = hybrid_dp ? hybrid_floats : static_cast<int64_t>(store.size());
    axis.dp_floats_formula = dp_formula;
    axis.dp_bytes_sent = sync1.bytes_sent - sync0.bytes_sent + hybrid_bytes;
    axis.tp_gather_floats_formula = gather_formula;
    axis.dp_s = sync_s;
    axis.params_bytes = static_cast<int64_t>(store.params().size_bytes());
    axis.grads_bytes = static_cast<int64_t>(store.grads().size_bytes());
    axis.optimizer_bytes = optimizer_state_bytes(sync);
    log.add(
        {step + 1, static_cast<double>(step + 1) / plan.steps_per_epoch, loss, step_s,
         run.compute_s, sync_s,
         axis.tp_bytes_sent + axis.pp_bytes_sent + axis.pp_gather_bytes_sent + axis.dp_bytes_sent,
         tpc1.bytes_recv - tpc0.bytes_recv + pipe1.bytes_recv - pipe0.bytes_recv +
             sync1.bytes_recv - sync0.bytes_recv,
         axis.tp_messages + pipe1.messages_sent - pipe0.messages_sent + sync1.messages_sent -
             sync0.messages_sent,
         exposed_s, injected_s, sync1.pushes_dropped - sync0.pushes_dropped,
         sync.averaged() > 0 ? sync.averaged() : d},
        axis);

    // Whether this step is the last: the plan's, train.exit_at_step, or a
    // stop the workers agree on (one small exchange per step, made only when
    // a signal or the clock can ask for one).
    int stop = step + 1 == exit_at_step ? kExit : kRunOn;
    if (options.stop_signal || exit_after > 0) {
      double mine = stop;
      if (options.stop_signal && options.stop_signal->load() != 0) mine = kTerminate;
      else if (exit_after > 0 && wall.seconds() >= exit_after) mine = kExit;
      stop = static_cast<int>(workers.allreduce_max(mine));
    }
    const bool last = step + 1 == plan.total_steps || stop != kRunOn;
    const bool logs = (step + 1) % plan.log_every == 0 || last;
    if (logs) {
      // (Under continue, over the workers still alive.)
      const double holders = survives ? workers.allreduce_sum(holds_loss ? 1.0 : 0.0) : d;
      const double mean_loss = workers.allreduce_sum(holds_loss ? loss : 0.0) / holders;
      if (lead && options.verbose)
        print_progress(plan, step, mean_loss, result.test_accuracy, train_time,
                       std::max<int64_t>(first_step, 0));
      if (last) result.final_loss = mean_loss;
    }
    // A periodic checkpoint; at an early stop one more, where the backend can
    // save this step (the PS shards save at periodic steps only): always on
    // train.exit_*, with checkpoints on after a signal.
    const bool periodic = checkpoint_every > 0 && (step + 1) % checkpoint_every == 0;
    const bool stop_saves = (stop == kExit || (stop == kTerminate && checkpoint_every > 0)) &&
                            sync.optimizer() != nullptr;
    const bool checkpoints = (periodic || stop_saves) && !options.out_dir.empty();
    const bool evaluates = model->evaluates() && plan.eval_after(step + 1);
    // An evaluation, a checkpoint and the end of training read every parameter.
    // (Layer-wise, the thread's spans of the last step's end come with the
    // next step's wait(), or here.)
    if (overlap && (evaluates || checkpoints || last)) trace_comm(overlap->wait_pulls());
    if (evaluates && (!survives || lead)) {
      const EvalStats s = evaluate(*model, layout, *data.test, *grid, workers, survives);
      result.test_accuracy = s.count ? static_cast<double>(s.correct) / s.count : 0.0;
      result.test_loss = s.count ? s.loss_sum / s.count : 0.0;
      log.add_eval(step + 1, static_cast<double>(step + 1) / plan.steps_per_epoch,
                   result.test_loss, result.test_accuracy);
      if (lead && options.verbose) print_eval(step + 1, result.test_loss, result.test_accuracy);
    }
    // Rows reach the disk every log interval, and before a checkpoint claims their step.
    if (logs || checkpoints) log.flush();
    if (checkpoints) write_checkpoint(step + 1);
    if (stop != kRunOn && step + 1 < plan.total_steps) {
      result.status = stop == kExit ? "exited" : "terminated";
      if (stop == kTerminate && options.stop_signal) result.stop_signal = options.stop_signal->load();
      ++step;
      break;
    }
  }
  const int64_t steps_done = step;

  // ---- results: the replica's loss on every stage, the whole model ------------
  result.losses = log.losses();
  // The gathered model is host memory: bring the arenas back (the model's
  // views of the device arenas are not used after this).
  if (device != Device::kCpu) store.move_to(Device::kCpu);
  const DeviceScope on_host(Device::kCpu);
  check_tied_params(store, tied, layout, pipeline, tied_scratch);
  result.params = gather_model(*model, store, chunk_params, layout, grid->tp(), pipeline);
  result.steps = steps_done;
  result.epochs = static_cast<double>(steps_done) / plan.steps_per_epoch;
  result.wall_s = workers.allreduce_max(wall.seconds());
  result.samples_per_s = static_cast<double>(plan.batch_size) *
                         static_cast<double>(steps_done - std::max<int64_t>(first_step, 0)) /
                         workers.allreduce_max(train_time);

  if (layout.stages > 1) {
    std::vector<int> layers_per_stage(static_cast<size_t>(layout.stages), 0);
    for (int u = 0; u < layout.vstages(); ++u)
      layers_per_stage[static_cast<size_t>(u % layout.stages)] +=
          layout.layers[static_cast<size_t>(u)];
    const PipelineMeter::Summary bubble =
        meter.write(pipeline, workers, dp.rank(), grid->coord().tp, *model, layers_per_stage,
                    options.out_dir);
    if (lead && options.verbose)
      std::printf("pipeline %s: bubble %.4f measured (idle share %.4f), %.4f simulated at the "
                  "measured costs, %.4f closed form\n",
                  pp::describe(schedule).c_str(), bubble.bubble, bubble.idle_share,
                  bubble.bubble_sim, bubble.bubble_formula);
  }
  write_run_end(workers, world, config, run_end, result, tracer);
  return result;
}

}  // namespace

TrainResult train(Comm& world, const Config& config, const TrainOptions& options) {
  Progress progress;
  try {
    return run_training(world, config, options, progress);
  } catch (const Error& e) {
    // A clean error (a deadline, a peer that reported failure): the rows so
    // far are on disk; summary.csv says how the run ended.
    if (progress.lead)
      write_error_summary(config, progress.end, world.size(), progress.steps_done, e.what());
    throw;
  }
}

}  // namespace psar
