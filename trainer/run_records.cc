// TrainingRun after a step and at the end (training_run.h): the mean loss,
// an evaluation, the rows to disk, a checkpoint when due; the results.
#include "trainer/training_run.h"

#include <algorithm>
#include <cstdio>

#include "modelpar/pp/generators.h"

namespace psar {

namespace {

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
  for_each_eval_batch(
      test, alone ? 0 : grid.dp().rank(), alone ? 1 : grid.dp().size(), [&](const Batch& batch) {
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

}  // namespace

// After a step: the mean loss every log interval, an evaluation, the rows
// to disk, a checkpoint.
void TrainingRun::end_step(int64_t step, double loss, int stop, bool last) {
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

TrainResult TrainingRun::finish() {
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

void TrainingRun::write_pipeline_meter() {
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

}  // namespace psar
