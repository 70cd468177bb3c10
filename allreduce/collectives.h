#pragma once
// Collectives as programs (allreduce/program.h) run by the engine
// (allreduce/engine.h): reduce-scatter and all-gather (tensor parallelism's
// sequence-parallel g/ḡ operators, sharded optimizers), broadcast and reduce,
// and every allreduce of the registry (allreduce/allreducer.h).
//
// Layout of reduce-scatter and all-gather: the full vector of `count` floats
// is split by Partition{count, N}; rank r owns piece r (Partition::offset(r),
// Partition::size(r)). Every rank must pass the same count; disagreement ends
// in a CommError/TimeoutError naming the operation and the peer.
//
// Cost (p ranks, n bytes in the full vector; docs/algorithms.md):
//   reduce-scatter (ring)  (p-1)α + (p-1)/p·n(β+γ)
//   all-gather (ring)      (p-1)α + (p-1)/p·nβ
//   broadcast (tree)       (D+S-1)(α + 2(n/S)β),  D = ⌊log₂p⌋, S segments
//   reduce (tree)          (D+S-1)(α + 2(n/S)(β+γ))
// A collective object plans once per (communicator shape, count, root) and
// reuses its plan and scratch across calls; one object per concurrent call site.

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "allreduce/element_type.h"
#include "allreduce/engine.h"
#include "allreduce/partition.h"
#include "allreduce/program.h"
#include "comm/comm.h"

namespace psar {

struct CollectiveOptions {
  // Pipelining granularity in bytes (a step is sent in segments of at most this).
  int64_t segment_bytes = 512 * 1024;
  ElementType dtype = ElementType::kFp32;  // on the wire (allreduce/element_type.h)
  bool accumulate_in_dtype = false;
};

struct AllreduceOptions;  // allreduce/allreducer.h
// An allreduce's options as its collectives take them (the registry's
// allreducers and their sharded pairs).
CollectiveOptions collective_options(const AllreduceOptions& options);

// The collectives other than allreduce, by kind; each names its program.
enum class CollectiveKind { kReduceScatter, kAllGather, kBroadcast, kReduce };
struct CollectiveEntry {
  const char* name;
  CollectiveKind kind;
  ProgramFn program;
  const char* summary;
};
std::span<const CollectiveEntry> collective_registry();

// Runs one program function's programs: generates and plans the program for
// each new (ranks, count, root, node map), runs it through the engine.
class ProgramCollective {
 public:
  ProgramCollective(ProgramFn program, CollectiveOptions options, int tag);
  // In place over data (the program's vector), errors naming the program;
  // split: the pieces of a reduce-scatter or all-gather (ProgramShape::split).
  void run(Comm& comm, std::span<float> data, int root = 0, const std::vector<int>& node = {},
           const std::vector<int64_t>& split = {});
  const Program& program() const { return program_; }

 private:
  ProgramFn fn_;
  CollectiveOptions options_;
  int tag_;
  bool planned_ = false;
  int planned_rank_ = -1;
  ProgramShape shape_;
  Program program_;
  Engine engine_;
};

class RingReduceScatter {
 public:
  explicit RingReduceScatter(CollectiveOptions options = {});

  // In place. data: [count], the same count on every rank. On return piece
  // `rank` of Partition{count, size} holds the sum over ranks of that piece;
  // the other pieces hold partial sums (clobbered).
  void reduce_scatter(Comm& comm, std::span<float> data);
  // input: [count] (left untouched); output: [Partition{count, size}.size(rank)]
  // receives the sum over ranks of piece `rank`. Costs one local copy of input.
  void reduce_scatter(Comm& comm, std::span<const float> input, std::span<float> output);

 private:
  ProgramCollective run_;
  std::vector<float> work_;  // the out-of-place form's copy of input
};

class RingAllGather {
 public:
  explicit RingAllGather(CollectiveOptions options = {});

  // In place. data: [count]; piece `rank` holds this rank's contribution, on
  // return every piece r holds rank r's contribution.
  void all_gather(Comm& comm, std::span<float> data);
  // input: [Partition{count, size}.size(rank)]; output: [count] (count from its size).
  void all_gather(Comm& comm, std::span<const float> input, std::span<float> output);

 private:
  ProgramCollective run_;
};

// data: [count] on every rank; on return every rank holds root's vector.
class TreeBroadcast {
 public:
  explicit TreeBroadcast(CollectiveOptions options = {});
  void broadcast(Comm& comm, std::span<float> data, int root);

 private:
  ProgramCollective run_;
};

// data: [count] on every rank; on return root holds the sum over ranks (the
// others hold partial sums).
class TreeReduce {
 public:
  explicit TreeReduce(CollectiveOptions options = {});
  void reduce(Comm& comm, std::span<float> data, int root);

 private:
  ProgramCollective run_;
};

}  // namespace psar
