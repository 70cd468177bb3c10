#pragma once
// Monotonic time. All ranks on one host share this clock, which the network
// emulator relies on.

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

}  // namespace psar
