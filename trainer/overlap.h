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
#include "trainer/buckets.h"
#include "trainer/gradient_sync.h"

namespace psar {

struct OverlapOptions {
  bool front_first = false;  // sync.priority
  int64_t chunk_floats = 0;  // front_first's unit
};

// A span of the communication thread, on the host clock.
struct CommSpan {
  ArenaRange range;
  double start = 0, end = 0;
};

class OverlapSync final : public pp::GradientSink {
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
  // Blocks until every unit went through the backend; the thread's error
  // if it failed. Returns the spans the thread spent in the backend.
  std::vector<CommSpan> wait();

  const std::vector<ArenaRange>& units() const { return units_; }

 private:
  void loop();
  void run_step(std::unique_lock<std::mutex>& lock);
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
  std::vector<int64_t> missing_;  // floats still to be final, per unit
  std::vector<char> sent_;
  size_t done_ = 0;
  uint64_t round_ = 0, finished_round_ = 0;
  bool stop_ = false;
  std::exception_ptr error_;
  std::vector<CommSpan> spans_;
  std::thread thread_;
};

}  // namespace psar
