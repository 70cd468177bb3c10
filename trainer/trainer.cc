#include "trainer/trainer.h"

#include "trainer/agreement.h"
#include "trainer/training_run.h"

namespace psar {

// One run on this rank, told in the order it happens: plan and check
// everything, build the grid and this rank's part of the model, settle the
// checkpoint to continue from and the early stops, start the gradient sync
// (a dedicated server rank serves instead), restore, then the steps and the
// results. Each step is a member function (training_run.h says which file
// holds it).
TrainResult TrainingRun::run(const Config& config) {
  config_ = ConfigRecord::of(config);
  check_agreement(world_, config_, options_.out_dir);
  plan(config);
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
  begin_run_files(*workers_, config_.text, options_.out_dir);
  start_loop();
  train_steps();
  return finish();
}

TrainResult train(Comm& world, const Config& config, const TrainOptions& options) {
  Progress progress;
  try {
    return TrainingRun(world, options, progress).run(config);
  } catch (const Error& e) {
    // A clean error (a deadline, a peer that reported failure): the rows so
    // far are on disk; summary.csv says how the run ended.
    if (progress.lead)
      write_error_summary(progress.end, world.size(), progress.steps_done, e.what());
    throw;
  }
}

}  // namespace psar
