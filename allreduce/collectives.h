#pragma once
// Ring reduce-scatter and ring all-gather as collectives of their own, for
// tensor parallelism (Megatron's sequence-parallel g/ḡ operators) and for
// sharded optimizers. Both are halves of the ring allreduce schedule
// (allreduce/ring_pipeline.h) and share its segmenting and pipelining.
//
// Layout: the full vector of `count` floats is split by Partition{count, N};
// rank r owns piece r (Partition::offset(r), Partition::size(r)). Every rank
// must pass the same count; disagreement ends in a CommError/TimeoutError
// naming the operation and the peer.
//
// Cost (p ranks, n bytes in the full vector):
//   reduce-scatter  (p-1) steps, each rank sends (p-1)/p·n   (p-1)α + (p-1)/p·n(β+γ)
//   all-gather      (p-1) steps, each rank sends (p-1)/p·n   (p-1)α + (p-1)/p·nβ
// A collective object plans once per (communicator shape, count) and reuses
// its scratch across calls; one object per concurrent call site.

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "allreduce/partition.h"
#include "comm/comm.h"

namespace psar {

class RingPipeline;

struct CollectiveOptions {
  // Pipelining granularity in bytes (a chunk is sent in segments of at most this).
  int64_t segment_bytes = 512 * 1024;
};

class RingReduceScatter {
 public:
  explicit RingReduceScatter(CollectiveOptions options = {});
  ~RingReduceScatter();

  // In place. data: [count], the same count on every rank. On return piece
  // `rank` of Partition{count, size} holds the sum over ranks of that piece;
  // the other pieces hold partial sums (clobbered).
  void reduce_scatter(Comm& comm, std::span<float> data);
  // input: [count] (left untouched); output: [Partition{count, size}.size(rank)]
  // receives the sum over ranks of piece `rank`. Costs one local copy of input.
  void reduce_scatter(Comm& comm, std::span<const float> input, std::span<float> output);

 private:
  CollectiveOptions options_;
  std::unique_ptr<RingPipeline> ring_;
  std::vector<float> work_;  // the out-of-place form's copy of input
};

class RingAllGather {
 public:
  explicit RingAllGather(CollectiveOptions options = {});
  ~RingAllGather();

  // In place. data: [count]; piece `rank` holds this rank's contribution, on
  // return every piece r holds rank r's contribution.
  void all_gather(Comm& comm, std::span<float> data);
  // input: [Partition{count, size}.size(rank)]; output: [count] (count from its size).
  void all_gather(Comm& comm, std::span<const float> input, std::span<float> output);

 private:
  CollectiveOptions options_;
  std::unique_ptr<RingPipeline> ring_;
};

}  // namespace psar
