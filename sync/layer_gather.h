#pragma once
// LayerGather: ZeRO stages 2 and 3 layer by layer (docs/zero.md). It is the
// model's ParamGate and GradientSink (modelpar/pp/stage_model.h); the model
// names its layers' arena ranges (Model::layer_ranges) and asks for each
// around its use.
//
// Layout: the flat arena of Ψ floats cut by Partition{Ψ, N} as in stage 1
// — rank r owns piece r, whatever the layers — so a layer's collectives
// are split at the owners' boundaries inside it (ProgramShape::split) and
// the optimizer state and checkpoints are stage 1's. A layer inside one
// owner's piece is then one chunk: its ring passes it in segments of an
// even chunk of the layer (collectives_for), so that it streams.
//
// Stage 3 (FSDP's FULL_SHARD, `params_sharded`): the parameters themselves
// sharded. Between steps a rank holds its piece of the parameters and of
// the optimizer state only; the store's arenas are released
// (ParamStore::release_arenas) and every parameter unmapped.
//
//   need(l)            forward: the layer's buffer allocated, its parameters
//                      all-gathered into it, mapped into the store
//   need_backward(l)   the same before its backward, and a zeroed gradient
//                      buffer mapped beside (kept over the micro-batches)
//   done(l)            the parameter buffer freed (its last reader of the
//                      forward or the backward is through)
//   ready(l)           the gradient final: reduce-scattered over the same
//                      split, the owned part divided by N and stepped at
//                      once (Optimizer::step_slice), the buffer freed
//
// Stage 2 (gradients sharded): the parameters stay whole in the store's
// arena and only its gradient arena is released (ParamStore::release_grads).
// Its reduce-scatters go by buckets of whole layers (DeepSpeed's
// reduce_bucket_size): sync/buckets.h's plan of the layers in backward
// order at `bucket_floats` (sync.bucket_bytes / 4), a layer larger than it
// a bucket of its own. need_backward(l) maps the zeroed gradient buffer of
// l's bucket (allocated when the first of its layers asks), ready(l) counts
// the bucket's layers and, at its last, reduce-scatters the bucket over the
// owners' boundaries inside it, copies the owned part into this rank's
// gradient shard (P_r floats, grad_shard()) and frees the buffer; need and
// done do nothing. The owner steps its piece from the shard after the
// backward (ZeroSync). Stage 3 reduce-scatters layer by layer (each layer
// its own bucket).
//
// With `prefetch` (sync.overlap) a communication thread runs the
// collectives in the order the main thread queues them — the same on every
// rank, since every rank's model asks in the same order — so the
// reduce-scatters overlap the rest of the backward; in stage 3 need(l) also
// queues the gather of the layer read next (l + 1 in the forward, l − 1 in
// the backward), so that it crosses the wire while l computes. A prefetched
// layer no one asked for by the step's end is freed. Without it every
// collective runs on the caller's thread at once. The thread waits for its
// messages as the transport does (Comm::poll_sleep left as it is).
//
// Traffic per step and rank (ring, pieces P_r, one micro-batch): stage 3
// gathers each layer once for its forward and once for its backward,
// Ψ − P_{r+1} each, and reduce-scatters it, Ψ − P_r: 3(N−1)/N·Ψ when N
// divides Ψ; stage 2 the reduce-scatters only, Ψ − P_r whatever the
// buckets (its owner all-gathers the parameters after the step). Memory:
// stage 3 4·P_r of parameters, 8·P_r of Adam state, no gradient shard (each
// owned part is stepped as its layer's sum arrives); stage 2 the whole
// parameters 4Ψ, the gradient shard 4·P_r and 8·P_r of Adam state — ZeRO's
// 4Ψ + 12Ψ/N; both beside the buffers (stage 3 the layers', stage 2 the
// buckets') while they are held (peak_bytes()).
//
// Parameters tied across pipeline stages (the GPT's embedding and its
// head's copy, Model::tied_params) sum their gradients over the pair after
// the backward: their layers' (`deferred`) reduce-scatters wait for
// finish_step(), which (stage 3) leaves them gathered for the trainer to
// copy the tied values over, and end_tied() takes them back.

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <span>
#include <thread>
#include <utility>
#include <vector>

#include "allreduce/partition.h"
#include "allreduce/sharded.h"
#include "comm/comm.h"
#include "core/optim.h"
#include "core/param_store.h"
#include "modelpar/pp/stage_model.h"

