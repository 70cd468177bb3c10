// psar — entry point. Chooses the subcommand, turns errors into exit codes:
//   0 success, 2 bad input (config, data, usage), 1 anything else.
// A failure on one rank of a multi-rank job is printed by that rank, prefixed
// with its rank, and ends the whole job at once with the code (MPI_Abort;
// Open MPI's mpirun then names the rank that called it and exits with the
// code), so that no process is left waiting on a dead peer. An error every
// rank raised alike after an exchange (Error::agreed) is printed once, by
// rank 0, and every rank returns the code.

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "comm/mpi_comm.h"
#include "core/errors.h"
#include "core/checkpoint.h"
#include "tools/cli.h"

namespace {

void usage(FILE* out) {
  std::fprintf(out, "usage: psar <command> [args] [--set key=value ...]\n\ncommands:\n");
  for (const auto& c : psar::subcommands()) std::fprintf(out, "  %-16s %s\n", c.name, c.summary);
  std::fprintf(out, "\nRun under mpirun for several ranks, e.g.\n"
                    "  mpirun -np 4 build/trainer/psar train experiments/quickstart.yaml\n");
}

// Reports `e` (of the given kind, "" for a run-time error) and ends this
// rank — and, when it is not an agreed error of a multi-rank job, the job.
int fail(const psar::Error* typed, const std::exception& e, const char* kind, int code, int rank,
         bool multi_rank) {
  using namespace psar;
  const bool agreed = typed && typed->agreed();
  // An agreed error is the job's, not one rank's: no rank prefix.
  if (!multi_rank || (agreed && rank == 0)) std::fprintf(stderr, "psar: %s%s\n", kind, e.what());
  else if (!agreed) std::fprintf(stderr, "psar: rank %d: %s%s\n", rank, kind, e.what());
  std::fflush(stderr);
  if (multi_rank && !agreed && MpiRuntime::initialized()) MpiRuntime::abort(code);
  return code;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace psar;
  if (argc < 2 || !std::strcmp(argv[1], "-h") || !std::strcmp(argv[1], "--help")) {
    usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  if (!std::strcmp(argv[1], "--version")) {
    std::printf("psar %s\n", psar_version());
    return 0;
  }
  CliContext ctx;
  const Subcommand* cmd = nullptr;
  int first_arg = 2;
  for (const auto& c : subcommands()) {
    // Two-word commands ("bench allreduce") match two arguments.
    const std::string name = c.name;
    const auto space = name.find(' ');
    if (space == std::string::npos) {
      if (name == argv[1]) cmd = &c, first_arg = 2;
    } else if (argc >= 3 && name.substr(0, space) == argv[1] && name.substr(space + 1) == argv[2]) {
      cmd = &c, first_arg = 3;
    }
  }
  const int rank = ctx.world_rank_hint();
  if (!cmd) {
    if (rank == 0) {
      std::fprintf(stderr, "psar: unknown command '%s'\n\n", argv[1]);
      usage(stderr);
    }
    return 2;
  }
  for (int i = first_arg; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--set")) {
      if (i + 1 >= argc) {
        if (rank == 0) std::fprintf(stderr, "psar: --set needs key=value\n");
        return 2;
      }
      ctx.overrides.push_back(argv[++i]);
    } else if (!std::strncmp(argv[i], "--set=", 6)) {
      ctx.overrides.push_back(argv[i] + 6);
    } else {
      ctx.args.push_back(argv[i]);
    }
  }
  const bool multi_rank = [] {
    for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS"})
      if (const char* s = std::getenv(v)) return std::atoi(s) > 1;
    return false;
  }();
  try {
    const int code = cmd->run(ctx);
    MpiRuntime::set_exit_code(code);  // the code, should MPI_Finalize need its deadline
    return code;
  } catch (const ConfigError& e) {
    return fail(&e, e, "config error: ", 2, rank, multi_rank);
  } catch (const DataError& e) {
    return fail(&e, e, "data error: ", 2, rank, multi_rank);
  } catch (const Error& e) {
    return fail(&e, e, "error: ", 1, rank, multi_rank);
  } catch (const std::exception& e) {
    return fail(nullptr, e, "error: ", 1, rank, multi_rank);
  }
}
