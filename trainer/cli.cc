#include "trainer/cli.h"

#include <cstdlib>

#include "comm/mpi_comm.h"
#include "core/errors.h"
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

int64_t parse_int_arg(const std::string& command, const std::string& flag,
                      const std::string& text, int64_t min) {
  size_t used = 0;
  int64_t v = 0;
  try {
    v = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != text.size())
    throw ConfigError(command + ": " + flag + " needs an integer, got '" + text + "'");
  if (v < min)
    throw ConfigError(command + ": " + flag + " must be at least " + std::to_string(min) +
                      ", got " + text);
  return v;
}

int CliContext::world_rank_hint() const {
  for (const char* var : {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID"})
    if (const char* v = std::getenv(var)) return std::atoi(v);
  return 0;
}

}  // namespace psar
