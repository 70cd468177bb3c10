#pragma once
// Allreducer: in-place sum of a float vector over every rank of a Comm.
// One algorithm per file, each chosen by name through the registry below.
// psar's own algorithms are programs (allreduce/program.h): the file emits
// the schedule, the engine (allreduce/engine.h) runs it, the simulator times
// it and the byte counts are read off it. The library peers (mpi, nccl) are
// Allreducers of their own.
//
// Contract for every algorithm:
//  - After allreduce(), data holds the elementwise sum over all ranks, and
//    the bits are identical on every rank (replicas never drift apart).
//  - Custom algorithms use only Comm point-to-point calls; only `mpi` (the
//    peer we measure against) calls an MPI collective.
//  - Sizes that disagree across ranks end in a CommError/TimeoutError that
//    names the operation and the peer, never in silent corruption.

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "allreduce/element_type.h"
#include "allreduce/program.h"
#include "comm/comm.h"
#include "core/config.h"

namespace psar {

struct AllreduceOptions {
  // Pipelining granularity of the segmented algorithms (ring, tree), in bytes
  // of the float32 vector (the same pieces for every sync.dtype).
  int64_t segment_bytes = 512 * 1024;  // see docs/algorithms.md, "Segments"
  // The element type on the wire (sync.dtype) and whether partial sums are
  // rounded to it too (sync.accumulate: dtype) instead of kept in float32.
  // See allreduce/element_type.h.
  ElementType dtype = ElementType::kFp32;
  bool accumulate_in_dtype = false;
  // nccl: NCCL_ALGO and NCCL_PROTO for its communicator ("auto": NCCL's own
  // choice, or the environment's). See docs/gpu.md.
  std::string nccl_algo = "auto";   // auto | ring | tree
  std::string nccl_proto = "auto";  // auto | LL | LL128 | Simple
};

// The one place the options are read from the config (the sync.* keys:
// segment_bytes, dtype, accumulate, nccl_algo, nccl_proto): gradient
// synchronization, tensor-parallel all-reduces, the benchmarks, `psar cost`
// and the simulator all start from it.
AllreduceOptions allreduce_options(const Config& config);
// A tensor-parallel all-reduce's options: those of the gradients (segments,
// NCCL settings) with the activations on the wire in float32, since
// sync.dtype is the gradients' wire type only.
AllreduceOptions activation_allreduce_options(AllreduceOptions options);

// NCCL's bytes per rank for one allreduce of `count` elements of `element`
// bytes over `ranks` ranks: 2(N−1)/N·n for the ring, and the same on average
// for the double binary tree (each of its two trees moves n/2 up and n/2 down
// each of its N−1 edges); docs/gpu.md. Rounded down.
int64_t nccl_bytes_per_rank(int ranks, int64_t count, int element = 4);

class ShardedCollectives;  // allreduce/sharded.h

class Allreducer {
 public:
  virtual ~Allreducer() = default;
  virtual std::string name() const = 0;
  virtual void allreduce(Comm& comm, std::span<float> data) = 0;
};

// The α-β-γ cost of one allreduce as the coefficients of
//   time = alpha·α + beta·β + gamma·γ,
// α the latency of one message (s), β seconds per byte sent, γ seconds per
// byte reduced. The forms are those of docs/algorithms.md (derived in
// docs/theory.md).
struct CostTerms {
  double alpha = 0, beta = 0, gamma = 0;
  double time(double a, double b, double g) const { return alpha * a + beta * b + gamma * g; }
  friend CostTerms operator+(const CostTerms& x, const CostTerms& y) {
    return {x.alpha + y.alpha, x.beta + y.beta, x.gamma + y.gamma};
  }
};

// One allreduce of `bytes` over `ranks` ranks (segments from options).
using CostForm = CostTerms (*)(int ranks, int64_t bytes, const AllreduceOptions& options);

struct AllreducerEntry {
  const char* name;
  const char* summary;  // one line for --help and docs
  // psar's algorithms: the program of one allreduce (what the engine runs,
  // the simulator times and the byte counts come from).
  ProgramFn program = nullptr;
  // Library peers without a program of psar's (mpi, nccl).
  std::unique_ptr<Allreducer> (*make)(const AllreduceOptions&) = nullptr;
  bool device = false;     // runs on a GPU (nccl): needs CUDA at build and run time
  bool needs_mpi = false;  // calls the MPI library itself: runs only under mpirun
  // The program reads ProgramShape::node: hierarchical, the pairwise
  // exchanges (naive, butterfly, halving_doubling), segmented across hosts,
  // and the tree, paced across hosts (Program::paced).
  bool needs_nodes = false;
  CostForm cost = nullptr;   // every algorithm has one (a test checks)
  // A library peer: the algorithm whose program the simulator times in its
  // place (nullptr: the simulator refuses it).
  const char* timed_as = nullptr;
  // Its reduce-scatter and all-gather with one piece layout (what a sharded
  // optimizer runs, allreduce/sharded.h): programs of psar's, or a library
  // peer's own pair; none: the algorithm cannot shard (sync.zero refuses it).
  ProgramFn reduce_scatter = nullptr;
  ProgramFn all_gather = nullptr;
  std::unique_ptr<ShardedCollectives> (*make_sharded)(const AllreduceOptions&) = nullptr;
  bool shards() const { return (reduce_scatter && all_gather) || make_sharded; }

