// TrainingRun's loop (training_run.h): each step's slice of the batch through
// the pipeline, the finalize step, the step's rows and the stop the workers
// agree on.
#include "trainer/training_run.h"

#include <algorithm>
#include <cstdio>

#include "core/ops.h"
#include "modelpar/tp/shard.h"
#include "trainer/axes.h"
#include "trainer/hetero.h"

namespace psar {

using psar::detail::concat;

namespace {

// The batch's touched rows as row numbers of the arena's head, ascending.
std::vector<int64_t> touched_rows(const Model& model, const SparseRows& space) {
  std::vector<int64_t> rows;
  const auto tables = model.sparse_tables();
  for (size_t t = 0; t < tables.size(); ++t)
    for (const int64_t r : model.touched_rows(static_cast<int>(t)))
      rows.push_back(tables[t].offset / space.row_floats + r);
  return rows;  // tables in arena order, rows ascending within each
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
int64_t dp_floats_formula(const Model& model, const ParamStore& store, int t) {
  const ShardedParams* sharded = model.sharded_params();
  if (!sharded) return static_cast<int64_t>(store.size());
  int64_t n = 0;
  for (const auto& e : sharded->entries()) n += numel(shard_shape(e.full.shape, e.spec, t));
  return n;
}

}  // namespace

void TrainingRun::start_loop() {
  Comm& workers = *workers_;
  tracer_ = std::make_unique<Tracer>(o_.trace);
  executor_ = std::make_unique<pp::StageExecutor>(
      schedule_, grid_->pp(), *model_,
      pp::ExecutorOptions{
          .tracer = tracer_.get(),
          .scatter_gather = o_.parallel.scatter_gather ? &grid_->tp() : nullptr,
          .gradient_sink = sync_->gradient_sink() ? sync_->gradient_sink() : overlap_.get(),
          .param_gate = sync_->param_gate()                 ? sync_->param_gate()
                        : overlap_ && overlap_->layerwise() ? overlap_.get()
                                                            : nullptr});
  meter_ = std::make_unique<PipelineMeter>(schedule_, layout_.stage);
  run_end_ = RunEnd{options_.out_dir, sync_->name(), run_.network.describe(), o_.records};
  progress_.end = run_end_;
  progress_.lead = workers.rank() == 0;
  lead_ = workers.rank() == 0;
  log_ = std::make_unique<StepLog>(
      workers, grid_->pp(), grid_->shape(), grid_->coord(),
      StepLogOptions{.out_dir = options_.out_dir,
                     .tp_csv = grid_t_ > 1,
                     .resume_step = first_step_,
                     .resume_from = options_.resume_from,
                     .sequence_parallel = run_.workload.gpt.sequence_parallel,
                     .recompute = run_.workload.gpt.recompute});
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
  dp_formula_ =
      o_.parallel.hybrid ? hybrid_floats_ : dp_floats_formula(*model_, store_, grid_->tp().size());
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

void TrainingRun::train_steps() {
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
double TrainingRun::train_step(int64_t step) {
  if (run_.hetero.kills(world_.rank(), step)) kill_now(world_.rank(), step);
  const Stopwatch step_clock;
  load_batch(step);
  store_.zero_grads();
  Comm& tpc = grid_->tp();
  Comm& pipeline = grid_->pp();
  const TpCounters tp0 = tp_->counters;
  const CommCounters tpc0 = tpc.counters(), pipe0 = pipeline.counters(), sync0 = sync_->counters();
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
      {step + 1, static_cast<double>(step + 1) / plan_.steps_per_epoch, loss, step_s, run.compute_s,
       sync_s,
       axis.tp_bytes_sent + axis.pp_bytes_sent + axis.pp_gather_bytes_sent + axis.dp_bytes_sent,
       tpc1.bytes_recv - tpc0.bytes_recv + pipe1.bytes_recv - pipe0.bytes_recv + sync1.bytes_recv -
           sync0.bytes_recv,
       axis.tp_messages + pipe1.messages_sent - pipe0.messages_sent + sync1.messages_sent -
           sync0.messages_sent,
       exposed_s, injected_s, sync1.pushes_dropped - sync0.pushes_dropped,
       sync_->averaged() > 0 ? sync_->averaged() : d_},
      axis);
  return loss;
}

// This replica's slice of the step's batch, in the epoch's order.
void TrainingRun::load_batch(int64_t step) {
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

// The finalize step: tied parameters over their pair, then the
// data-parallel sync — all of it, or what the overlap left: waiting for
// the buckets, then the tied parameters' ranges and the optimizer.
void TrainingRun::finalize(Finalized& f) {
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
      sync_->sync_range(info.offset, store_.params().subspan(at, n), store_.grads().subspan(at, n));
    }
    sync_->finish(store_.params(), store_.grads());
  }
  share_tied_params(store_, tied_, layout_, pipeline);
  sync_->params_shared();
}

// The communication thread's spans on track 1 of this rank; layer-wise,
// the pulls in flight on track 2. Returns the thread's time in the backend.
double TrainingRun::trace_comm(const std::vector<CommSpan>& spans) {
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
int TrainingRun::agree_on_stop(int64_t step) {
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

}  // namespace psar
