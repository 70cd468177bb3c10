#include "trainer/overlap.h"

#include <algorithm>
#include <chrono>
#include <numeric>

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
  PSAR_CHECK(finished_round_ == round_, "an overlapped step begins before the last one ended");
  for (size_t k = 0; k < units_.size(); ++k) {
    missing_[k] = units_[k].size();
    sent_[k] = 0;
  }
  done_ = 0;
  spans_.clear();
  ++round_;
  cv_.notify_all();
}

void OverlapSync::ready(int, int64_t begin, int64_t end) {
  std::lock_guard<std::mutex> lock(mu_);
  // The units overlapping [begin, end): from the last one starting before `end`.
  auto it = std::upper_bound(by_begin_.begin(), by_begin_.end(), end,
                             [&](int64_t x, size_t k) { return x < units_[k].begin; });
  bool launched = false;
  while (it != by_begin_.begin()) {
    const size_t k = *--it;
    const ArenaRange& u = units_[k];
    if (u.end <= begin) break;
    missing_[k] -= std::min(end, u.end) - std::max(begin, u.begin);
    PSAR_CHECK(missing_[k] >= 0, "gradient floats [", begin, ", ", end,
               ") reported final twice in one step");
    launched |= missing_[k] == 0;
  }
  if (launched) cv_.notify_all();
}

std::vector<CommSpan> OverlapSync::wait() {
  std::unique_lock<std::mutex> lock(mu_);
  const double deadline = now_seconds() + group_.timeout();
  while (finished_round_ != round_ && !error_) {
    if (now_seconds() >= deadline) {
      size_t missing = 0;
      for (int64_t m : missing_) missing += m > 0;
      throw TimeoutError(concat("rank ", group_.rank(), ": the overlapped gradient sync did not ",
                                "finish within ", group_.timeout(), " s (", done_, " of ",
                                units_.size(), " buckets synced, ", missing,
                                " never reported final)"));
    }
    cv_.wait_for(lock, std::chrono::milliseconds(10));
  }
  if (error_) std::rethrow_exception(error_);
  return spans_;
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
      run_step(lock);
    } catch (...) {
      error_ = std::current_exception();
    }
    finished_round_ = served;
    cv_.notify_all();
    if (error_) return;
  }
}

void OverlapSync::sync_unit(size_t k, std::unique_lock<std::mutex>& lock) {
  const ArenaRange u = units_[k];
  sent_[k] = 1;
  lock.unlock();
  const double t0 = now_seconds();
  const auto n = static_cast<size_t>(u.size());
  sync_.sync_range(u.begin, store_.params().subspan(static_cast<size_t>(u.begin), n),
                   store_.grads().subspan(static_cast<size_t>(u.begin), n));
  const double t1 = now_seconds();
  lock.lock();
  spans_.push_back({u, t0, t1});
  ++done_;
}

void OverlapSync::run_step(std::unique_lock<std::mutex>& lock) {
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
