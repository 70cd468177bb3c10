#include "sync/overlap.h"

#include <algorithm>
#include <chrono>
#include <numeric>
#include <utility>

#include "core/errors.h"
#include "core/timer.h"

namespace psar {

using psar::detail::concat;

namespace {
constexpr double kPollSleep = 20e-6;
}  // namespace

OverlapSync::OverlapSync(GradientSync& sync, ParamStore& store, std::vector<ArenaRange> buckets,
                         Comm& group, OverlapOptions options)
    : sync_(sync), store_(store), group_(group), options_(options) {
  units_ = options_.front_first ? cut_chunks(buckets, options_.chunk_floats) : std::move(buckets);
  by_begin_.resize(units_.size());
  std::iota(by_begin_.begin(), by_begin_.end(), size_t{0});
  std::sort(by_begin_.begin(), by_begin_.end(),
            [&](size_t a, size_t b) { return units_[a].begin < units_[b].begin; });
  if (options_.front_first && group_.size() > 1) flags_ = make_allreducer("ring");
  // The thread shares the cores with the backward: its waits sleep rather
  // than spin (comm.h, poll_sleep).
  group_.set_poll_sleep(kPollSleep);
  missing_.assign(units_.size(), 0);
  sent_.assign(units_.size(), 1);
  unpulled_.assign(units_.size(), 0);
  pushed_at_.assign(units_.size(), 0.0);
  // front_first sends the front of the model first; with a backend that can
  // (the parameter server) the next forward also starts on the front layers
  // as soon as their parameters are back.
  if (options_.front_first)
    pull_timeout_s_ = sync_.start_layerwise([this](int64_t b, int64_t e) { landed(b, e); });
  thread_ = std::thread([this] { loop(); });
}

OverlapSync::~OverlapSync() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void OverlapSync::begin_step() {
  std::lock_guard<std::mutex> lock(mu_);
  if (error_) std::rethrow_exception(error_);
  // Layer-wise, the thread may still be completing the last step: it takes
  // up this one after that, and touches none of what is reset here meanwhile.
  PSAR_CHECK(handed_round_ == round_, "an overlapped step begins before the last one ended");
  for (size_t k = 0; k < units_.size(); ++k) {
    missing_[k] = units_[k].size();
    sent_[k] = 0;
  }
  done_ = 0;
  ++round_;
  cv_.notify_all();
}

template <class F>
void OverlapSync::for_units(int64_t begin, int64_t end, F f) const {
  // From the last unit starting before `end` down to the first ending after `begin`.
  auto it = std::upper_bound(by_begin_.begin(), by_begin_.end(), end,
                             [&](int64_t x, size_t k) { return x < units_[k].begin; });
  while (it != by_begin_.begin()) {
    const size_t k = *--it;
    if (units_[k].end <= begin) break;
    f(k);
  }
}

template <class Pred>
void OverlapSync::block(std::unique_lock<std::mutex>& lock, double timeout_s, const char* what,
                        Pred pred) {
  const double deadline = now_seconds() + timeout_s;
  while (!pred() && !error_) {
    if (now_seconds() >= deadline) {
      size_t missing = 0, unpulled = 0;
      for (int64_t m : missing_) missing += m > 0;
      for (int64_t m : unpulled_) unpulled += m > 0;
      throw TimeoutError(concat("rank ", group_.rank(), ": ", what, " within ", timeout_s,
                                " s (", done_, " of ", units_.size(), " buckets synced, ", missing,
                                " never reported final, ", unpulled, " not pulled)"));
    }
    cv_.wait_for(lock, std::chrono::milliseconds(10));
  }
  if (error_) std::rethrow_exception(error_);
}

void OverlapSync::ready(int, int64_t begin, int64_t end) {
  std::lock_guard<std::mutex> lock(mu_);
  bool launched = false;
  for_units(begin, end, [&](size_t k) {
    const ArenaRange& u = units_[k];
    missing_[k] -= std::min(end, u.end) - std::max(begin, u.begin);
    PSAR_CHECK(missing_[k] >= 0, "gradient floats [", begin, ", ", end,
               ") reported final twice in one step");
    launched |= missing_[k] == 0;
  });
  if (launched) cv_.notify_all();
}

void OverlapSync::landed(int64_t begin, int64_t end) {
  std::lock_guard<std::mutex> lock(mu_);
  bool whole = false;
  for_units(begin, end, [&](size_t k) {
    const ArenaRange& u = units_[k];
    unpulled_[k] -= std::min(end, u.end) - std::max(begin, u.begin);
    PSAR_CHECK(unpulled_[k] >= 0, "parameters [", begin, ", ", end, ") pulled twice in one step");
    if (unpulled_[k] == 0) {
      spans_.push_back({u, pushed_at_[k], now_seconds(), "pull", true});
      whole = true;
    }
  });
  if (whole) cv_.notify_all();
}

std::vector<CommSpan> OverlapSync::wait() {
  std::unique_lock<std::mutex> lock(mu_);
  block(lock, group_.timeout(), "the overlapped gradient sync did not finish",
        [&] { return handed_round_ == round_; });
  return std::exchange(spans_, {});
}

void OverlapSync::need(int, int64_t begin, int64_t end) {
  if (!layerwise()) return;
  std::unique_lock<std::mutex> lock(mu_);
  // The units of the last step all went to the backend before this forward
  // (wait()); those of this step go only once its backward reports them.
  block(lock, pull_timeout_s_, "the parameters of a layer were not pulled", [&] {
    bool pulled = true;
    for_units(begin, end, [&](size_t k) { pulled &= unpulled_[k] == 0; });
    return pulled;
  });
}

std::vector<CommSpan> OverlapSync::wait_pulls() {
  if (!layerwise()) return {};
  std::unique_lock<std::mutex> lock(mu_);
  block(lock, pull_timeout_s_ + group_.timeout(), "the overlapped step was not completed",
        [&] { return finished_round_ == round_; });
  return std::exchange(spans_, {});
}

void OverlapSync::loop() {
  // Its sleeps of tens of µs wake within a µs, not Linux's default 50 µs slack.
  const TimerSlack slack;
  std::unique_lock<std::mutex> lock(mu_);
  uint64_t served = 0;
  while (true) {
    cv_.wait(lock, [&] { return stop_ || round_ != served; });
    if (stop_) return;
    served = round_;
    try {
      run_step(served, lock);
    } catch (...) {
      error_ = std::current_exception();
    }
    handed_round_ = finished_round_ = served;
    cv_.notify_all();
    if (error_) return;
  }
}

void OverlapSync::sync_unit(size_t k, std::unique_lock<std::mutex>& lock) {
  const ArenaRange u = units_[k];
  sent_[k] = 1;
  const double t0 = now_seconds();
  if (layerwise()) {
    // Every landing of the last step came before complete() returned, and
    // every forward that waited on it before this step's backward.
    unpulled_[k] = u.size();
    pushed_at_[k] = t0;
  }
  lock.unlock();
  const auto n = static_cast<size_t>(u.size());
  sync_.sync_range(u.begin, store_.params().subspan(static_cast<size_t>(u.begin), n),
                   store_.grads().subspan(static_cast<size_t>(u.begin), n));
  const double t1 = now_seconds();
  lock.lock();
  spans_.push_back({u, t0, t1});
  ++done_;
}

void OverlapSync::run_step(uint64_t round, std::unique_lock<std::mutex>& lock) {
  send_units(lock);
  if (!layerwise()) return;
  // Every unit went to the backend: the step goes on without us while the
  // replies land (landed()), and complete() waits for the rest of them.
  handed_round_ = round;
  cv_.notify_all();
  lock.unlock();
  const double t0 = now_seconds();
  sync_.complete();
  const double t1 = now_seconds();
  lock.lock();
  for (size_t k = 0; k < units_.size(); ++k)
    PSAR_CHECK(unpulled_[k] == 0, "step completed with parameters [", units_[k].begin, ", ",
               units_[k].end, ") not pulled");
  spans_.push_back({{0, 0}, t0, t1, "complete"});
}

void OverlapSync::send_units(std::unique_lock<std::mutex>& lock) {
  // Every wait for a launch has the group's deadline, as every other wait.
  auto launched = [&](auto pred) {
    const double deadline = now_seconds() + group_.timeout();
    while (!pred()) {
      if (stop_) throw Error("overlapped gradient sync stopped");
      if (now_seconds() >= deadline)
        throw TimeoutError(concat("rank ", group_.rank(), ": a gradient bucket was not reported ",
                                  "final within ", group_.timeout(), " s"));
      cv_.wait_for(lock, std::chrono::milliseconds(10));
    }
  };
  if (layerwise()) {
    // The PS's pushes need no common order over the workers (each chunk's
    // reply waits at its server for every worker's push, whatever came
    // first): each rank hands over, one at a time, its final unit nearest
    // the front of the model, once the previous one has left its NIC — so
    // a front unit final later overtakes the rest of a large back bucket,
    // without a negotiation per unit (ByteScheduler's priorities).
    while (done_ < units_.size()) {
      size_t k = units_.size();
      launched([&] {
        for (size_t j : by_begin_) {
          if (!sent_[j] && missing_[j] == 0) {
            k = j;
            return true;
          }
        }
        return false;
      });
      sync_unit(k, lock);
      lock.unlock();
      sync_.wait_sent();
      lock.lock();
    }
    return;
  }
  if (!options_.front_first || group_.size() == 1) {
    for (size_t k = 0; k < units_.size(); ++k) {
      launched([&] { return missing_[k] == 0; });
      sync_unit(k, lock);
    }
    return;
  }
  while (done_ < units_.size()) {
    const int k = agree_on_next(lock);
    if (k >= 0) {
      sync_unit(static_cast<size_t>(k), lock);
      continue;
    }
    // Nothing ready everywhere: wait a little for this rank's next launch.
    size_t ready_here = 0;
    for (size_t j = 0; j < units_.size(); ++j) ready_here += !sent_[j] && missing_[j] == 0;
    cv_.wait_for(lock, std::chrono::microseconds(200), [&] {
      size_t now = 0;
      for (size_t j = 0; j < units_.size(); ++j) now += !sent_[j] && missing_[j] == 0;
      return stop_ || now > ready_here;
    });
    if (stop_) throw Error("overlapped gradient sync stopped");
  }
}

int OverlapSync::agree_on_next(std::unique_lock<std::mutex>& lock) {
  std::vector<float> flags(units_.size());
  for (size_t j = 0; j < units_.size(); ++j) flags[j] = !sent_[j] && missing_[j] == 0 ? 1.0f : 0.0f;
  lock.unlock();
  flags_->allreduce(group_, flags);  // small counts of ranks: exact in float
  lock.lock();
  const auto everywhere = static_cast<float>(group_.size());
  for (size_t k : by_begin_)  // nearest the front of the model first
    if (flags[k] == everywhere) return static_cast<int>(k);
  return -1;
}

}  // namespace psar
