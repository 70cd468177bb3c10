#pragma once
// Monotonic time. All ranks on one host share this clock, which the network
// emulator relies on.

#include <sys/prctl.h>

#include <chrono>

namespace psar {

inline double now_seconds() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

class Stopwatch {
 public:
  Stopwatch() : start_(now_seconds()) {}
  void reset() { start_ = now_seconds(); }
  double seconds() const { return now_seconds() - start_; }

 private:
  double start_;
};

// Adds the lifetime of the scope to an accumulator: `{ ScopedTimer t(sync_s); ... }`.
class ScopedTimer {
 public:
  explicit ScopedTimer(double& acc) : acc_(acc), start_(now_seconds()) {}
  ~ScopedTimer() { acc_ += now_seconds() - start_; }

 private:
  double& acc_;
  double start_;
};

// Linux lets a sleeping thread wake up to 50 µs late by default ("timer
// slack"). A thread that polls in sleeps of tens of µs holds one of these
// for as long as it does: its wake-ups then come within 1 µs; the old slack
// is restored at the end of the scope.
class TimerSlack {
 public:
  TimerSlack() : saved_(prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0)) {
    if (saved_ > 0) prctl(PR_SET_TIMERSLACK, kSlackNs, 0, 0, 0);
  }
  ~TimerSlack() {
    if (saved_ > 0) prctl(PR_SET_TIMERSLACK, saved_, 0, 0, 0);
  }
  TimerSlack(const TimerSlack&) = delete;
  TimerSlack& operator=(const TimerSlack&) = delete;

 private:
  static constexpr unsigned long kSlackNs = 1000;
  long saved_;
};

}  // namespace psar
