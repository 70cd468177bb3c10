#pragma once
// Overlapping the gradient sync with the backward (PyTorch DDP's buckets,
// Horovod's negotiation, ByteScheduler's priorities): docs/overlap.md.
//
// The executor reports each layer's gradients as final during a chunk's last
// weight-gradient action of the batch (pp::GradientSink); a bucket (buckets.h)
// whose floats are all final is launched, and a communication thread of this
// rank hands launched buckets to the backend (GradientSync::sync_range) while
// the backward continues. wait() blocks the step until every bucket is done.
//
// Every rank of the data-parallel group must hand the backend the same
// ranges in the same order:
//   fifo         the buckets in plan order (the order the backward finishes
//                them), each as soon as it is launched here;
//   front_first  the buckets cut into chunks (sync.priority_chunk_bytes); before
//                each chunk the ranks agree on which chunks are launched on
//                every rank (a sum of ready flags over the group) and send the
//                one nearest the front of the model, so the first layers'
//                gradients — which the next forward needs first — overtake
//                a large bucket of the last layers between its chunks.
// Errors on the communication thread are rethrown by wait(); every wait has
// the group's deadline.
//
// Layer-wise start (front_first with a backend that supports it: the
// parameter server): wait() returns once every unit was handed to the
// backend; the thread then completes the step (GradientSync::complete) while
// the main thread starts the next forward, whose every layer waits in need()
// for its own parameters to land, and wait_pulls() — before an evaluation, a
// checkpoint and the end of training — for all of them.

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "allreduce/allreducer.h"
#include "comm/comm.h"
#include "core/param_store.h"
#include "modelpar/pp/stage_model.h"
#include "sync/buckets.h"
#include "sync/gradient_sync.h"

namespace psar {

struct OverlapOptions {
  bool front_first = false;  // sync.priority
  int64_t chunk_floats = 0;  // front_first's unit
};

// A span of the communication thread, on the host clock: its time in the
// backend (a unit's sync_range, or complete()), or — `pull` — a unit's
// parameters in flight under the layer-wise start, from its push to the
// landing of its last float (for the trace; the thread does not wait on it).
struct CommSpan {
  ArenaRange range;
  double start = 0, end = 0;
  const char* name = "bucket";
  bool pull = false;
};

class OverlapSync final : public pp::GradientSink, public pp::ParamGate {
 public:
  // buckets: plan_buckets() of this rank's arena; group: the data-parallel
  // communicator the backend syncs over (front_first negotiates on it).
  OverlapSync(GradientSync& sync, ParamStore& store, std::vector<ArenaRange> buckets, Comm& group,
              OverlapOptions options);
  ~OverlapSync() override;  // stops the thread; never throws
  OverlapSync(const OverlapSync&) = delete;
  OverlapSync& operator=(const OverlapSync&) = delete;

  // Before the step's backward: every unit waits for its floats again.
  void begin_step();
  // pp::GradientSink, main thread: arena floats [begin, end) are final.
  void ready(int chunk, int64_t begin, int64_t end) override;
  // Blocks until every unit went through the backend (layer-wise: was handed
  // to it); the thread's error if it failed. Returns the thread's spans
  // since the last call.
  std::vector<CommSpan> wait();
  // pp::ParamGate, main thread: layer-wise, blocks until arena floats
  // [begin, end) hold the parameters of the last step's pull (deadline: the
  // backend's); at once otherwise.
  void need(int chunk, int64_t begin, int64_t end) override;
  // Layer-wise: blocks until the step is complete, every parameter pulled;
  // returns the thread's spans since wait(). At once otherwise.
  std::vector<CommSpan> wait_pulls();
  bool layerwise() const { return pull_timeout_s_ > 0; }

  const std::vector<ArenaRange>& units() const { return units_; }

 private:
  void loop();
  void run_step(uint64_t round, std::unique_lock<std::mutex>& lock);
  void send_units(std::unique_lock<std::mutex>& lock);
  // Communication thread (the backend's `landed`): arena floats [begin, end) pulled.
  void landed(int64_t begin, int64_t end);
  // Calls f(k) for every unit overlapping arena floats [begin, end).
  template <class F>
  void for_units(int64_t begin, int64_t end, F f) const;
  // Blocks until pred() (under mu_), or throws the thread's error or a
  // TimeoutError naming `what` after `timeout_s`.
  template <class Pred>
  void block(std::unique_lock<std::mutex>& lock, double timeout_s, const char* what, Pred pred);
  void sync_unit(size_t k, std::unique_lock<std::mutex>& lock);
  // front_first: the unit every rank has launched and none sent, nearest the
  // front; -1 for none. Collective over the group.
  int agree_on_next(std::unique_lock<std::mutex>& lock);

  GradientSync& sync_;
  ParamStore& store_;
  Comm& group_;
  OverlapOptions options_;
  std::vector<ArenaRange> units_;  // buckets (fifo) or chunks (front_first), launch order
  std::vector<size_t> by_begin_;   // unit indices sorted by range.begin
  std::unique_ptr<Allreducer> flags_;  // front_first's agreement

  std::mutex mu_;
  std::condition_variable cv_;
  double pull_timeout_s_ = 0;  // > 0: layer-wise start, waits for pulls this long
  std::vector<int64_t> missing_;  // floats still to be final, per unit
  std::vector<char> sent_;
  std::vector<int64_t> unpulled_;  // layer-wise: floats not yet pulled, per unit
  std::vector<double> pushed_at_;  // layer-wise: when each unit went to the backend
  size_t done_ = 0;
  // round_: steps begun; handed_round_: the last whose units all went to the
  // backend; finished_round_: the last the thread completed.
  uint64_t round_ = 0, handed_round_ = 0, finished_round_ = 0;
  bool stop_ = false;
  std::exception_ptr error_;
  std::vector<CommSpan> spans_;
  std::thread thread_;
};

}  // namespace psar
