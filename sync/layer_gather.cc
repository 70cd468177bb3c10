#include "sync/layer_gather.h"

#include <algorithm>
#include <chrono>

#include "core/errors.h"
#include "core/ops.h"
#include "core/timer.h"
#include "sync/buckets.h"

namespace psar {

using psar::detail::concat;

namespace {
template <class T>
void free_vector(std::vector<T>& v) {
  std::vector<T>().swap(v);
}
}  // namespace

LayerGather::LayerGather(Comm& group, ParamStore& store, std::vector<Range> layers,
                         const std::vector<Range>& deferred, Optimizer& optimizer,
                         LayerGatherOptions options)
    : group_(group),
      store_(store),
      optimizer_(optimizer),
      options_(std::move(options)),
      shard_{store.size(), group.size()},
      whole_(make_sharded_collectives(options_.algorithm, options_.collectives)) {
  const int r = group_.rank();
  own_ = {shard_.offset(r), shard_.offset(r) + shard_.size(r)};
  std::sort(layers.begin(), layers.end());
  int64_t at = 0;
  for (const Range& range : layers) {
    PSAR_CHECK(range.first == at && range.second > range.first, "layer ranges do not tile the arena: [",
               range.first, ", ", range.second, ") after ", at);
    at = range.second;
    Slot s;
    s.range = range;
    s.deferred = std::any_of(deferred.begin(), deferred.end(), [&](const Range& d) {
      return d.first < range.second && range.first < d.second;
    });
    slots_.push_back(std::move(s));
  }
  PSAR_CHECK(at == store.size(), "layer ranges cover ", at, " of the arena's ", store.size(),
             " floats");
  // The reduce-scatters' buckets: stage 3 each layer, stage 2 the plan of
  // whole layers in backward order (a deferred layer one of its own).
  std::vector<Range> ranges;
  std::vector<BucketTensor> backward;
  for (auto s = slots_.rbegin(); s != slots_.rend(); ++s) {
    if (options_.params_sharded || s->deferred) ranges.push_back(s->range);
    else backward.push_back({{s->range.first, s->range.second}, false});
  }
  for (const ArenaRange& b : plan_buckets(backward, options_.bucket_floats, /*whole_tensors=*/true))
    ranges.emplace_back(b.begin, b.end);
  std::sort(ranges.begin(), ranges.end());
  for (const Range& range : ranges) {
    Bucket b;
    b.range = range;
    b.split = shard_.split_within(range.first, range.second);
    b.pair = collectives_for(range);
    for (Slot& s : slots_) {
      if (s.range.first < range.first || s.range.second > range.second) continue;
      s.bucket = buckets_.size();
      b.deferred = b.deferred || s.deferred;
      ++b.layers;
    }
    b.pending = b.layers;
    buckets_.push_back(std::move(b));
  }
  // Stage 3's buckets are its layers: a layer's gathers run on its bucket's
  // pair and owners' split.
  if (options_.params_sharded)
    for (const Slot& s : slots_)
      PSAR_CHECK(buckets_[s.bucket].range == s.range, "stage 3: layer [", s.range.first, ", ",
                 s.range.second, ") is not a bucket of its own");
  if (!options_.params_sharded) grad_shard_.resize(static_cast<size_t>(own_.second - own_.first));
  // The thread waits as the transport does (MPI: spinning, yielding the
  // core when the host is oversubscribed), not in sleeps between tests: a
  // ring hop goes on only when its rank is running again, and a woken
  // sleeper waits for a core behind the ranks that compute.
  if (options_.prefetch) thread_ = std::thread([this] { loop(); });
}

std::unique_ptr<ShardedCollectives> LayerGather::collectives_for(Range range) const {
  // A range inside few owners' pieces is a ring of few non-empty chunks: it
  // streams them in segments no larger than an even chunk of the range, so
  // that a chunk of one owner passes the ring in N pieces, not whole hop by
  // hop (docs/zero.md, "What a layer's collective costs in this layout").
  AllreduceOptions options = options_.collectives;
  const int64_t even = (range.second - range.first + group_.size() - 1) / group_.size();
  options.segment_bytes = std::min(options.segment_bytes, std::max<int64_t>(4, 4 * even));
  return make_sharded_collectives(options_.algorithm, options);
}

LayerGather::~LayerGather() {
  if (!thread_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

int64_t LayerGather::peak_bytes() const {
  std::lock_guard<std::mutex> lock(const_cast<std::mutex&>(mu_));
  return 4 * peak_;
}

void LayerGather::account(int64_t floats) {
  held_ += floats;
  peak_ = std::max(peak_, held_);
}

std::pair<size_t, size_t> LayerGather::layers_in(int64_t begin, int64_t end) const {
  const auto first = std::lower_bound(slots_.begin(), slots_.end(), begin,
                                      [](const Slot& s, int64_t at) { return s.range.first < at; });
  auto last = first;
  while (last != slots_.end() && last->range.second <= end) ++last;
  PSAR_CHECK(first != last && first->range.first == begin && (last - 1)->range.second == end,
             "arena floats [", begin, ", ", end, ") asked for are not whole layers");
  return {static_cast<size_t>(first - slots_.begin()), static_cast<size_t>(last - slots_.begin())};
}

void LayerGather::begin_step() {
  std::lock_guard<std::mutex> lock(mu_);
  if (error_) std::rethrow_exception(error_);
  peak_ = held_;
  stepped_ = 0;
  if (!options_.params_sharded) {
    if (store_.has_grad_arena()) store_.release_grads();
    return;
  }
  if (!store_.has_arenas()) return;
  const auto p = store_.params().subspan(static_cast<size_t>(own_.first),
                                         static_cast<size_t>(own_.second - own_.first));
  piece_.assign(p.begin(), p.end());
  store_.release_arenas();
}

template <class Pred>
void LayerGather::wait_for(std::unique_lock<std::mutex>& lock, const char* what, Pred pred) {
  const double deadline = now_seconds() + group_.timeout();
  while (!pred() && !error_) {
    if (now_seconds() >= deadline)
      throw TimeoutError(concat("rank ", group_.rank(), ": ", what, " within ", group_.timeout(),
                                " s (sync.zero: 3, ", queue_.size(), " collectives queued)"));
    cv_.wait_for(lock, std::chrono::milliseconds(10));
  }
  if (error_) std::rethrow_exception(error_);
}

void LayerGather::map(const Slot& s) {
  const std::vector<float>& grads = buckets_[s.bucket].grads;  // stage 3: the layer's own
  store_.map(s.range.first, s.range.second,
             s.state == State::kGathered ? const_cast<float*>(s.params.data()) : nullptr,
             grads.empty() ? nullptr : const_cast<float*>(grads.data()));
}

void LayerGather::gradient_buffer(Bucket& b) {  // zero-filled: the backward adds into it
  if (!b.grads.empty()) return;
  b.grads.resize(static_cast<size_t>(b.range.second - b.range.first));
  account(static_cast<int64_t>(b.grads.size()));
}

void LayerGather::queue_gather(size_t l, std::unique_lock<std::mutex>& lock) {
  Slot& s = slots_[l];
  s.params.resize(static_cast<size_t>(s.range.second - s.range.first));
  account(static_cast<int64_t>(s.params.size()));
  s.state = State::kQueued;
  submit({l, true}, lock);
}

void LayerGather::submit(Task task, std::unique_lock<std::mutex>& lock) {
  if (thread_.joinable()) {
    queue_.push_back(task);
    cv_.notify_all();
    return;
  }
  lock.unlock();
  run(task);
  lock.lock();
}

void LayerGather::acquire(size_t l, bool backward, int direction) {
  std::unique_lock<std::mutex> lock(mu_);
  Slot& s = slots_[l];
  if (s.state == State::kFree) queue_gather(l, lock);
  if (backward) gradient_buffer(buckets_[s.bucket]);
  // The layer read next, on its way while this one computes.
  const auto next = static_cast<int64_t>(l) + direction;
  if (options_.prefetch && next >= 0 && next < static_cast<int64_t>(slots_.size()) &&
      slots_[static_cast<size_t>(next)].state == State::kFree)
    queue_gather(static_cast<size_t>(next), lock);
  wait_for(lock, "a layer's parameters were not gathered", [&] { return s.state == State::kGathered; });
  ++s.users;
  map(s);
}

void LayerGather::need(int, int64_t begin, int64_t end) {
  // Stage 2's parameters are whole; stage 3's too during an evaluation.
  if (store_.has_arenas()) return;
  const auto [first, last] = layers_in(begin, end);
  for (size_t l = first; l < last; ++l) acquire(l, false, +1);
}

void LayerGather::need_backward(int, int64_t begin, int64_t end) {
  const auto [first, last] = layers_in(begin, end);
  if (!options_.params_sharded) {  // the bucket's zeroed buffer, kept over the micro-batches
    std::lock_guard<std::mutex> lock(mu_);
    if (error_) std::rethrow_exception(error_);
    for (size_t l = first; l < last; ++l) {
      Bucket& b = buckets_[slots_[l].bucket];
      if (!b.grads.empty()) continue;
      gradient_buffer(b);
      store_.map_grads(b.range.first, b.range.second, b.grads.data());
    }
    return;
  }
  if (store_.has_arenas()) return;
  for (size_t l = first; l < last; ++l) acquire(l, true, -1);
}

void LayerGather::release_params(Slot& s) {
  account(-static_cast<int64_t>(s.params.size()));
  free_vector(s.params);
  s.state = State::kFree;
  map(s);
}

void LayerGather::done(int, int64_t begin, int64_t end) {
  if (store_.has_arenas()) return;
  const auto [first, last] = layers_in(begin, end);
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t l = first; l < last; ++l) {
    Slot& s = slots_[l];
    PSAR_CHECK(s.users > 0, "layer [", s.range.first, ", ", s.range.second, ") done but not needed");
    if (--s.users == 0) release_params(s);
  }
}

void LayerGather::ready(int, int64_t begin, int64_t end) {
  if (options_.params_sharded && store_.has_arenas()) return;
  const auto [first, last] = layers_in(begin, end);
  std::unique_lock<std::mutex> lock(mu_);
  for (size_t l = first; l < last; ++l) {
    const Slot& s = slots_[l];
    Bucket& b = buckets_[s.bucket];
    PSAR_CHECK(!b.grads.empty() && b.pending > 0, "layer [", s.range.first, ", ", s.range.second,
               ") reported final without a gradient buffer (no need_backward), or twice");
    if (--b.pending > 0 || b.deferred) continue;  // deferred: summed over its tied pair first
    b.pending = b.layers;
    submit({s.bucket, false}, lock);
  }
}

void LayerGather::run(Task task) {
  if (task.gather) gather(slots_[task.index]);
  else reduce(buckets_[task.index]);
}

void LayerGather::gather(Slot& s) {
  // The owned part from the piece, the rest from its owners.
  const int64_t lo = std::max(own_.first, s.range.first), hi = std::min(own_.second, s.range.second);
  if (hi > lo)
    std::copy(piece_.begin() + (lo - own_.first), piece_.begin() + (hi - own_.first),
              s.params.begin() + (lo - s.range.first));
  const Bucket& b = buckets_[s.bucket];
  b.pair->all_gather(group_, s.params, b.split);
  std::lock_guard<std::mutex> lock(mu_);
  s.state = State::kGathered;
  cv_.notify_all();
}

void LayerGather::reduce(Bucket& b) {
  // No one writes the gradient buffer after its last ready(); map() still
  // points the store at it until it is freed below (no one reads it either).
  b.pair->reduce_scatter(group_, b.grads, b.split);
  const int64_t lo = std::max(own_.first, b.range.first), hi = std::min(own_.second, b.range.second);
  if (hi > lo && !options_.params_sharded) {  // stage 2: kept for the step after the backward
    std::copy(b.grads.begin() + (lo - b.range.first), b.grads.begin() + (hi - b.range.first),
              grad_shard_.begin() + (lo - own_.first));
  } else if (hi > lo) {
    float* g = b.grads.data() + (lo - b.range.first);
    const auto n = static_cast<size_t>(hi - lo);
    if (group_.size() > 1) ops::scale(g, 1.0f / static_cast<float>(group_.size()), hi - lo);
    optimizer_.step_slice(lo - own_.first,
                          std::span<float>(piece_).subspan(static_cast<size_t>(lo - own_.first), n),
                          std::span<const float>(g, n));
  }
  std::lock_guard<std::mutex> lock(mu_);
  stepped_ += std::max<int64_t>(0, hi - lo);
  account(-static_cast<int64_t>(b.grads.size()));
  // (Each bucket's own entries of the store's table: the main thread maps others meanwhile.)
  if (!options_.params_sharded) store_.map_grads(b.range.first, b.range.second, nullptr);
  free_vector(b.grads);
  cv_.notify_all();
}

void LayerGather::loop() {
  const TimerSlack slack;
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (stop_) return;
    const Task task = queue_.front();
    queue_.pop_front();
    ++running_;
    lock.unlock();
    try {
      run(task);
    } catch (...) {
      lock.lock();
      error_ = std::current_exception();
      --running_;
      cv_.notify_all();
      return;
    }
    lock.lock();
    --running_;
    cv_.notify_all();
  }
}

int64_t LayerGather::finish_step() {
  std::unique_lock<std::mutex> lock(mu_);
  wait_for(lock, "the layers' reduce-scatters did not finish",
           [&] { return queue_.empty() && running_ == 0; });
  for (Slot& s : slots_) {
    // A prefetch the step did not use (the first layer's backward reads no
    // layer below it).
    if (s.users == 0 && s.state != State::kFree && !s.deferred) release_params(s);
    const Bucket& b = buckets_[s.bucket];
    PSAR_CHECK(s.users == 0 && (b.deferred || b.grads.empty()), "layer [", s.range.first, ", ",
               s.range.second, ") still ", s.users, " times in use, or its gradient never reported final");
  }
  for (Bucket& b : buckets_) {
    if (!b.deferred || b.grads.empty()) continue;
    lock.unlock();
    reduce(b);
    lock.lock();
    b.pending = b.layers;
  }
  for (Slot& s : slots_) {
    if (!s.deferred) continue;
    // Gathered for the tied copies (end_tied takes them back).
    if (!options_.params_sharded) continue;
    if (s.state == State::kFree) {
      s.params.resize(static_cast<size_t>(s.range.second - s.range.first));
      account(static_cast<int64_t>(s.params.size()));
      lock.unlock();
      gather(s);
      lock.lock();
    }
    map(s);
  }
  return stepped_;
}

void LayerGather::end_tied() {
  std::lock_guard<std::mutex> lock(mu_);
  for (Slot& s : slots_) {
    if (!s.deferred || s.state != State::kGathered) continue;
    const int64_t lo = std::max(own_.first, s.range.first), hi = std::min(own_.second, s.range.second);
    if (hi > lo)
      std::copy(s.params.begin() + (lo - s.range.first), s.params.begin() + (hi - s.range.first),
                piece_.begin() + (lo - own_.first));
    release_params(s);
  }
}

void LayerGather::gather_all() {
  if (store_.has_arenas()) return;
  std::vector<float> whole(static_cast<size_t>(store_.size()));
  std::copy(piece_.begin(), piece_.end(), whole.begin() + own_.first);
  whole_->all_gather(group_, whole);
  store_.restore_arenas(whole);
}

}  // namespace psar
