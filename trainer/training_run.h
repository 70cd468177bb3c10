#pragma once
// One training run on this rank (train(), trainer.h), told in the order it
// happens by TrainingRun::run() in trainer.cc. Each step is a member
// function, and the steps live in one file per concern:
//   run_setup.cc    the plan, the grid and this rank's part of the model, the
//                   checkpoint to continue from and the early stops
//   run_sync.cc     the gradient sync and its overlap
//   run_step.cc     the loop: one step through the pipeline and the finalize
//                   step, its rows, the stop the workers agree on
//   run_records.cc  after a step (the mean loss, an evaluation, the rows to
//                   disk) and the results at the end
//   run_checkpoints.cc  restoring from a checkpoint and writing one
// The members are declared in the order the steps make them.

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "allreduce/allreducer.h"
#include "comm/comm.h"
#include "core/config.h"
#include "core/device.h"
#include "core/param_store.h"
#include "core/timer.h"
#include "core/trace.h"
#include "modelpar/grid.h"
#include "modelpar/pp/executor.h"
#include "modelpar/pp/partition.h"
#include "modelpar/tp/group.h"
#include "sync/gradient_sync.h"
#include "sync/overlap.h"
#include "trainer/loop_options.h"
#include "trainer/model_parts.h"
#include "trainer/pipeline_meter.h"
#include "trainer/run_checkpoints.h"
#include "trainer/run_common.h"
#include "trainer/step_log.h"
#include "trainer/trainer.h"
#include "workloads/model.h"

namespace psar {

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

class TrainingRun {
 public:
  TrainingRun(Comm& world, const TrainOptions& options, Progress& progress)
      : world_(world), options_(options), progress_(progress) {}

  // The configuration is read here, at the start, and nowhere after: its
  // record (what config.yaml, the checkpoints and the agreement hold) and
  // the typed options of every subsystem (plan()).
  TrainResult run(const Config& config);

 private:
  // run_setup.cc: data, steps, the grid, the model — everything checked
  // before any work; the checkpoint to continue from and the early stops.
  void plan(const Config& config);
  void check_backend() const;
  void build_grid();
  std::unique_ptr<Allreducer> on_device(const std::string& name,
                                        std::unique_ptr<Allreducer> algorithm) const;
  void build_model();
  void plan_checkpoints_and_stops();
  // ps.on_worker_failure: continue — the workers' control plane goes on
  // without a worker that died (sync_capabilities refuses it for any backend
  // but the parameter server).
  bool survives_worker_failure() const { return sync_options_.ps.server.continue_on_failure; }

  // run_sync.cc: gradient synchronization over this rank's data-parallel group.
  bool start_sync();
  void start_overlap();

  // run_checkpoints.cc
  void restore();
  void write_checkpoint(int64_t done);

  // run_step.cc: the loop, its executor, meters, rows and the formulas they check.
  void start_loop();
  void train_steps();
  double train_step(int64_t step);
  void load_batch(int64_t step);
  struct Finalized {
    double exposed_s = 0;  // the finalize step on this thread (the caller times it)
    double sync_s = 0;     // the communication thread's time in the backend (overlap)
    int64_t hybrid_bytes = 0;
  };
  void finalize(Finalized& f);
  double trace_comm(const std::vector<CommSpan>& spans);
  int agree_on_stop(int64_t step);

  // run_records.cc: after a step, and the results.
  void end_step(int64_t step, double loss, int stop, bool last);
  TrainResult finish();
  void write_pipeline_meter();

  Comm& world_;
  const TrainOptions& options_;
  Progress& progress_;
  const Stopwatch wall_;
  TrainResult result_;
  ConfigRecord config_;  // run(): the configuration as the run records it
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

}  // namespace psar
