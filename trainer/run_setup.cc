// TrainingRun, before any work (training_run.h): the plan and every check a
// key can fail, the grid, this rank's part of the model, the checkpoint to
// continue from and the early stops.
#include "trainer/training_run.h"

#include <algorithm>

#include "allreduce/staged.h"
#include "comm/mpi_comm.h"
#include "core/errors.h"
#include "modelpar/pp/generators.h"
#include "trainer/agreement.h"

namespace psar {

using psar::detail::concat;

namespace {

// The rows of one micro-batch: B/(d·m), or a ConfigError naming the keys.
int64_t microbatch_rows(int64_t batch, int d, int m) {
  if (batch % (static_cast<int64_t>(d) * m) != 0)
    throw ConfigError(concat("train.batch_size ", batch, " is not divisible by d·m = ", d, "·", m,
                             " = ", d * m, " (", d,
                             " data-parallel replicas, each cutting its slice into "
                             "parallel.microbatches = ",
                             m, ")"));
  return batch / (static_cast<int64_t>(d) * m);
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

}  // namespace

void TrainingRun::plan(const Config& config) {
  // Every key the run reads, once (trainer/loop_options.h).
  run_ = run_options(config, world_.rank(), world_.size());
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

void TrainingRun::check_backend() const {
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
void TrainingRun::build_grid() {
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
  tp_ =
      std::make_unique<TpGroup>(grid_ && grid_t_ > 1 ? &grid_->tp() : nullptr, tp_allreduce_.get());
}

// On a CUDA device a host algorithm reduces a copy in pinned host memory.
std::unique_ptr<Allreducer> TrainingRun::on_device(const std::string& name,
                                                   std::unique_ptr<Allreducer> algorithm) const {
  if (device_ != Device::kCpu && !find_allreducer(name).device)
    return stage_through_host(std::move(algorithm));
  return algorithm;
}

void TrainingRun::build_model() {
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

void TrainingRun::plan_checkpoints_and_stops() {
  job_.world_size = world_.size();
  job_.workers = trainers_;
  job_.pp = shape_.pp;
  job_.tp = shape_.tp;
  job_.dp = shape_.dp;
  job_.order = o_.parallel.order;
  job_.sync = sync_name_;
  job_.total_steps = plan_.total_steps;
  job_.psar_version = psar_version();
  job_.lr_schedule = run_.optimizer.schedule;
  job_.zero = sync_options_.zero;
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
  const double sync_timeout = sync_options_.timeout, ps_timeout = sync_options_.ps.server.timeout_s;
  if (survives_worker_failure() && !(sync_timeout < ps_timeout))
    throw ConfigError(concat("ps.on_worker_failure: continue needs sync.timeout (", sync_timeout,
                             " s) below ps.timeout (", ps_timeout,
                             " s): the workers must give up "
                             "on a dead worker before the servers give up on the live ones "
                             "waiting for it"));
  // A worker that died can keep MPI_Finalize's closing fence waiting for
  // ever (comm/mpi_comm.h): every process gives it longer than the last
  // waits of a live one (the servers' ps.timeout, the control plane's two
  // sync.timeout) and then exits with its code.
  if (survives_worker_failure()) MpiRuntime::finalize_within(ps_timeout + 2 * sync_timeout);
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

}  // namespace psar
