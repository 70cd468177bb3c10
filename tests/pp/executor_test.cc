// The stage executor on in-process ranks, with the synthetic stage model at
// zero layer times (its tensors carry tags that every chunk verifies): for
// every registered schedule over p ∈ {1, 2, 4}, m ∈ {p, 2p, 3p} (and 1 for
// GPipe), v ∈ {1, 2} where it runs, over two batches,
//  - each stage runs exactly its list, in order;
//  - the measured peak of the stash equals the simulator's peak_activations
//    exactly, and the bytes its Activations held predicted_peak_bytes (the
//    model's count from its layer shapes), with an uneven layer split so the
//    chunks' stashes differ;
//  - every weight-gradient action ran once per micro-batch (the gradient of
//    each layer's parameter adds up to 1);
//  - the messages and bytes sent are the exact count 2·m·(p·v − 1)
//    transfers of the activation size, none when p = 1.
// And the failures: a stage model that throws, a stage that never sends, a
// schedule for another group size.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <string>

#include "comm/inproc_comm.h"
#include "core/errors.h"
#include "core/trace.h"
#include "modelpar/pp/executor.h"
#include "modelpar/pp/generators.h"
#include "modelpar/pp/partition.h"
#include "modelpar/pp/simulate.h"
#include "workloads/synthetic_stages.h"