  // The program for `ranks` ranks and `count` elements (node: as
  // ProgramShape::node); ConfigError for an algorithm without one.
  Program program_for(int ranks, int64_t count, const AllreduceOptions& options,
                      const std::vector<int>& node = {}) const;
  // Payload bytes over every rank / of the busiest rank, read off the program.
  int64_t sent_bytes_total(int ranks, int64_t count, const AllreduceOptions& options) const;
  int64_t sent_bytes_busiest(int ranks, int64_t count, const AllreduceOptions& options) const;
};

// Every algorithm, in the order docs and benchmarks list them: the built-in
// ones, then those added by an AllreducerRegistration (in order of creation).
// The span is valid until the next registration or deregistration.
std::span<const AllreducerEntry> allreducer_registry();
// Throws ConfigError listing the known names if `name` is unknown.
const AllreducerEntry& find_allreducer(const std::string& name);

// Every rank's node (ProgramShape::node), for the algorithms that read it
// (needs_nodes): Comm::nodes() where set (net.node_size, tests), a node per
// rank under a one-level emulated network, else the hostnames, exchanged
// over the control plane (collective over `comm`).
std::vector<int> node_map(Comm& comm);
// One algorithm's node map, found by node_map on the first call over a
// communicator and kept for the next ones (a collective of its own, so every
// rank's first call finds it); empty for an algorithm that does not read it
// (AllreducerEntry::needs_nodes). What a program's allreducer and its
// sharded pair (allreduce/sharded.h) hand the engine.
class NodeMapCache {
 public:
  // operation: named if finding the nodes fails ("tree allreduce").
  NodeMapCache(const AllreducerEntry& entry, std::string operation);
  const std::vector<int>& get(Comm& comm);

 private:
  bool needed_;
  std::string operation_;
  const Comm* found_for_ = nullptr;
  std::vector<int> node_;
};
// Throws ConfigError listing the known names if `name` is unknown. A
// program's allreducer plans once per (ranks, count) and reuses its plan.
std::unique_ptr<Allreducer> make_allreducer(const std::string& name,
                                            const AllreduceOptions& options = {});
// Host algorithms by default (what runs on any machine, swept by tests and
// benchmarks); with include_device, the GPU ones too.
std::vector<std::string> allreducer_names(bool include_device = false);
// What `psar bench allreduce` runs without --algos: every host algorithm of
// the registry, in its order (a registered one included).
std::vector<std::string> bench_allreduce_default_algos();

// Adds an algorithm to the registry for the lifetime of this object: how a
// test (or an out-of-tree experiment) plugs one in without touching
// registry.cc. Create and destroy it while no other thread reads the
// registry. Throws ConfigError if the name is taken.
class AllreducerRegistration {
 public:
  explicit AllreducerRegistration(const AllreducerEntry& entry);
  ~AllreducerRegistration();
  AllreducerRegistration(const AllreducerRegistration&) = delete;
  AllreducerRegistration& operator=(const AllreducerRegistration&) = delete;

 private:
  std::string name_;
};

}  // namespace psar
