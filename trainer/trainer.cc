#include "trainer/trainer.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <numeric>

#include "allreduce/allreducer.h"
#include "allreduce/partition.h"
#include "allreduce/staged.h"
#include "comm/mpi_comm.h"
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
#include "trainer/loop_options.h"
#include "trainer/model_parts.h"
#include "sync/overlap.h"
#include "trainer/pipeline_meter.h"
#include "trainer/run_checkpoints.h"
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

// train.device, checked against this build, this machine and what runs on a
// CUDA device so far (docs/gpu.md): the MLP, the GPT and the CNN, one pipeline stage,
// tensor parallelism with the column_row split, no checkpoints, an allreduce
// backend. A ConfigError names the key.
Device training_device(const LoopOptions& o, const std::string& sync_backend,
                       const SyncCapabilities& backend) {
  if (o.device == Device::kCpu) return o.device;
  require_device(o.device, "train.device");
  const auto refuse = [](const std::string& what) {
    throw ConfigError("train.device: cuda does not run " + what + " yet (docs/gpu.md)");
  };
  const ParallelOptions& par = o.parallel;
  if (o.model_type != "mlp" && o.model_type != "gpt" && o.model_type != "cnn")
    refuse("model.type " + o.model_type + " (mlp, gpt and cnn do)");
  if (par.p > 1) refuse("pipeline parallelism (parallel.pp must be 1)");
  if (par.t > 1 && par.tp_split != "column_row")
    refuse("parallel.tp_split " + par.tp_split + " (column_row does)");
  if (o.checkpoint_every > 0) refuse("checkpoints (train.checkpoint_every)");
  if (o.exit_at_step > 0 || o.exit_after > 0)
    refuse("train.exit_at_step / train.exit_after (they end with a checkpoint)");
  if (!backend.model_parallel)
    refuse("sync.backend " + sync_backend + " (choose an allreduce backend or nccl)");
  return o.device;
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

// One run on this rank, told in the order it happens (run()): plan and check
// everything, build the grid and this rank's part of the model, settle the
// checkpoint to continue from and the early stops, start the gradient sync
// (a dedicated server rank serves instead), restore, then the steps and the
// results. Every step is a member function; the members are declared in the
// order the steps make them.
class TrainingRun {
 public:
  TrainingRun(Comm& world, const Config& config, const TrainOptions& options, Progress& progress)
      : world_(world), config_(config), options_(options), progress_(progress) {}

  TrainResult run() {
    check_agreement(world_, config_, options_.out_dir);
    plan();
    // Every op of this thread runs on the training device (core/device.h).
    const DeviceScope on_device(device_);
    check_backend();
    build_grid();
    build_model();
    plan_checkpoints_and_stops();
    prepare_run_dir(world_, options_);
    if (!start_sync()) return result_;  // a dedicated server rank: it served until the end
    start_overlap();
    restore();
    begin_run_files(*workers_, config_, options_.out_dir);
    start_loop();
    train_steps();
    return finish();
  }

 private:
  // ---- data, steps, the grid: everything checked before any work ------------
  void plan() {
    // Every key the run reads, once (trainer/loop_options.h).
    run_ = run_options(config_, world_.rank(), world_.size());
    world_.set_timeout(sync_options_.timeout);
    apply_network_model(world_, run_.network);
    data_ = load_dataset(run_.workload);
    sync_name_ = sync_options_.backend;
    plan_ = plan_steps(o_.steps, data_.train->size());
    const int layers = model_layers(run_.workload, *data_.train);
    backend_ = sync_capabilities(sync_options_);
    device_ = training_device(o_, sync_name_, backend_);
    if (device_ == Device::kCuda) use_cuda_device(local_cuda_device());
    const ParallelOptions& par = o_.parallel;
    schedule_ = pp::make_schedule(par.schedule, {par.p, par.m, par.v, layers});
    layout_.stages = par.p;
    layout_.chunks = par.v;
    layout_.microbatches = par.m;
    layout_.layers = pp::partition_layers(layers, par.p, par.v, par.stage_layers, par.ends);
  }

  void check_backend() const {
    const ParallelOptions& par = o_.parallel;
    if (!backend_.model_parallel && par.t * par.p > 1)
      throw ConfigError(concat("sync.backend ", sync_name_,
                               " runs data parallelism only (a shard group per model slice is not "
                               "built); parallel.tp = ",
                               par.t, " and parallel.pp = ", par.p, " need an allreduce backend"));
  }

  // Model parallelism needs the grid before the model; data parallelism
  // alone builds it over the workers, which a backend with dedicated server
  // ranks splits off in its set-up (their number is known now).
  void build_grid() {
    const ParallelOptions& par = o_.parallel;
    trainers_ = world_.size() - backend_.server_ranks;
    if (trainers_ < 1)
      throw ConfigError(concat("sync.backend ", sync_name_, " takes ", backend_.server_ranks,
                               " of the ", world_.size(),
                               " ranks as dedicated servers, which "
                               "leaves no worker"));
    // The hybrid CNN (workloads/cnn.h): the n workers are one tensor-parallel
    // group (d = 1: each gets the whole batch, the model takes its slice for
    // the convolutions), and the conv gradients are all-reduced over that
    // group with the --sync algorithm (hybrid_dp_).
    if (par.hybrid) {
      if (par.t != 1 || par.p != 1)
        throw ConfigError(
            concat("parallel.hybrid splits the convolutions by the batch and the "
                   "fully connected layers by their columns over all the workers: "
                   "set parallel.tp = 1 and parallel.pp = 1 (got ",
                   par.t, " and ", par.p, ")"));
      const auto algos = allreducer_names(/*include_device=*/true);
      if (std::find(algos.begin(), algos.end(), sync_name_) == algos.end())
        throw ConfigError(
            "parallel.hybrid all-reduces the conv gradients over the workers with "
            "an allreduce algorithm; sync.backend " +
            sync_name_ + " is not one (choose ring, tree, mpi, ...)");
      if (sync_options_.overlap.on)
        throw ConfigError(
            "sync.overlap: parallel.hybrid syncs the conv gradients after the "
            "backward only; set sync.overlap: false");
      hybrid_dp_ = on_device(sync_name_, make_allreducer(sync_name_, sync_options_.allreduce));
    }
    grid_t_ = par.hybrid ? trainers_ : par.t;
    shape_ = make_grid_shape(trainers_, grid_t_, par.p, par.order);
    layout_.microbatch_rows = microbatch_rows(plan_.batch_size, shape_.dp, par.m);
    if (grid_t_ * par.p > 1) {
      grid_ = std::make_unique<ProcessGrid>(world_, shape_);
      layout_.stage = grid_->coord().pp;
    }
    if (grid_t_ > 1) {
      const std::string& name = par.tp_allreduce;
      tp_allreduce_ = on_device(
          name, make_allreducer(name, activation_allreduce_options(sync_options_.allreduce)));
    }
    tp_ = std::make_unique<TpGroup>(grid_ && grid_t_ > 1 ? &grid_->tp() : nullptr,
                                    tp_allreduce_.get());
  }

  // ps.on_worker_failure: continue — the workers' control plane goes on
  // without a worker that died (sync_capabilities refuses it for any backend
  // but the parameter server).
  bool survives_worker_failure() const { return sync_options_.ps.continue_on_failure; }

  // On a CUDA device a host algorithm reduces a copy in pinned host memory.
  std::unique_ptr<Allreducer> on_device(const std::string& name,
                                        std::unique_ptr<Allreducer> algorithm) const {
    if (device_ != Device::kCpu && !find_allreducer(name).device)
      return stage_through_host(std::move(algorithm));
    return algorithm;
  }

  // ---- this rank's part of the model ----------------------------------------
  void build_model() {
    model_ = make_model(run_.workload, *data_.train, {tp_.get(), layout_});
    for (int c = 0; c < layout_.chunks; ++c) {
      const int before = static_cast<int>(store_.infos().size());
      model_->declare(store_, c);
      chunk_params_.emplace_back(before, static_cast<int>(store_.infos().size()));
    }
    store_.finalize(o_.seed, device_);
    model_->bind(store_);
    tied_ = model_->tied_params();
    check_parameter_counts(world_, grid_ ? grid_->coord().pp * grid_t_ + grid_->coord().tp : 0,
                           static_cast<int64_t>(store_.size()));
  }

  // ---- checkpoints: the one to continue from, the plan; early stops ----------
  void plan_checkpoints_and_stops() {
    job_.world_size = world_.size();
    job_.workers = trainers_;
    job_.pp = shape_.pp;
    job_.tp = shape_.tp;
    job_.dp = shape_.dp;
    job_.order = o_.parallel.order;
    job_.sync = sync_name_;
    job_.total_steps = plan_.total_steps;
    job_.psar_version = psar_version();
    first_step_ = find_resume_step(world_, config_, options_, job_, resize_);
    if (run_.hetero.kill_rank >= 0 && run_.hetero.kill_step >= plan_.total_steps)
      throw ConfigError("hetero.kill_step " + std::to_string(run_.hetero.kill_step) +
                        " is past the run's " + std::to_string(plan_.total_steps) + " steps");
    // ps.on_worker_failure: continue — the workers' control plane (the step
    // log's gathers, the loss, the stop agreement, the end) goes on without a
    // worker that died (Comm::tolerate_failures); the evaluation is worker 0's
    // alone, over the whole test set. (sync_capabilities refused it for any
    // backend but the parameter server.)
    // The workers' control plane gives up on a dead worker after sync.timeout,
    // while the survivors are silent to the servers, which drop a worker
    // silent past ps.timeout: the first must come first.
    const double sync_timeout = sync_options_.timeout, ps_timeout = sync_options_.ps.timeout_s;
    if (survives_worker_failure() && !(sync_timeout < ps_timeout))
      throw ConfigError(concat("ps.on_worker_failure: continue needs sync.timeout (",
                               sync_timeout, " s) below ps.timeout (", ps_timeout,
                               " s): the workers must give up "
                               "on a dead worker before the servers give up on the live ones "
                               "waiting for it"));
    // A worker that died can keep MPI_Finalize's closing fence waiting for
    // ever (comm/mpi_comm.h): every process gives it longer than the last
    // waits of a live one (the servers' ps.timeout, the control plane's two
    // sync.timeout) and then exits with its code.
    if (survives_worker_failure())
      MpiRuntime::finalize_within(ps_timeout + 2 * sync_timeout);
    if (survives_worker_failure() && o_.checkpoint_every > 0)
      throw ConfigError(
          "train.checkpoint_every with ps.on_worker_failure: continue: a checkpoint "
          "needs every worker's file, and a dead worker writes none (set "
          "train.checkpoint_every 0)");
    if ((o_.exit_at_step > 0 || o_.exit_after > 0) && options_.out_dir.empty())
      throw ConfigError(
          "train.exit_at_step / train.exit_after end with a checkpoint: the run "
          "needs a run directory (--out)");
  }

  // ---- gradient synchronization over this rank's data-parallel group --------
  // False on a dedicated server rank, after it served.
  bool start_sync() {
    OptimizerOptions optimizer = run_.optimizer;
    optimizer.total_steps = plan_.total_steps;
    init_ = std::make_unique<SyncInit>(SyncInit{
        world_, sync_options_, store_, optimizer, grid_ ? &grid_->dp() : nullptr,
        CheckpointPlan{options_.out_dir, o_.checkpoint_every, first_step_, options_.resume_from},
        sparse_rows(*model_), model_->layer_ranges()});
    for (const TiedParam& k : tied_) {
      const ParamInfo& info = store_.infos()[static_cast<size_t>(k.param)];
      init_->tied.emplace_back(info.offset, info.offset + info.numel);
    }
    setup_ = make_gradient_sync(sync_name_, *init_);
    if (setup_.serve) {
      setup_.serve();
      result_.server = true;
      return false;
    }
    workers_ = setup_.workers;  // every rank that trains
    workers_->tolerate_failures(survives_worker_failure());
    sync_ = setup_.sync.get();
    // A backend whose servers keep the optimizer state (the parameter server)
    // saves it at train.checkpoint_every steps only: an early stop must fall on one.
    if (o_.exit_at_step > 0 && !sync_->optimizer() &&
        (o_.checkpoint_every == 0 || o_.exit_at_step % o_.checkpoint_every != 0))
      throw ConfigError("train.exit_at_step " + std::to_string(o_.exit_at_step) +
                        " with sync.backend " + sync_name_ +
                        " must be a multiple of train.checkpoint_every (its servers " +
                        "save their state at those steps only)");
    PSAR_CHECK(workers_->size() == trainers_, "sync.backend ", sync_name_, " left ",
               workers_->size(), " workers, planned ", trainers_);
    if (!grid_) grid_ = std::make_unique<ProcessGrid>(*workers_, shape_);
    d_ = grid_->dp().size();
    local_batch_ = plan_.batch_size / d_;
    holds_loss_ = layout_.stage == layout_.stages - 1 && grid_->coord().tp == 0;
    result_.workers = d_;
    result_.first_step = first_step_;
    return true;
  }

  // Overlap: buckets synced on a communication thread while the backward runs.
  void start_overlap() {
    const OverlapConfig& o = sync_options_.overlap;
    // (A backend that gathers the model's layers itself overlaps through its gate.)
    if (!o.on || sync_->param_gate()) return;
    if (!sync_->overlaps())
      throw ConfigError("sync.overlap: the " + sync_->name() +
                        " backend syncs the whole model after the backward only; set "
                        "sync.overlap: false or choose an allreduce backend");
    overlap_ = std::make_unique<OverlapSync>(
        *sync_, store_,
        overlap_buckets(store_, schedule_, layout_.stage, chunk_params_, tied_, o.bucket_floats),
        grid_->dp(), OverlapOptions{o.front_first, o.priority_chunk_floats});
    // The layer-wise start hands the whole step to the communication thread:
    // no range may be left for the main thread (the PS has no pipeline, so no ties).
    PSAR_CHECK(!overlap_->layerwise() || tied_.empty(), "the layer-wise start of ", sync_->name(),
               " with tied parameters");
  }

  void restore() {
    const Stopwatch restore_clock;
    Comm& workers = *workers_;
    if (first_step_ >= 0) {
      const std::string dir = checkpoint_dir(options_.resume_from, first_step_);
      if (!resize_.resized) {
        restore_rank(CheckpointFile::read(rank_checkpoint_path(dir, workers.rank())),
                     workers.rank(), grid_->coord(), first_step_, store_, *sync_, *model_);
      } else {  // onto another d: this rank's (stage, tensor rank) cell as the old grid held it
        const GridShape& now = grid_->shape();
        const GridShape old_shape = make_grid_shape(now.pp * now.tp * resize_.old_dp, now.tp,
                                                    now.pp, o_.parallel.order);
        const GridCoord& at = grid_->coord();
        const auto old_rank = [&](int q) { return grid_rank(old_shape, {at.tp, q, at.pp}); };
        if (resize_.reshard)  // a sharded optimizer state: each replica cuts its piece anew
          restore_resharded(dir, resize_.old_dp, old_rank, grid_->dp().rank(),
                            grid_->dp().size(), first_step_, store_, *sync_, *model_);
        else  // replicated: every replica restores the cell's replica 0
          restore_rank(CheckpointFile::read(rank_checkpoint_path(dir, old_rank(0))), old_rank(0),
                       {at.tp, 0, at.pp}, first_step_, store_, *sync_, *model_);
      }
    }
    restore_s_ = workers.allreduce_max(restore_clock.seconds());
  }

  // ---- the loop: its executor, meters, rows and the formulas they check -------
  void start_loop() {
    Comm& workers = *workers_;
    tracer_ = std::make_unique<Tracer>(o_.trace);
    executor_ = std::make_unique<pp::StageExecutor>(
        schedule_, grid_->pp(), *model_,
        pp::ExecutorOptions{
            .tracer = tracer_.get(),
            .scatter_gather = o_.parallel.scatter_gather ? &grid_->tp() : nullptr,
            .gradient_sink = sync_->gradient_sink() ? sync_->gradient_sink() : overlap_.get(),
            .param_gate = sync_->param_gate()                ? sync_->param_gate()
                          : overlap_ && overlap_->layerwise() ? overlap_.get()
                                                              : nullptr});
    meter_ = std::make_unique<PipelineMeter>(schedule_, layout_.stage);
    run_end_ = RunEnd{options_.out_dir, sync_->name(), run_.network.describe(), o_.records};
    progress_.end = run_end_;
    progress_.lead = workers.rank() == 0;
    lead_ = workers.rank() == 0;
    log_ = std::make_unique<StepLog>(
        workers, grid_->pp(), grid_->shape(), grid_->coord(),
        StepLogOptions{options_.out_dir, grid_t_ > 1, first_step_, options_.resume_from});
    for (int c = 0; c < layout_.chunks; ++c) {
      tp_formula_ += o_.parallel.m * model_->tp_allreduce_floats(c);
      gather_formula_ += o_.parallel.m * model_->tp_all_gather_floats(c);
    }
    hybrid_floats_ = model_->hybrid_data_parallel_floats();
    if (lead_ && options_.verbose) {
      const std::string summary = model_->summary();
      if (!summary.empty()) std::printf("%s\n", summary.c_str());
    }
    pp_formula_ =
        pp_floats_formula(*model_, layout_, o_.parallel.scatter_gather ? grid_->tp().size() : 1);
    dp_formula_ = o_.parallel.hybrid ? hybrid_floats_
                                     : dp_floats_formula(*model_, store_, grid_->tp().size());
    // One origin for every rank's track: the host clock is shared, a barrier's
    // exit is not simultaneous.
    if (tracer_->enabled()) tracer_->set_origin(workers.allreduce_max(now_seconds()));
    if (lead_ && options_.verbose && !setup_.endpoints.empty())
      std::fputs(setup_.endpoints.c_str(), stdout);
    if (lead_ && options_.verbose && first_step_ >= 0)
      std::printf("resumed from %s at step %ld (restored in %.3f s)\n",
                  checkpoint_dir(options_.resume_from, first_step_).c_str(),
                  static_cast<long>(first_step_), restore_s_);
  }

  void train_steps() {
    int64_t step = std::max<int64_t>(first_step_, 0);
    for (; step < plan_.total_steps; ++step) {
      progress_.steps_done = step;
      const double loss = train_step(step);
      const int stop = agree_on_stop(step);
      const bool last = step + 1 == plan_.total_steps || stop != kRunOn;
      end_step(step, loss, stop, last);
      if (stop != kRunOn && step + 1 < plan_.total_steps) {
        result_.status = stop == kExit ? "exited" : "terminated";
        if (stop == kTerminate && options_.stop_signal)
          result_.stop_signal = options_.stop_signal->load();
        ++step;
        break;
      }
    }
    steps_done_ = step;
  }

  // One step: this replica's slice of the batch through the pipeline, the
  // finalize step, the step's rows. Returns this replica's loss.
  double train_step(int64_t step) {
    if (run_.hetero.kills(world_.rank(), step)) kill_now(world_.rank(), step);
    const Stopwatch step_clock;
    load_batch(step);
    store_.zero_grads();
    Comm& tpc = grid_->tp();
    Comm& pipeline = grid_->pp();
    const TpCounters tp0 = tp_->counters;
    const CommCounters tpc0 = tpc.counters(), pipe0 = pipeline.counters(),
                       sync0 = sync_->counters();
    if (overlap_) overlap_->begin_step();
    sync_->begin_step();
    const pp::StageRun run = executor_->run();
    const double injected_s = inject_delay(run_.hetero, world_.rank(), step, run.compute_s, *tracer_);
    const TpCounters tp1 = tp_->counters;
    const CommCounters tpc1 = tpc.counters(), pipe1 = pipeline.counters();
    Finalized fin;
    {
      ScopedTimer timer(fin.exposed_s);
      Tracer::Scope span(*tracer_, "sync", "sync");
      finalize(fin);
    }
    // Layer-wise, the forward's waits for its layers' parameters are exposed sync too.
    const double exposed_s = fin.exposed_s + run.param_wait_s;
    const double sync_s = fin.sync_s + exposed_s;
    if (layout_.stages > 1)
      meter_->add(run, plan_.total_steps == 1 || step > std::max<int64_t>(first_step_, 0));
    const CommCounters sync1 = sync_->counters();
    const double step_s = step_clock.seconds();
    train_time_ += step_s;
    const double loss = model_->batch_loss();

    AxisRow axis;
    axis.step = step + 1;
    axis.compute_s = run.compute_s;
    axis.tp = tp1 - tp0;
    axis.tp_floats_formula = tp_formula_;
    axis.tp_bytes_sent = tpc1.bytes_sent - tpc0.bytes_sent - run.gather_bytes_sent;
    axis.tp_messages = tpc1.messages_sent - tpc0.messages_sent;
    axis.pp_bytes_sent = pipe1.bytes_sent - pipe0.bytes_sent;
    axis.pp_floats_sent = axis.pp_bytes_sent / static_cast<int64_t>(sizeof(float));
    axis.pp_floats_formula = pp_formula_;
    axis.pp_gather_bytes_sent = run.gather_bytes_sent;
    axis.pp_s = run.recv_wait_s + run.send_s + run.gather_s;
    axis.dp_floats = hybrid_dp_ ? hybrid_floats_ : static_cast<int64_t>(store_.size());
    axis.dp_floats_formula = dp_formula_;
    axis.dp_bytes_sent = sync1.bytes_sent - sync0.bytes_sent + fin.hybrid_bytes;
    axis.tp_gather_floats_formula = gather_formula_;
    axis.dp_s = sync_s;
    const HeldBytes held = sync_->held_bytes();
    axis.params_bytes = static_cast<int64_t>(store_.params().size_bytes()) + held.params;
    axis.grads_bytes = static_cast<int64_t>(store_.grads().size_bytes()) + held.grads;
    axis.optimizer_bytes = optimizer_state_bytes(*sync_);
    axis.gathered_bytes = held.gathered_peak;
    log_->add(
        {step + 1, static_cast<double>(step + 1) / plan_.steps_per_epoch, loss, step_s,
         run.compute_s, sync_s,
         axis.tp_bytes_sent + axis.pp_bytes_sent + axis.pp_gather_bytes_sent + axis.dp_bytes_sent,
         tpc1.bytes_recv - tpc0.bytes_recv + pipe1.bytes_recv - pipe0.bytes_recv +
             sync1.bytes_recv - sync0.bytes_recv,
         axis.tp_messages + pipe1.messages_sent - pipe0.messages_sent + sync1.messages_sent -
             sync0.messages_sent,
         exposed_s, injected_s, sync1.pushes_dropped - sync0.pushes_dropped,
         sync_->averaged() > 0 ? sync_->averaged() : d_},
        axis);
    return loss;
  }

  // This replica's slice of the step's batch, in the epoch's order.
  void load_batch(int64_t step) {
    const int64_t epoch = step / plan_.steps_per_epoch, pos = step % plan_.steps_per_epoch;
    if (epoch != order_epoch_) {
      order_ = epoch_order(data_.train->size(), o_.seed, epoch);
      order_epoch_ = epoch;
    }
    data_.train->gather(
        std::span<const int64_t>(order_).subspan(
            static_cast<size_t>(pos * plan_.batch_size + grid_->dp().rank() * local_batch_),
            static_cast<size_t>(local_batch_)),
        batch_);
    model_->set_batch(batch_);
    if (init_->sparse.floats > 0) sync_->set_touched_rows(touched_rows(*model_, init_->sparse));
  }

  struct Finalized {
    double exposed_s = 0;  // the finalize step on this thread (the caller times it)
    double sync_s = 0;     // the communication thread's time in the backend (overlap)
    int64_t hybrid_bytes = 0;
  };
  // The finalize step: tied parameters over their pair, then the
  // data-parallel sync — all of it, or what the overlap left: waiting for
  // the buckets, then the tied parameters' ranges and the optimizer.
  void finalize(Finalized& f) {
    Comm& pipeline = grid_->pp();
    if (hybrid_dp_) {
      // The conv gradients: each rank's is its slice's, averaged over the group.
      Comm& group = grid_->tp();
      const int64_t before = group.counters().bytes_sent;
      const std::span<float> conv = store_.grads().subspan(0, static_cast<size_t>(hybrid_floats_));
      hybrid_dp_->allreduce(group, conv);
      ops::scale(conv.data(), 1.0f / static_cast<float>(group.size()), hybrid_floats_);
      f.hybrid_bytes = group.counters().bytes_sent - before;
    }
    if (!overlap_) {
      reduce_tied_gradients(store_, tied_, layout_, pipeline, tied_scratch_);
      sync_->step(store_.params(), store_.grads());
    } else {
      f.sync_s += trace_comm(overlap_->wait());
      reduce_tied_gradients(store_, tied_, layout_, pipeline, tied_scratch_);
      for (const TiedParam& k : tied_) {
        const ParamInfo& info = store_.infos()[static_cast<size_t>(k.param)];
        const auto at = static_cast<size_t>(info.offset), n = static_cast<size_t>(info.numel);
        sync_->sync_range(info.offset, store_.params().subspan(at, n),
                          store_.grads().subspan(at, n));
      }
      sync_->finish(store_.params(), store_.grads());
    }
    share_tied_params(store_, tied_, layout_, pipeline);
    sync_->params_shared();
  }

  // The communication thread's spans on track 1 of this rank; layer-wise,
  // the pulls in flight on track 2. Returns the thread's time in the backend.
  double trace_comm(const std::vector<CommSpan>& spans) {
    double busy = 0;
    for (const CommSpan& c : spans) {
      if (!c.pull) busy += c.end - c.start;
      if (tracer_->enabled())
        tracer_->span(c.name, "comm", c.start, c.end, /*tid=*/c.pull ? 2 : 1,
                      concat("{\"floats\":", c.range.size(), ",\"begin\":", c.range.begin, "}"));
    }
    return busy;
  }

  // Whether this step is the last: the plan's, train.exit_at_step, or a
  // stop the workers agree on (one small exchange per step, made only when
  // a signal or the clock can ask for one).
  int agree_on_stop(int64_t step) {
    int stop = step + 1 == o_.exit_at_step ? kExit : kRunOn;
    if (options_.stop_signal || o_.exit_after > 0) {
      double mine = stop;
      if (options_.stop_signal && options_.stop_signal->load() != 0)
        mine = kTerminate;
      else if (o_.exit_after > 0 && wall_.seconds() >= o_.exit_after)
        mine = kExit;
      stop = static_cast<int>(workers_->allreduce_max(mine));
    }
    return stop;
  }

  // After a step: the mean loss every log interval, an evaluation, the rows
  // to disk, a checkpoint.
  void end_step(int64_t step, double loss, int stop, bool last) {
    Comm& workers = *workers_;
    const bool logs = (step + 1) % plan_.log_every == 0 || last;
    if (logs) {
      // (Under continue, over the workers still alive.)
      const double holders =
          survives_worker_failure() ? workers.allreduce_sum(holds_loss_ ? 1.0 : 0.0) : d_;
      const double mean_loss = workers.allreduce_sum(holds_loss_ ? loss : 0.0) / holders;
      if (lead_ && options_.verbose)
        print_progress(plan_, step, mean_loss, result_.test_accuracy, train_time_,
                       std::max<int64_t>(first_step_, 0));
      if (last) result_.final_loss = mean_loss;
    }
    // A periodic checkpoint; at an early stop one more, where the backend can
    // save this step (the PS shards save at periodic steps only): always on
    // train.exit_*, with checkpoints on after a signal.
    const bool periodic = o_.checkpoint_every > 0 && (step + 1) % o_.checkpoint_every == 0;
    const bool stop_saves = (stop == kExit || (stop == kTerminate && o_.checkpoint_every > 0)) &&
                            sync_->optimizer() != nullptr;
    const bool checkpoints = (periodic || stop_saves) && !options_.out_dir.empty();
    const bool evaluates = model_->evaluates() && plan_.eval_after(step + 1);
    // An evaluation, a checkpoint and the end of training read every parameter.
    // (Layer-wise, the thread's spans of the last step's end come with the
    // next step's wait(), or here.)
    if (overlap_ && (evaluates || checkpoints || last)) trace_comm(overlap_->wait_pulls());
    if (evaluates || checkpoints || last) sync_->gather_params();
    if (evaluates && (!survives_worker_failure() || lead_)) {
      const EvalStats s =
          evaluate(*model_, layout_, *data_.test, *grid_, workers, survives_worker_failure());
      result_.test_accuracy = s.count ? static_cast<double>(s.correct) / s.count : 0.0;
      result_.test_loss = s.count ? s.loss_sum / s.count : 0.0;
      log_->add_eval(step + 1, static_cast<double>(step + 1) / plan_.steps_per_epoch,
                     result_.test_loss, result_.test_accuracy);
      if (lead_ && options_.verbose) print_eval(step + 1, result_.test_loss, result_.test_accuracy);
    }
    // Rows reach the disk every log interval, and before a checkpoint claims their step.
    if (logs || checkpoints) log_->flush();
    if (checkpoints) write_checkpoint(step + 1);
  }

  // Writes this step's checkpoint: every worker its file, then (after a
  // barrier: every file, the shards' too, is in place) rank 0 the MANIFEST.
  void write_checkpoint(int64_t done) {
    Comm& workers = *workers_;
    const Stopwatch clock;
    const std::string dir = checkpoint_dir(options_.out_dir, done);
    make_dirs(dir);
    const CheckpointFile mine = rank_checkpoint(workers.rank(), grid_->coord(), done, plan_,
                                                o_.seed, store_, *sync_, *model_);
    const auto written = static_cast<double>(mine.write(rank_checkpoint_path(dir, workers.rank())));
    // The sum doubles as the barrier: every worker's file is in place after it.
    const double bytes = workers.allreduce_sum(written);
    if (lead_) {
      make_manifest(done, config_, job_).write(manifest_path(dir));
      prune_checkpoints(options_.out_dir, 2);
      if (options_.verbose)
        std::printf("checkpoint step %ld: %d worker files, %.3f MB, in %.3f s -> %s\n",
                    static_cast<long>(done), workers.size(), bytes / 1e6, clock.seconds(),
                    dir.c_str());
    }
  }

  // ---- results: the replica's loss on every stage, the whole model ------------
  TrainResult finish() {
    Comm& workers = *workers_;
    Comm& pipeline = grid_->pp();
    result_.losses = log_->losses();
    // The gathered model is host memory: bring the arenas back (the model's
    // views of the device arenas are not used after this).
    if (device_ != Device::kCpu) store_.move_to(Device::kCpu);
    const DeviceScope on_host(Device::kCpu);
    check_tied_params(store_, tied_, layout_, pipeline, tied_scratch_);
    result_.params = gather_model(*model_, store_, chunk_params_, layout_, grid_->tp(), pipeline);
    result_.steps = steps_done_;
    result_.epochs = static_cast<double>(steps_done_) / plan_.steps_per_epoch;
    result_.wall_s = workers.allreduce_max(wall_.seconds());
    result_.samples_per_s = static_cast<double>(plan_.batch_size) *
                            static_cast<double>(steps_done_ - std::max<int64_t>(first_step_, 0)) /
                            workers.allreduce_max(train_time_);
    if (layout_.stages > 1) write_pipeline_meter();
    write_run_end(workers, world_, run_end_, result_, *tracer_);
    return result_;
  }

  void write_pipeline_meter() {
    std::vector<int> layers_per_stage(static_cast<size_t>(layout_.stages), 0);
    for (int u = 0; u < layout_.vstages(); ++u)
      layers_per_stage[static_cast<size_t>(u % layout_.stages)] +=
          layout_.layers[static_cast<size_t>(u)];
    const PipelineMeter::Summary bubble =
        meter_->write(grid_->pp(), *workers_, grid_->dp().rank(), grid_->coord().tp, *model_,
                      layers_per_stage, options_.out_dir);
    if (lead_ && options_.verbose)
      std::printf(
          "pipeline %s: bubble %.4f measured (idle share %.4f), %.4f simulated at the "
          "measured costs, %.4f closed form\n",
          pp::describe(schedule_).c_str(), bubble.bubble, bubble.idle_share, bubble.bubble_sim,
          bubble.bubble_formula);
  }

  Comm& world_;
  const Config& config_;
  const TrainOptions& options_;
  Progress& progress_;
  const Stopwatch wall_;
  TrainResult result_;
  // plan()
  RunOptions run_;
  const LoopOptions& o_ = run_.loop;
  const SyncOptions& sync_options_ = run_.sync;
  DatasetPair data_;
  std::string sync_name_;
  StepPlan plan_;
  SyncCapabilities backend_;
  Device device_ = Device::kCpu;
  pp::Schedule schedule_;
  StageLayout layout_;
  // build_grid()
  int trainers_ = 0, grid_t_ = 1;
  std::unique_ptr<Allreducer> hybrid_dp_;
  GridShape shape_;
  std::unique_ptr<ProcessGrid> grid_;
  std::unique_ptr<Allreducer> tp_allreduce_;
  std::unique_ptr<TpGroup> tp_;
  // build_model()
  std::unique_ptr<Model> model_;
  ParamStore store_;
  std::vector<std::pair<int, int>> chunk_params_;  // [chunk] its parameters' store indices
  std::vector<TiedParam> tied_;
  std::vector<float> tied_scratch_;
  // plan_checkpoints_and_stops()
  JobIdentity job_;
  DpResize resize_;
  int64_t first_step_ = -1;
  // start_sync(), start_overlap(), restore()
  std::unique_ptr<SyncInit> init_;
  SyncSetup setup_;
  Comm* workers_ = nullptr;
  GradientSync* sync_ = nullptr;
  int d_ = 1;
  int64_t local_batch_ = 0;
  bool holds_loss_ = false;
  std::unique_ptr<OverlapSync> overlap_;
  double restore_s_ = 0;
  // start_loop()
  std::unique_ptr<Tracer> tracer_;
  std::unique_ptr<pp::StageExecutor> executor_;
  std::unique_ptr<PipelineMeter> meter_;
  RunEnd run_end_;
  bool lead_ = false;
  std::unique_ptr<StepLog> log_;
  int64_t tp_formula_ = 0, gather_formula_ = 0, hybrid_floats_ = 0, pp_formula_ = 0,
          dp_formula_ = 0;
  // train_steps()
  Batch batch_;
  std::vector<int64_t> order_;
  int64_t order_epoch_ = -1;
  double train_time_ = 0;
  int64_t steps_done_ = 0;
};

TrainResult run_training(Comm& world, const Config& config, const TrainOptions& options,
                         Progress& progress) {
  return TrainingRun(world, config, options, progress).run();
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
      write_error_summary(progress.end, world.size(), progress.steps_done, e.what());
    throw;
  }
}

}  // namespace psar