namespace psar::pp {
namespace {

using ::testing::HasSubstr;

struct Case {
  std::string kind;
  int p, m, v;
};

std::string name_of(const ::testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  return c.kind + "_p" + std::to_string(c.p) + "_m" + std::to_string(c.m) + "_v" + std::to_string(c.v);
}

std::vector<Case> sweep() {
  std::vector<Case> cases;
  for (const auto& e : schedule_registry()) {
    const std::string kind = e.name;
    for (int p : {1, 2, 4}) {
      std::set<int> ms{p, 2 * p, 3 * p};
      if (kind == "gpipe") ms.insert(1);
      for (int m : ms)
        for (int v : {1, 2})
          if (v == 1 || kind == "interleaved") cases.push_back({kind, p, m, v});
    }
  }
  return cases;
}

// p·v + 1 layers: the first virtual stage gets two, so chunks differ in size.
StageLayout layout_for(const Schedule& s, int stage) {
  StageLayout l;
  l.stages = s.stages;
  l.chunks = s.chunks;
  l.stage = stage;
  l.microbatches = s.microbatches;
  l.layers = partition_layers(s.virtual_stages() + 1, s.stages, s.chunks);
  return l;
}

constexpr int64_t kActivationBytes = 36;  // 9 floats

SyntheticStagesOptions zero_time(int layers) {
  SyntheticStagesOptions o;
  o.layers = layers;
  o.forward_s = o.backward_s = o.weight_grad_s = 0;
  o.activation_bytes = kActivationBytes;
  return o;
}

class ExecutorSweep : public ::testing::TestWithParam<Case> {};

TEST_P(ExecutorSweep, RunsTheListAndMeasuresThePredictedPeakAndTraffic) {
  const Case c = GetParam();
  const Schedule schedule = make_schedule(c.kind, {c.p, c.m, c.v, 0});
  const std::vector<int> peaks = peak_activations(schedule);
  std::mutex mu;
  int64_t messages = 0, bytes = 0;
  std::vector<std::vector<ActionSpan>> spans(static_cast<size_t>(c.p));  // batch 0's, per stage
  run_inproc(c.p, [&](Comm& comm) {
    const int stage = comm.rank();
    SyntheticStages model(zero_time(schedule.virtual_stages() + 1), {nullptr, layout_for(schedule, stage)});
    ParamStore store;
    for (int chunk = 0; chunk < c.v; ++chunk) model.declare(store, chunk);
    store.finalize(1);
    model.bind(store);
    StageExecutor executor(schedule, comm, model);
    for (int batch = 0; batch < 2; ++batch) {
      store.zero_grads();
      const CommCounters before = comm.counters();
      const StageRun run = executor.run();
      const auto& list = schedule.actions[static_cast<size_t>(stage)];
      ASSERT_EQ(run.spans.size(), list.size());
      for (size_t k = 0; k < list.size(); ++k) EXPECT_EQ(run.spans[k].action, list[k]) << "action " << k;
      if (batch == 0) {
        std::lock_guard<std::mutex> lock(mu);
        spans[static_cast<size_t>(stage)] = run.spans;
      }
      EXPECT_EQ(run.peak_activations, peaks[static_cast<size_t>(stage)]) << "stage " << stage;
      EXPECT_EQ(run.peak_activation_bytes, predicted_peak_bytes(schedule, stage, model));
      EXPECT_GT(run.peak_activation_bytes, 0);
      for (float g : store.grads()) EXPECT_NEAR(g, 1.0f, 1e-5f);
      std::lock_guard<std::mutex> lock(mu);
      messages += comm.counters().messages_sent - before.messages_sent;
      bytes += comm.counters().bytes_sent - before.bytes_sent;
    }
  });
  // Every action that takes another stage's output starts after that output
  // was produced (the threads share one clock): a forward of micro-batch j on
  // virtual stage u = chunk·p + stage after u−1's forward of j, a backward
  // (fused or input half) after u+1's. An executor that ran an action before
  // its input arrived fails here.
  const int V = c.p * c.v;
  auto span_of = [&](int u, Op op, int j) -> const ActionSpan* {
    for (const auto& sp : spans[static_cast<size_t>(u % c.p)])
      if (sp.action.chunk == u / c.p && sp.action.microbatch == j &&
          (sp.action.op == op || (op != Op::kForward && sp.action.op != Op::kForward &&
                                  sp.action.op != Op::kBackwardWeight)))
        return &sp;
    return nullptr;
  };
  int checked = 0;
  for (int stage = 0; stage < c.p; ++stage)
    for (const auto& sp : spans[static_cast<size_t>(stage)]) {
      const int u = sp.action.chunk * c.p + stage, j = sp.action.microbatch;
      const bool forward = sp.action.op == Op::kForward;
      if (sp.action.op == Op::kBackwardWeight || (forward ? u == 0 : u == V - 1)) continue;
      const ActionSpan* producer = span_of(forward ? u - 1 : u + 1, sp.action.op, j);
      ASSERT_NE(producer, nullptr) << "no producer for stage " << stage << " " << cell_label(sp.action, c.v);
      EXPECT_LE(producer->end, sp.start) << "stage " << stage << " " << cell_label(sp.action, c.v);
      ++checked;
    }
  EXPECT_EQ(checked, 2 * c.m * (V - 1));
  const int64_t transfers = c.p == 1 ? 0 : 2 * 2LL * c.m * (c.p * c.v - 1);  // two batches
  EXPECT_EQ(messages, transfers);
  EXPECT_EQ(bytes, transfers * kActivationBytes);
}

INSTANTIATE_TEST_SUITE_P(Schedules, ExecutorSweep, ::testing::ValuesIn(sweep()), name_of);

TEST(SyntheticStages, ADeliveryToTheWrongActionIsADataError) {
  StageLayout l;
  l.stages = 2;
  l.stage = 1;
  l.microbatches = 2;
  l.layers = {1, 1};
  SyntheticStages model(zero_time(2), {nullptr, l});
  std::vector<float> x(9, 0.0f), none;
  x[0] = 2;  // micro-batch 1's activation after layer 1 ...
  const auto stash = model.make_activations(0);
  try {
    model.forward(0, 0, *stash, x, none);  // ... handed to micro-batch 0
    FAIL() << "no error";
  } catch (const DataError& e) {
    EXPECT_THAT(e.what(), HasSubstr("tagged 2 for micro-batch 0, expected 1"));
  }
}

// Wraps a model and throws at one action, like a failing layer.
class Faulty final : public StageModel {
 public:
  Faulty(StageModel& inner, int fail_at) : inner_(inner), fail_at_(fail_at) {}
  int64_t boundary_numel(int u) const override { return inner_.boundary_numel(u); }
  std::unique_ptr<Activations> make_activations(int c) const override {
    return inner_.make_activations(c);
  }
  void forward(int c, int i, Activations& a, std::span<const float> x,
               std::span<float> y) override {
    tick();
    inner_.forward(c, i, a, x, y);
  }
  void backward_input(int c, int i, Activations& a, std::span<const float> dy,
                      std::span<float> dx) override {
    tick();
    inner_.backward_input(c, i, a, dy, dx);
  }
  void backward_weight(int c, int i, Activations& a) override { inner_.backward_weight(c, i, a); }
  int64_t activation_bytes(int c) const override { return inner_.activation_bytes(c); }

