#pragma once
// Allreducer: in-place sum of a float vector over every rank of a Comm.
// One algorithm per file, each chosen by name through the registry below.
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

#include "comm/comm.h"

namespace psar {

struct AllreduceOptions {
  // Pipelining granularity of the segmented algorithms (ring, tree), in bytes.
  int64_t segment_bytes = 512 * 1024;  // see docs/algorithms.md, "Segments"
};

class Allreducer {
 public:
  virtual ~Allreducer() = default;
  virtual std::string name() const = 0;
  virtual void allreduce(Comm& comm, std::span<float> data) = 0;
};

struct AllreducerEntry {
  const char* name;
  std::unique_ptr<Allreducer> (*make)(const AllreduceOptions&);
  const char* summary;  // one line for --help and docs
  bool device = false;  // runs on a GPU (nccl): needs CUDA at build and run time
};

// Every algorithm, in the order docs and benchmarks list them.
std::span<const AllreducerEntry> allreducer_registry();
// Throws ConfigError listing the known names if `name` is unknown.
std::unique_ptr<Allreducer> make_allreducer(const std::string& name,
                                            const AllreduceOptions& options = {});
// Host algorithms by default (what runs on any machine, swept by tests and
// benchmarks); with include_device, the GPU ones too.
std::vector<std::string> allreducer_names(bool include_device = false);

}  // namespace psar
