// The `nccl` entry of a build without CUDA/NCCL (CMake found no nvcc or no
// NCCL): choosing it is a configuration error that says so.

#include "allreduce/algorithms.h"
#include "core/errors.h"

namespace psar {

namespace {
[[noreturn]] void unavailable() {
  throw ConfigError("sync backend 'nccl': this psar was built without CUDA/NCCL (nvcc or NCCL "
                    "not found at configure time)");
}
}  // namespace

std::unique_ptr<Allreducer> make_nccl_allreducer(const AllreduceOptions&) { unavailable(); }
std::unique_ptr<ShardedCollectives> make_nccl_sharded(const AllreduceOptions&) { unavailable(); }

}  // namespace psar