 private:
  void tick() {
    if (++calls_ == fail_at_) throw Error("layer failed on purpose");
  }
  StageModel& inner_;
  int fail_at_, calls_ = 0;
};

TEST(Executor, AFailingStageFailsEveryStageInsteadOfHanging) {
  const Schedule schedule = make_schedule("1f1b", {4, 8, 1, 0});
  std::atomic<int> failed{0};
  try {
    run_inproc(4, [&](Comm& comm) {
      SyntheticStages inner(zero_time(5), {nullptr, layout_for(schedule, comm.rank())});
      ParamStore store;
      inner.declare(store, 0);
      store.finalize(1);
      inner.bind(store);
      Faulty model(inner, comm.rank() == 2 ? 3 : -1);
      StageExecutor executor(schedule, comm, model);
      try {
        executor.run();
      } catch (const Error&) {
        ++failed;
        throw;
      }
    }, {20.0});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("layer failed on purpose"));
  }
  EXPECT_GE(failed.load(), 2);  // the faulty stage and at least one that waited on it
}

// The hop's first part: an action's output is posted at the instant its
// compute ends (the send span begins at the action span's end, to the
// trace's ns), before the accounting and the trace spans of the action, which
// would otherwise delay a consumer that waits for it.
TEST(Executor, PostsEachOutputTheMomentItsActionEnds) {
  const Schedule schedule = make_schedule("interleaved", {2, 4, 2, 0});
  std::mutex mu;
  std::vector<std::string> tracks;
  run_inproc(2, [&](Comm& comm) {
    SyntheticStages model(zero_time(schedule.virtual_stages() + 1),
                          {nullptr, layout_for(schedule, comm.rank())});
    ParamStore store;
    for (int chunk = 0; chunk < schedule.chunks; ++chunk) model.declare(store, chunk);
    store.finalize(1);
    model.bind(store);
    Tracer tracer(true);
    StageExecutor(schedule, comm, model, {.tracer = &tracer}).run();
    std::lock_guard<std::mutex> lock(mu);
    tracks.push_back(tracer.events_json(comm.rank()));
  });
  int sends = 0;
  for (const std::string& track : tracks) {
    std::map<std::string, double> ends;                  // action span name -> end (µs)
    std::vector<std::pair<std::string, double>> posted;  // its send's start
    std::istringstream lines(track);
    for (std::string line; std::getline(lines, line);) {
      auto field = [&](const char* key) {  // the value after "key":
        const size_t at = line.find(std::string("\"") + key + "\":");
        return at == std::string::npos ? std::string() : line.substr(at + std::strlen(key) + 3);
      };
      const std::string name_f = field("name"), cat_f = field("cat");
      if (line.find("\"ph\":\"X\"") == std::string::npos || name_f.empty()) continue;
      const std::string name = name_f.substr(1, name_f.find('"', 1) - 1);
      const std::string cat = cat_f.substr(1, cat_f.find('"', 1) - 1);
      const double ts = std::stod(field("ts")), dur = std::stod(field("dur"));
      if (cat == "send" && name.rfind("send ", 0) == 0)
        posted.emplace_back(name.substr(5), ts);
      else if (cat != "recv" && cat != "send")
        ends[name] = ts + dur;
    }
    for (const auto& [action, ts] : posted) {
      ASSERT_TRUE(ends.count(action)) << action;
      EXPECT_NEAR(ts, ends[action], 2e-3) << "the send of " << action << " was posted "
                                          << ts - ends[action] << " µs after the action ended";
      ++sends;
    }
  }
  EXPECT_EQ(sends, 2 * schedule.microbatches * (schedule.virtual_stages() - 1));
}

TEST(Executor, AStageThatNeverSendsIsATimeoutNamingTheTransfer) {
  const Schedule schedule = make_schedule("gpipe", {2, 2, 1, 0});
  try {
    run_inproc(2, [&](Comm& comm) {
      if (comm.rank() == 0) return;  // stage 0 never runs its list
      comm.set_timeout(0.2);
      SyntheticStages model(zero_time(3), {nullptr, layout_for(schedule, 1)});
      ParamStore store;
      model.declare(store, 0);
      store.finalize(1);
      model.bind(store);
      StageExecutor(schedule, comm, model).run();
    });
    FAIL() << "no error";
  } catch (const TimeoutError& e) {
    EXPECT_THAT(e.what(), HasSubstr("activation of micro-batch 0 from virtual stage 0"));
    EXPECT_THAT(e.what(), HasSubstr("forward of micro-batch 0"));
  }
}

TEST(Executor, RejectsAScheduleForAnotherGroupSize) {
  const Schedule schedule = make_schedule("1f1b", {4, 4, 1, 0});
  run_inproc(2, [&](Comm& comm) {
    SyntheticStages model(zero_time(3), {nullptr, layout_for(make_schedule("1f1b", {2, 2, 1, 0}), comm.rank())});
    try {
      StageExecutor(schedule, comm, model);
      ADD_FAILURE() << "no error";
    } catch (const ConfigError& e) {
      EXPECT_THAT(e.what(), HasSubstr("the schedule has 4 stages but the pipeline group has 2"));
    }
  });
}

TEST(Executor, RejectsAnInvalidSchedule) {
  Schedule broken = make_schedule("gpipe", {2, 2, 1, 0});
  std::swap(broken.actions[0][0], broken.actions[0][3]);  // a backward before its forward
  run_inproc(2, [&](Comm& comm) {
    SyntheticStages model(zero_time(3), {nullptr, layout_for(make_schedule("gpipe", {2, 2, 1, 0}), comm.rank())});
    EXPECT_THROW(StageExecutor(broken, comm, model), ConfigError);
  });
}

}  // namespace
}  // namespace psar::pp
