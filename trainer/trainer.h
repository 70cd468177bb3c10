#pragma once
// The one training loop, for every (p, t, d). Every rank of `world` calls
// train(); the sync backend decides which ranks are workers (all of them,
// except dedicated PS servers).
//
// The workers form the (p, t, d) grid (modelpar/grid.h, parallel.order).
// Each step the global batch (train.batch_size = B) is cut into d equal
// contiguous slices, one per data-parallel replica; each replica cuts its
// slice into m micro-batches of b = B/(d·m) rows (parallel.microbatches),
// and its p pipeline stages run the configured schedule on them
// (parallel.schedule, parallel.chunks = v) with the stage executor
// (modelpar/pp/executor.h), the t ranks of each stage running the stage's
// tensor-parallel layers together. The m micro-batches' gradients add up to
// the gradient of the slice's mean loss. Then the finalize step: the tied
// parameters' gradients are reduced over their pair of stages, and each rank
// averages its gradients over its d replicas with the configured sync backend
// (GradientSync, the one place it is called) and steps. Data parallelism
// alone is the case p = t = 1, m = 1. With the same seed the result equals
// one rank training on the whole batch, up to float rounding.
//
// Reliability (docs/checkpoints.md): before step 1 every rank checks that all
// ranks agree on the configuration, version, backend and parameter counts
// (agreement.h); the per-step files stream to disk every log interval
// (step_log.h); train.checkpoint_every writes a checkpoint that --resume
// continues bitwise identically. A run stops early — after the step where
// train.exit_at_step or train.exit_after say so, or after the step the
// workers agree on once a stop signal is set (TrainOptions::stop_signal) —
// with its rows flushed, a checkpoint and summary.csv's status saying why.
//
// Everything that can be checked before the first step is: a grid the model
// cannot use (p·t·d ≠ world size, t not dividing heads or d_model, p·v >
// layers, an unknown order), a schedule that cannot run the shape, a batch
// that d·m does not divide — each a ConfigError naming the keys and values.

#include <atomic>
#include <string>
#include <vector>

#include "comm/comm.h"
#include "core/config.h"

namespace psar {

struct TrainOptions {
  std::string out_dir;   // "" = write no files
  bool verbose = false;  // rank 0 prints progress lines
  // Continue from the latest complete checkpoint of this run directory
  // ("" = a new run; core/checkpoint.h); a ConfigError names what differs
  // when it was written by another configuration, grid or world size. The
  // same directory as out_dir continues the run in place; another one
  // branches it: out_dir starts with its step rows up to the checkpoint and
  // resume_from is only read.
  std::string resume_from;
  // out_dir already holds a run that this one does not continue: clear it
  // first. Without it the run is refused (a ConfigError, nothing touched).
  bool overwrite = false;
  // Set to a signal's number (SIGTERM, SIGINT) by the caller's handler: the
  // workers agree to stop after the step in progress, write a checkpoint when
  // train.checkpoint_every is on and end with status "terminated". Null: the
  // flag is never read (and no per-step exchange is made for it).
  const std::atomic<int>* stop_signal = nullptr;
};

struct TrainResult {
  bool server = false;           // this rank was a dedicated PS server
  // How the run ended (summary.csv's status): "finished" (every step),
  // "exited" (train.exit_at_step or train.exit_after), "terminated" (stop_signal).
  std::string status = "finished";
  int stop_signal = 0;           // the signal that ended it ("terminated")
  int64_t steps = 0;             // the last step completed
  int64_t first_step = 0;        // steps a resumed run found done (0: a new run)
  double epochs = 0;             // passes over the training set completed
  std::vector<float> params;     // the whole model, in the serial model's order (worker ranks)
  std::vector<double> losses;    // this replica's mean loss per step run in this process
  double final_loss = 0;         // global-batch mean loss of the last step
  double test_accuracy = -1;     // last evaluation (-1 = none)
  double test_loss = -1;
  double wall_s = 0;
  double samples_per_s = 0;
  int workers = 0;               // data-parallel world size d
};

TrainResult train(Comm& world, const Config& config, const TrainOptions& options = {});

}  // namespace psar
