#pragma once
// What the training loop (trainer.cc) uses beside the model: the step plan
// read from the config, the epoch shuffle (the same
// on every rank, which is what makes a parallel run equal the serial one), the
// progress line, and the run files of docs/outputs.md written at the start
// and the end (config.yaml, summary.csv, trace.json; the per-step files
// stream through step_log.h).

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "comm/comm.h"
#include "core/config.h"
#include "core/csv.h"
#include "core/optim.h"
#include "core/trace.h"
#include "trainer/loop_options.h"
#include "trainer/trainer.h"
#include "workloads/dataset.h"
#include "workloads/model.h"

namespace psar {

// The same permutation of [0, n) on every rank for a given (seed, epoch).
std::vector<int64_t> epoch_order(int64_t n, uint64_t seed, int64_t epoch);

struct StepPlan {
  int64_t batch_size = 0;       // global batch
  int64_t steps_per_epoch = 0;
  int64_t total_steps = 0;
  int64_t log_every = 1;
  int64_t eval_every = 0;       // 0: once per epoch
  // Evaluate after step `step` (1-based)?
  bool eval_after(int64_t step) const;
};
// ConfigError for a batch larger than the training set, or zero steps.
StepPlan plan_steps(const StepOptions& options, int64_t train_samples);

// One row of steps.csv.
struct StepRow {
  int64_t step;
  double epoch, loss, step_s, compute_s, sync_s;
  int64_t bytes_sent, bytes_recv, messages;
  double exposed_sync_s;  // the part of the sync the step waited for after the backward
  double injected_s = 0;       // delay injected after the compute (trainer/hetero.h)
  int64_t pushes_dropped = 0;  // chunk pushes the PS dropped as late (ps.backup_workers)
  int workers = 0;  // workers whose gradients this step's new parameters averaged
};

// The evaluation split: calls fn(batch) for the test rows of data-parallel
// rank `rank` of `ranks` (an even split), 1000 rows at a time.
void for_each_eval_batch(const Dataset& test, int rank, int ranks,
                         const std::function<void(const Batch&)>& fn);
// Adds up every rank's counts over `comm` (control plane).
EvalStats sum_eval(Comm& comm, EvalStats mine);

// "epoch 1  step 20/100  loss 0.6931  acc -  1234 samples/s  ETA 0:12", to stdout.
// train_time: of the steps after `first_step` (those a resumed run took).
void print_progress(const StepPlan& plan, int64_t step, double mean_loss, double test_accuracy,
                    double train_time, int64_t first_step = 0);
void print_eval(int64_t step, double test_loss, double test_accuracy);

// The run directory's files at the start and at the end of a run (the
// per-step ones stream through StepLog, step_log.h).
// Collective over `world`, before anything is written: a run directory is
// never mixed. options.out_dir may be new, empty, the run options.resume_from
// continues, or — with options.overwrite — a run, which world rank 0 then
// clears. Anything else is an agreed ConfigError (core/errors.h) that says
// what to pass, and nothing is touched: a run there without --overwrite, a
// directory of files that are not a run (never cleared), a file.
void prepare_run_dir(Comm& world, const TrainOptions& options);
// config.yaml, once the run is known to start (rank 0 of `workers`).
void begin_run_files(Comm& workers, const std::string& config_text, const std::string& out_dir);

// What summary.csv names besides the result.
struct RunEnd {
  std::string out_dir;  // "" = write nothing (the gathers still happen)
  std::string sync;     // the backend's name
  std::string network;  // NetModel::describe()
  RecordOptions records;
};
// summary.csv (status: result.status) and trace.json. Collective over `workers`
// (the trace is gathered); rank 0 writes.
void write_run_end(Comm& workers, Comm& world, const RunEnd& end, const TrainResult& result,
                   const Tracer& tracer);
// summary.csv of a run that stopped on an error this rank caught cleanly:
// status "error: <what>", the steps completed, the other results empty.
// Local to the calling rank (worker rank 0); never throws.
void write_error_summary(const RunEnd& end, int world_size, int64_t steps_done,
                         const std::string& what);

}  // namespace psar
