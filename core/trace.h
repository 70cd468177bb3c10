#pragma once
// Chrome/Perfetto trace events ("Trace Event Format", complete events "X"):
// one track per rank (pid = rank), spans for forward, backward, weight
// gradient, send, receive, sync. Open trace.json in ui.perfetto.dev or
// chrome://tracing, or draw it with experiments/plot.py --timeline.
// Recording is a vector push; nothing is written until the run ends.

#include <cstdint>
#include <string>
#include <vector>

#include "core/timer.h"

namespace psar {

class Tracer {
 public:
  explicit Tracer(bool enabled = false) : enabled_(enabled), origin_(now_seconds()) {}
  bool enabled() const { return enabled_; }
  // All ranks of one host share the monotonic clock: a common origin lines
  // their tracks up (set it to the same instant everywhere, e.g. after a barrier).
  void set_origin(double t) { origin_ = t; }

  // A span on track `tid` of this rank; `category` colours it
  // (forward, backward, backward_input, backward_weight, send, recv, sync, optimizer).
  void span(const char* name, const char* category, double start, double end, int tid = 0,
            const std::string& args_json = "");

  // RAII span from construction to destruction.
  class Scope {
   public:
    Scope(Tracer& t, const char* name, const char* category, int tid = 0)
        : t_(t), name_(name), cat_(category), tid_(tid), start_(t.enabled() ? now_seconds() : 0) {}
    ~Scope() {
      if (t_.enabled()) t_.span(name_, cat_, start_, now_seconds(), tid_);
    }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    Tracer& t_;
    const char* name_;
    const char* cat_;
    int tid_;
    double start_;
  };

  // This rank's events as comma-separated JSON objects (pid = rank), plus a
  // process-name record so the track reads "rank N".
  std::string events_json(int rank) const;
  // Wraps several ranks' events_json() into one trace document.
  static std::string document(const std::vector<std::string>& parts);
  size_t size() const { return events_.size(); }

 private:
  struct Event {
    std::string name;
    const char* category;
    double start, end;
    int tid;
    std::string args;
  };
  bool enabled_;
  double origin_;
  std::vector<Event> events_;
};

}  // namespace psar
