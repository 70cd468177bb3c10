#include "trainer/cli.h"

#include <cstdlib>

#include "comm/mpi_comm.h"
#include "core/log.h"

namespace psar {

Comm& CliContext::world() {
  if (!world_) {
    if (!MpiRuntime::initialized()) {
      // Owned for the life of the process; finalized at exit.
      static MpiRuntime* runtime = new MpiRuntime(nullptr, nullptr);
      std::atexit([] { delete runtime; });
    }
    world_ = std::make_unique<MpiComm>(MPI_COMM_WORLD);
    log::set_rank(world_->rank());
  }
  return *world_;
}

int CliContext::world_rank_hint() const {
  for (const char* var : {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID"})
    if (const char* v = std::getenv(var)) return std::atoi(v);
  return 0;
}

}  // namespace psar
