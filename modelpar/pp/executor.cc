#include "modelpar/pp/executor.h"

#include <algorithm>
#include <chrono>
#include <string>
#include <thread>

#include "core/errors.h"
#include "core/timer.h"
#include "modelpar/pp/validate.h"

namespace psar::pp {

using psar::detail::concat;

namespace {

const char* category(Op op) {
  switch (op) {
    case Op::kForward:
      return "forward";
    case Op::kBackward:
      return "backward";
    case Op::kBackwardInput:
      return "backward_input";
    case Op::kBackwardWeight:
      return "backward_weight";
  }
  return "compute";
}

std::string transfer_args(const Transfer& t, int peer, int64_t numel) {
  return concat("{\"microbatch\":", t.microbatch, ",\"from_vstage\":", t.from_vstage,
                ",\"to_vstage\":", t.to_vstage, ",\"peer\":", peer,
                ",\"bytes\":", numel * static_cast<int64_t>(sizeof(float)), "}");
}

void sleep_for(double seconds) {
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
}

}  // namespace

int64_t transfer_numel(const StageModel& model, const Transfer& t) {
  return model.boundary_numel(std::min(t.from_vstage, t.to_vstage));
}

int64_t predicted_peak_bytes(const Schedule& s, int stage, const StageModel& model) {
  int64_t live = 0, peak = 0;
  for (const Action& a : s.actions.at(static_cast<size_t>(stage))) {
    if (a.op == Op::kForward) peak = std::max(peak, live += model.activation_bytes(a.chunk));
    if (a.op == Op::kBackward || a.op == Op::kBackwardWeight)
      live -= model.activation_bytes(a.chunk);
  }
  return peak;
}

StageExecutor::StageExecutor(Schedule schedule, Comm& pipeline, StageModel& model,
                             ExecutorOptions options)
    : schedule_(std::move(schedule)), comm_(pipeline), model_(model), options_(options),
      stage_(pipeline.rank()) {
  if (options_.scatter_gather && options_.scatter_gather->size() > 1) {
    gather_comm_ = options_.scatter_gather;
    gather_ = std::make_unique<RingAllGather>();
  }
  if (schedule_.stages != pipeline.size())
    throw ConfigError(concat(describe(schedule_), ": the schedule has ", schedule_.stages,
                             " stages but the pipeline group has ", pipeline.size(), " ranks"));
  validate(schedule_);
  program_ = lower(schedule_)[static_cast<size_t>(stage_)];
  // One buffer per transfer this stage receives or sends, indexed by tag.
  const size_t tags = static_cast<size_t>(2 * schedule_.virtual_stages() * schedule_.microbatches);
  buffer_index_.assign(tags, -1);
  auto plan = [&](const std::optional<Transfer>& t) {
    if (!t) return;
    int& index = buffer_index_.at(static_cast<size_t>(t->tag));
    if (index >= 0) return;  // p = 1: producer and consumer share it
    const int64_t numel = transfer_numel(model_, *t);
    if (numel <= 0)
      throw ConfigError(concat(describe(schedule_), ": the model's boundary after virtual stage ",
                               std::min(t->from_vstage, t->to_vstage), " has ", numel,
                               " floats; activations must not be empty"));
    if (gather_comm_ && numel % gather_comm_->size() != 0)
      throw ConfigError(concat(describe(schedule_), ": parallel.scatter_gather cuts the ", numel,
                               "-float activation after virtual stage ",
                               std::min(t->from_vstage, t->to_vstage), " into ",
                               gather_comm_->size(), " equal slices, which it is not"));
    index = static_cast<int>(buffers_.size());
    buffers_.emplace_back(static_cast<size_t>(numel));
  };
  for (const Step& step : program_) {
    plan(step.input);
    plan(step.output);
  }
  live_.resize(static_cast<size_t>(schedule_.chunks * schedule_.microbatches));
  free_.resize(static_cast<size_t>(schedule_.chunks));
  // Each chunk's last weight-gradient action (fused or split) of the batch.
  last_weight_action_.assign(program_.size(), 0);
  std::vector<int> last(static_cast<size_t>(schedule_.chunks), -1);
  for (size_t k = 0; k < program_.size(); ++k) {
    const Action& a = program_[k].action;
    if (a.op == Op::kBackward || a.op == Op::kBackwardWeight)
      last[static_cast<size_t>(a.chunk)] = static_cast<int>(k);
  }
  for (int k : last)
    if (k >= 0) last_weight_action_[static_cast<size_t>(k)] = 1;
  if (options_.gradient_sink) model_.set_gradient_sink(this);
  if (options_.param_gate) model_.set_param_gate(this);
}

void StageExecutor::ready(int chunk, int64_t begin, int64_t end) {
  if (chunk == armed_chunk_) options_.gradient_sink->ready(chunk, begin, end);
}

void StageExecutor::need(int chunk, int64_t begin, int64_t end) {
  const double t0 = now_seconds();
  options_.param_gate->need(chunk, begin, end);
  waited("params", chunk, begin, end, t0);
}

void StageExecutor::need_backward(int chunk, int64_t begin, int64_t end) {
  const double t0 = now_seconds();
  options_.param_gate->need_backward(chunk, begin, end);
  waited("params_backward", chunk, begin, end, t0);
}

void StageExecutor::done(int chunk, int64_t begin, int64_t end) {
  options_.param_gate->done(chunk, begin, end);
}

void StageExecutor::waited(const char* span, int chunk, int64_t begin, int64_t end, double t0) {
  if (!running_) return;  // an evaluation's forward, outside run()
  const double t1 = now_seconds();
  running_->param_wait_s += t1 - t0;
  // A span on the compute track: where a layer waited for its parameters,
  // and (its end) when its forward ("params") or backward ("params_backward")
  // began.
  if (options_.tracer && options_.tracer->enabled())
    options_.tracer->span(span, "sync", t0, t1, 0,
                          concat("{\"chunk\":", chunk, ",\"begin\":", begin, ",\"end\":", end,
                                 "}"));
}

std::vector<float>& StageExecutor::buffer(const Transfer& t) {
  return buffers_[static_cast<size_t>(buffer_index_[static_cast<size_t>(t.tag)])];
}

std::span<float> StageExecutor::wire(const Transfer& t) {
  std::span<float> whole(buffer(t));
  if (!gather_comm_) return whole;
  const size_t slice = whole.size() / static_cast<size_t>(gather_comm_->size());
  return whole.subspan(static_cast<size_t>(gather_comm_->rank()) * slice, slice);
}

Activations& StageExecutor::take(int chunk, int microbatch) {
  auto& slot = live_[static_cast<size_t>(chunk * schedule_.microbatches + microbatch)];
  PSAR_CHECK(!slot, "stage ", stage_, ": micro-batch ", microbatch, " runs forward twice on chunk ",
             chunk);
  auto& pool = free_[static_cast<size_t>(chunk)];
  if (pool.empty()) {
    slot = model_.make_activations(chunk);
  } else {
    slot = std::move(pool.back());
    pool.pop_back();
  }
  ++live_count_;
  return *slot;
}

void StageExecutor::release(int chunk, int microbatch) {
  auto& slot = live_[static_cast<size_t>(chunk * schedule_.microbatches + microbatch)];
  free_[static_cast<size_t>(chunk)].push_back(std::move(slot));
  --live_count_;
}

void StageExecutor::await(Request& request, const Transfer& t, const Action& action) {
  const double start = now_seconds(), deadline = start + comm_.timeout();
  double interval = options_.poll_min_s;
  while (!request.test()) {
    if (now_seconds() >= deadline)
      throw TimeoutError(concat("rank ", comm_.rank(), ": pipeline stage ", stage_, ": the ",
                                describe(t), " for ", op_name(action.op), " of micro-batch ",
                                action.microbatch, ", chunk ", action.chunk,
                                " did not complete within ", comm_.timeout(), " s (",
                                describe(schedule_), ")"));
    sleep_for(interval);
    if (now_seconds() - start > options_.poll_fast_s)
      interval = std::min(2 * interval, options_.poll_max_s);
  }
}

StageRun StageExecutor::run() {
  // Waiting ranks poll in sleeps of tens of µs and the synthetic workload
  // sleeps its compute: for the length of one batch, wake-ups within 1 µs.
  const TimerSlack slack;
  Tracer* tracer = options_.tracer && options_.tracer->enabled() ? options_.tracer : nullptr;
  PSAR_CHECK(live_count_ == 0, "stage ", stage_, " starts a batch with ", live_count_,
             " stashed activations");
  StageRun out;
  out.spans.reserve(program_.size());
  running_ = &out;
  struct Done {
    StageRun*& running;
    ~Done() { running = nullptr; }
  } done{running_};

  // 1. Every receive of the batch, posted at once.
  std::vector<Request> receives(program_.size());
  for (size_t k = 0; k < program_.size(); ++k) {
    const auto& in = program_[k].input;
    if (in && !in->local()) receives[k] = comm_.irecv(in->from_stage, wire(*in), in->tag);
  }

  // 2. The actions, in order.
  std::vector<std::pair<Request, const Step*>> sends;
  sends.reserve(program_.size());
  for (size_t k = 0; k < program_.size(); ++k) {
    const Step& step = program_[k];
    const Action& a = step.action;
    std::pair<double, double> recv_span{0, 0}, send_span{0, 0};  // traced after the send
    std::span<const float> x;
    if (step.input) {
      if (receives[k].valid()) {
        const double t0 = now_seconds();
        await(receives[k], *step.input, a);
        const double t1 = now_seconds();
        out.recv_wait_s += t1 - t0;
        recv_span = {t0, t1};
        if (gather_comm_) {  // the slices of every TP rank, into the whole tensor
          const CommCounters before = gather_comm_->counters();
          gather_->all_gather(*gather_comm_, std::span<float>(buffer(*step.input)));
          out.gather_s += now_seconds() - t1;
          out.gather_bytes_sent += gather_comm_->counters().bytes_sent - before.bytes_sent;
        }
      }
      x = buffer(*step.input);
    }
    std::span<float> y;
    if (step.output) y = buffer(*step.output);

    const double start = now_seconds(), waited = out.param_wait_s;
    auto& slot = live_[static_cast<size_t>(a.chunk * schedule_.microbatches + a.microbatch)];
    if (a.op != Op::kForward)
      PSAR_CHECK(slot, "stage ", stage_, ": ", op_name(a.op), " of micro-batch ", a.microbatch,
                 " on chunk ", a.chunk, " before its forward");
    armed_chunk_ = last_weight_action_[k] ? a.chunk : -1;
    switch (a.op) {
      case Op::kForward:
        model_.forward(a.chunk, a.microbatch, take(a.chunk, a.microbatch), x, y);
        break;
      case Op::kBackward:
        model_.backward(a.chunk, a.microbatch, *slot, x, y);
        break;
      case Op::kBackwardInput:
        model_.backward_input(a.chunk, a.microbatch, *slot, x, y);
        break;
      case Op::kBackwardWeight:
        model_.backward_weight(a.chunk, a.microbatch, *slot);
        break;
    }
    armed_chunk_ = -1;
    const double end = now_seconds();
    // The output first: its consumer may be waiting for it, and nothing
    // below (the accounting, the trace) is on its path.
    if (step.output && !step.output->local()) {
      const Transfer& t = *step.output;
      sends.emplace_back(comm_.isend(t.to_stage, std::span<const float>(wire(t)), t.tag), &step);
      send_span = {end, now_seconds()};
      out.send_s += send_span.second - send_span.first;
    }
    out.spans.push_back({a, start, end});
    out.compute_s += end - start - (out.param_wait_s - waited);
    // The stash after the action, before a finished micro-batch is freed.
    int64_t live_bytes = 0;
    for (const auto& stash : live_)
      if (stash) live_bytes += stash->bytes();
    out.peak_activations = std::max(out.peak_activations, live_count_);
    out.peak_activation_bytes = std::max(out.peak_activation_bytes, live_bytes);
    if (a.op == Op::kBackward || a.op == Op::kBackwardWeight) release(a.chunk, a.microbatch);
    if (tracer) {
      const std::string cell = cell_label(a, schedule_.chunks);
      if (recv_span.second > 0)
        tracer->span(("recv " + cell).c_str(), "recv", recv_span.first, recv_span.second, 0,
                     transfer_args(*step.input, step.input->from_stage,
                                   static_cast<int64_t>(wire(*step.input).size())));
      tracer->span(cell.c_str(), category(a.op), start, end);
      if (send_span.second > 0)
        tracer->span(("send " + cell).c_str(), "send", send_span.first, send_span.second, 0,
                     transfer_args(*step.output, step.output->to_stage,
                                   static_cast<int64_t>(wire(*step.output).size())));
    }
  }
  out.start = out.spans.empty() ? now_seconds() : out.spans.front().start;
  out.end = out.spans.empty() ? out.start : out.spans.back().end;

  // 3. The sends, before their buffers are reused.
  const double t0 = now_seconds();
  for (auto& [request, step] : sends) await(request, *step->output, step->action);
  const double t1 = now_seconds();
  out.send_s += t1 - t0;
  if (tracer && !sends.empty()) tracer->span("sends complete", "send", t0, t1);
  PSAR_CHECK(live_count_ == 0, "stage ", stage_, " ends a batch of ", describe(schedule_),
             " with ", live_count_, " stashed activations");
  return out;
}

}  // namespace psar::pp