namespace psar {

struct LayerGatherOptions {
  std::string algorithm;         // a registry name with a reduce-scatter and an all-gather
  AllreduceOptions collectives;  // its options
  bool prefetch = false;         // sync.overlap: a communication thread, the next layer gathered ahead
  bool params_sharded = true;    // stage 3; false: stage 2, the gradients only
  int64_t bucket_floats = 1;     // stage 2: a reduce-scatter bucket's capacity (whole layers)
};

class LayerGather final : public pp::ParamGate, public pp::GradientSink {
 public:
  using Range = std::pair<int64_t, int64_t>;
  // layers: Model::layer_ranges(), tiling [0, store.size()); deferred: the
  // arena ranges of parameters tied across pipeline stages; optimizer: over
  // this rank's piece of Partition{store.size(), group.size()}.
  LayerGather(Comm& group, ParamStore& store, std::vector<Range> layers,
              const std::vector<Range>& deferred, Optimizer& optimizer,
              LayerGatherOptions options);
  ~LayerGather() override;  // stops the thread; never throws
  LayerGather(const LayerGather&) = delete;
  LayerGather& operator=(const LayerGather&) = delete;

  // Before a step's forward: the arenas, where the store has them (the
  // first step, or after gather_all), give this rank its piece and are freed.
  void begin_step();
  void need(int chunk, int64_t begin, int64_t end) override;
  void need_backward(int chunk, int64_t begin, int64_t end) override;
  void done(int chunk, int64_t begin, int64_t end) override;
  void ready(int chunk, int64_t begin, int64_t end) override;
  // After the backward: every queued collective done (the thread's error,
  // if it failed), unused prefetches freed, the deferred layers reduced,
  // stepped and gathered. Returns the owned floats stepped this step.
  int64_t finish_step();
  // After the trainer wrote the tied copies into the deferred layers: their
  // owned parts back into the piece, the buffers freed.
  void end_tied();
  // The whole parameters into the store's arenas again (collective over the
  // group): for an evaluation, a checkpoint, the end of training.
  void gather_all();

  // Stage 3: the bytes of this rank's piece of the parameters.
  int64_t shard_bytes() const { return 4 * static_cast<int64_t>(piece_.size()); }
  // Stage 2: this rank's gradient shard, final after finish_step().
  std::span<float> grad_shard() { return grad_shard_; }
  int64_t grad_shard_bytes() const { return 4 * static_cast<int64_t>(grad_shard_.size()); }
  // The gathered buffers (parameters and gradients) at their largest during
  // the last step, in bytes.
  int64_t peak_bytes() const;

 private:
  enum class State { kFree, kQueued, kGathered };
  // Where a layer's gradient goes: reduce-scattered at once when all its
  // layers are final (stage 3: one layer; stage 2: the plan's bucket).
  struct Bucket {
    Range range;
    std::vector<int64_t> split;  // the owners' boundaries inside the range, from 0
    std::unique_ptr<ShardedCollectives> pair;
    std::vector<float> grads;
    int layers = 0, pending = 0;  // its layers / those not final yet this step
    bool deferred = false;
  };
  struct Slot {  // a layer; stage 3 gathers it with its bucket's pair and split
    Range range;
    std::vector<float> params;
    size_t bucket = 0;
    State state = State::kFree;
    int users = 0;
    bool deferred = false;
  };
  struct Task {
    size_t index;  // a slot's to gather, a bucket's to reduce
    bool gather;
  };

  // The layers whose ranges lie in [begin, end) (whole layers, or a PSAR_CHECK).
  std::pair<size_t, size_t> layers_in(int64_t begin, int64_t end) const;
  void acquire(size_t l, bool backward, int direction);
  void queue_gather(size_t l, std::unique_lock<std::mutex>& lock);
  void submit(Task task, std::unique_lock<std::mutex>& lock);
  void run(Task task);  // the collective, off the lock
  // The pair for a layer's or a bucket's collectives: segments of at most
  // an even chunk of the range (4·⌈(end − begin)/N⌉ bytes).
  std::unique_ptr<ShardedCollectives> collectives_for(Range range) const;
  void gradient_buffer(Bucket& b);  // under mu_
  void gather(Slot& s);
  void reduce(Bucket& b);
  void map(const Slot& s);
  void release_params(Slot& s);
  void loop();
  template <class Pred>
  void wait_for(std::unique_lock<std::mutex>& lock, const char* what, Pred pred);
  void account(int64_t floats);  // under mu_

  Comm& group_;
  ParamStore& store_;
  Optimizer& optimizer_;
  LayerGatherOptions options_;
  Partition shard_;
  Range own_;                 // this rank's piece of the arena
  std::vector<float> piece_;  // stage 3: its parameters between steps
  std::vector<float> grad_shard_;  // stage 2: its summed gradients
  std::unique_ptr<ShardedCollectives> whole_;  // gather_all's
  std::vector<Slot> slots_;   // by arena order
  std::vector<Bucket> buckets_;  // by arena order

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Task> queue_;
  size_t running_ = 0;  // tasks taken by the thread, not done
  int64_t stepped_ = 0;
  int64_t held_ = 0, peak_ = 0;  // floats gathered now / at most this step
  bool stop_ = false;
  std::exception_ptr error_;
  std::thread thread_;
};

}  // namespace psar
