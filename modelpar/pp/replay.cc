#include "modelpar/pp/replay.h"

#include <algorithm>

#include "core/errors.h"
#include "modelpar/pp/p2p.h"

namespace psar::pp::detail {

namespace {

constexpr double kNotYet = -1;

// End times of the actions that ran, by (micro-batch, virtual stage).
class Done {
 public:
  Done(int microbatches, int vstages)
      : vstages_(vstages),
        forward_(static_cast<size_t>(microbatches) * vstages, kNotYet),
        input_grad_(forward_.size(), kNotYet) {}
  // F: the activation for the next virtual stage exists.
  double& forward(int microbatch, int vstage) { return forward_[index(microbatch, vstage)]; }
  // Fused B or split B: the gradient for the previous virtual stage exists.
  double& input_grad(int microbatch, int vstage) { return input_grad_[index(microbatch, vstage)]; }
  double& of(const Transfer& t) {
    return t.payload == Payload::kActivation ? forward(t.microbatch, t.from_vstage)
                                             : input_grad(t.microbatch, t.from_vstage);
  }

 private:
  size_t index(int microbatch, int vstage) const {
    return static_cast<size_t>(microbatch) * vstages_ + vstage;
  }
  int vstages_;
  std::vector<double> forward_, input_grad_;
};

}  // namespace

Replay replay(const Schedule& s, const DurationFn& duration, double latency) {
  return replay(s, duration, [latency](const Transfer&) { return latency; });
}

Replay replay(const Schedule& s, const DurationFn& duration, const LatencyFn& latency) {
  return replay(s, duration, [&latency](const Transfer& t) {
    return TransferTime{latency(t), 0.0};
  });
}

Replay replay(const Schedule& s, const DurationFn& duration, const TransferTimeFn& transfer) {
  const int p = s.stages;
  Done done(s.microbatches, s.virtual_stages());
  std::vector<size_t> next(static_cast<size_t>(p), 0);
  std::vector<double> free_at(static_cast<size_t>(p), 0.0);
  Replay out;
  out.spans.resize(static_cast<size_t>(p));

  // When `a` on `stage` may start, or nullopt if it must wait (and, when
  // `waits_for` is given, what for: built only for the error message).
  const auto ready_at = [&](int stage, const Action& a, std::string* waits_for) {
    const auto wait = [&](const auto& what) {
      if (waits_for) *waits_for = what();
      return std::optional<double>();
    };
    const int u = s.virtual_stage(stage, a.chunk);
    double ready = 0;
    if (a.op == Op::kBackward || a.op == Op::kBackwardInput) {
      const double f = done.forward(a.microbatch, u);
      if (f == kNotYet) return wait([] { return "its own forward"; });
      ready = f;
    }
    if (a.op == Op::kBackwardWeight) {
      const double b = done.input_grad(a.microbatch, u);
      if (b == kNotYet) return wait([] { return "its own backward-input"; });
      ready = b;
    }
    if (const auto in = input_of(s, stage, a)) {
      const double produced = done.of(*in);
      if (produced == kNotYet) return wait([&] { return "the " + describe(*in); });
      ready = std::max(ready, produced + (in->local() ? 0.0 : transfer(*in).arrival));
    }
    return std::optional<double>(ready);
  };

  for (bool progress = true; progress;) {
    progress = false;
    for (int stage = 0; stage < p; ++stage) {
      const auto& actions = s.actions[static_cast<size_t>(stage)];
      auto& i = next[static_cast<size_t>(stage)];
      for (; i < actions.size(); ++i) {
        const Action& a = actions[i];
        const auto ready = ready_at(stage, a, nullptr);
        if (!ready) break;
        const double start = std::max(free_at[static_cast<size_t>(stage)], *ready);
        const double end = start + duration(stage, a);
        const auto out_t = output_of(s, stage, a);
        free_at[static_cast<size_t>(stage)] =
            end + (out_t && !out_t->local() ? transfer(*out_t).sender_busy : 0.0);
        out.spans[static_cast<size_t>(stage)].push_back({a, start, end});
        const int u = s.virtual_stage(stage, a.chunk);
        if (a.op == Op::kForward) done.forward(a.microbatch, u) = end;
        if (a.op == Op::kBackward || a.op == Op::kBackwardInput)
          done.input_grad(a.microbatch, u) = end;
        progress = true;
      }
    }
  }

  for (int stage = 0; stage < p; ++stage) {
    const auto& actions = s.actions[static_cast<size_t>(stage)];
    const size_t i = next[static_cast<size_t>(stage)];
    if (i == actions.size()) continue;
    std::string waits_for;
    PSAR_CHECK(!ready_at(stage, actions[i], &waits_for), "replay stopped at a runnable action");
    out.blocked.push_back(describe(stage, i, actions[i]) + " is blocked waiting for " + waits_for);
  }
  return out;
}

}  // namespace psar::pp::detail
