#include "tools/cli.h"

#include <algorithm>
#include <cstdlib>

#include "comm/mpi_comm.h"
#include "core/errors.h"
#include "core/log.h"

namespace psar {

Comm& CliContext::world(bool threads) {
  if (!world_) {
    if (!MpiRuntime::initialized()) {
      // Owned for the life of the process; finalized at exit.
      static MpiRuntime* runtime = new MpiRuntime(nullptr, nullptr, threads);
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

std::vector<FlagArg> split_flags(const std::string& command, const std::vector<std::string>& args,
                                 const std::string& usage) {
  std::vector<FlagArg> out;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (const auto eq = arg.find('='); arg.rfind("--", 0) == 0 && eq != std::string::npos) {
      out.push_back({arg.substr(0, eq), arg.substr(eq + 1)});
    } else if (arg == "-h" || arg == "--help") {
      out.push_back({"--help", ""});
    } else {
      if (i + 1 >= args.size())
        throw ConfigError(command + ": " + arg + " needs a value\n" + usage);
      out.push_back({arg, args[++i]});
    }
  }
  return out;
}

std::vector<std::string> split_list_arg(const std::string& text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = std::min(text.find(',', start), text.size());
    if (comma > start) out.push_back(text.substr(start, comma - start));
    start = comma + 1;
  }
  return out;
}

int CliContext::world_rank_hint() const {
  for (const char* var : {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID"})
    if (const char* v = std::getenv(var)) return std::atoi(v);
  return 0;
}

}  // namespace psar
