// The training loop's checkpoints (trainer/run_checkpoints.h).
#include "trainer/run_checkpoints.h"

#include <algorithm>
#include <cstdio>
#include <map>

#include "allreduce/partition.h"
#include "core/errors.h"
#include "core/optim.h"
#include "trainer/agreement.h"
#include "trainer/training_run.h"

namespace psar {

// The checkpoint --resume continues from: the latest complete one in
// out_dir as world rank 0 sees it (broadcast, so every rank reads the same
// one), checked against this job on every rank. -1 for a new run.
// `resize`: whether it was written by another data-parallel size (dp_resize).
int64_t find_resume_step(Comm& world, const ConfigRecord& config, const TrainOptions& options,
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
  resize = dp_resize(manifest, job);
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

// TrainingRun's checkpoints (training_run.h): restoring the one the run
// continues from, writing one.
void TrainingRun::restore() {
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

// Writes this step's checkpoint: every worker its file, then (after a
// barrier: every file, the shards' too, is in place) rank 0 the MANIFEST.
void TrainingRun::write_checkpoint(int64_t done) {
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

}  // namespace psar
