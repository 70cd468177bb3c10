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
//   stage 2 (sync.zero: 2): the gradients sharded too: the gradient arena
//            is released and each bucket of whole layers (sync.bucket_bytes)
//            gets a buffer for its layers' backward only; as the backward
//            makes its last layer final the bucket is reduce-scattered,
//            split at the owners' boundaries, the owned part kept in this
//            rank's gradient shard (P_r floats) and the buffer freed
//            (sync/layer_gather.h; with sync.overlap on its communication
//            thread). After the backward the owned piece is stepped from
//            the shard and the parameters all-gathered.
//   stage 3 (sync.zero: 3): the parameters sharded too, each layer gathered
//            around its forward and its backward and its gradient
//            reduce-scattered and stepped as it is final, by the model's
//            gate (sync/layer_gather.h); step() waits for the last layers.
// Stages 2 and 3 need a model that names its layers (Model::layer_ranges).
//
// Traffic per rank per step (ring; pieces P_r = Partition{Ψ, N}.size(r)):
// reduce-scatter Ψ − P_r, all-gather Ψ − P_{(r+1) mod N} floats:
// 2(N−1)/N·Ψ for N | Ψ — the allreduce's bytes (which is a reduce-scatter
// and an all-gather). Memory (fp32 Adam): parameters 4Ψ, optimizer state
// 8·P_r bytes, and the gradients: stage 1 the arena, 4Ψ — ZeRO's
// 8Ψ + 8Ψ/N; stage 2 the shard, 4·P_r — ZeRO's 4Ψ + 12Ψ/N, beside the
// buckets' gradient buffers while the backward holds them.
//
// Equality: each element is summed by the same reduce-scatter the same
// algorithm's allreduce runs first — whole, or bucket by bucket or layer by
// layer cut at the same owners' boundaries — and Adam/SGD are elementwise, so stages 1, 2
// and 3 are bitwise the ZeRO-0 run of ring and halving_doubling under data
// parallelism alone; mpi's library may add in another order.

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
  // (Stages 2 and 3 overlap through their gate, with sync.overlap.)
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
    return layers_ ? HeldBytes{layers_->shard_bytes(), layers_->grad_shard_bytes(),
                               layers_->peak_bytes()}
                   : HeldBytes{};
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
  std::unique_ptr<Optimizer> optimizer_;  // over the owned piece only
  std::unique_ptr<LayerGather> layers_;  // stages 2 and 3
};

// sync.zero, checked against the backend and the model (a ConfigError naming
// the keys): 0 for none.
int zero_stage(const SyncOptions& options, const std::string& backend);

SyncSetup make_zero_sync(const std::string& algorithm, SyncInit& init);

}  // namespace psar
