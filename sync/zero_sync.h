#pragma once
// ZeroSync: sharded training state behind the GradientSync seam — ZeRO
// (Rajbhandari et al., SC'20) stages 1, 2 and 3 over the data-parallel group,
// as PyTorch's ZeroRedundancyOptimizer and Megatron's distributed optimizer
// run them (docs/zero.md). The flat parameter arena of Ψ floats is cut by
// Partition{Ψ, N}: rank r owns piece r, [Partition::offset(r), +size(r)),
// and keeps the optimizer state of that piece only.
//
//   stage 1 (sync.zero: 1): after the backward, one reduce-scatter of the
//            whole gradient arena over that layout, the optimizer steps the
//            owned piece with its average, one all-gather of the parameters.
//   stage 2 (sync.zero: 2): range by range as the backward makes each
//            bucket final (sync.overlap), on the overlap's communication
//            thread: the bucket is reduce-scattered, split at the owners'
//            boundaries (the same flat layout, whatever the buckets), the
//            owned part stepped (Optimizer::step_slice: a finished bucket's
//            parameters are not read again by this step's backward), and the
//            bucket all-gathered — so both collectives overlap the backward.
//            finish() only counts the step.
//   stage 3 (sync.zero: 3): the parameters sharded too, each layer gathered
//            around its forward and its backward and its gradient
//            reduce-scattered and stepped as it is final, by the model's
//            gate (sync/layer_gather.h); step() waits for the last layers.
//
// Traffic per rank per step (ring; pieces P_r = Partition{Ψ, N}.size(r)):
// reduce-scatter Ψ − P_r, all-gather Ψ − P_{(r+1) mod N} floats:
// 2(N−1)/N·Ψ for N | Ψ — the allreduce's bytes (which is a reduce-scatter
// and an all-gather). Memory (fp32 Adam): parameters 4Ψ, gradient arena 4Ψ,
// optimizer state 8·P_r bytes — ZeRO's 8Ψ + 8Ψ/N (4Ψ + 12Ψ/N for stage 2
// needs the gradient arena itself sharded; psar's models write their
// gradients into one arena of Ψ, so stage 2 here changes the timing, not
// the arena's bytes).
//
// Equality: each element is summed by the same reduce-scatter the same
// algorithm's allreduce runs first, and Adam/SGD are elementwise, so stage 1
// (and stage 2 without overlap, one range) is bitwise the ZeRO-0 run of ring
// and halving_doubling; stage 2's buckets are cut at the owners' boundaries,
// not the bucket's own Partition, so an element's sum may start at another
// rank (within 1e-6); mpi's library may add in another order.

#include <map>
#include <memory>
#include <string>
#include <utility>

#include "allreduce/partition.h"
#include "allreduce/sharded.h"
#include "sync/gradient_sync.h"
#include "sync/layer_gather.h"

namespace psar {

class ZeroSync final : public GradientSync {
 public:
  // Stage 3 shards `store`'s parameters over its `layers` (SyncInit).
  ZeroSync(Comm& group, const std::string& algorithm, const AllreduceOptions& options,
           const OptimizerOptions& optimizer, int stage, ParamStore& store,
           const SyncInit& layers, bool prefetch);
  std::string name() const override { return algorithm_; }
  void step(std::span<float> params, std::span<float> grads) override;
  CommCounters counters() const override { return group_.counters(); }
  // Stage 2: each range is reduce-scattered, stepped and all-gathered
  // (stage 3 overlaps through its gate, and prefetches with sync.overlap).
  bool overlaps() const override { return stage_ == 2; }
  void sync_range(int64_t offset, std::span<float> params, std::span<float> grads) override;
  void finish(std::span<float> params, std::span<float> grads) override;
  Optimizer* optimizer() override { return optimizer_.get(); }
  pp::ParamGate* param_gate() override { return layers_.get(); }
  pp::GradientSink* gradient_sink() override { return layers_.get(); }
  void begin_step() override {
    if (layers_) layers_->begin_step();
  }
  void gather_params() override {
    if (layers_) layers_->gather_all();
  }
  void params_shared() override {
    if (layers_) layers_->end_tied();
  }
  HeldBytes held_bytes() const override {
    return layers_ ? HeldBytes{layers_->shard_bytes(), layers_->peak_bytes()} : HeldBytes{};
  }

  // The arena floats this rank owns: [begin, end).
  std::pair<int64_t, int64_t> owned() const;

 private:
  Comm& group_;
  std::string algorithm_;
  AllreduceOptions options_;
  int stage_;
  Partition shard_;
  std::unique_ptr<ShardedCollectives> whole_;
  // Stage 2: one pair per range the overlap hands over (each plans its split once).
  std::map<std::pair<int64_t, int64_t>, std::unique_ptr<ShardedCollectives>> ranges_;
  std::unique_ptr<Optimizer> optimizer_;  // over the owned piece only
  int64_t stepped_ = 0;  // stage 2: owned floats stepped in this step's ranges
  std::unique_ptr<LayerGather> layers_;  // stage 3
};

// sync.zero, checked against the backend and the model (a ConfigError naming
// the keys): 0 for none.
int zero_stage(const SyncOptions& options, const std::string& backend);

SyncSetup make_zero_sync(const std::string& algorithm, SyncInit& init);

}  // namespace psar
