#pragma once
// The `psar` command line: subcommands in one table (commands.cc). Every
// subcommand accepts `--set dotted.key=value` (collected into `overrides`).

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace psar {

class Comm;

struct CliContext {
  std::vector<std::string> args;       // after the subcommand name, --set removed
  std::vector<std::string> overrides;  // "key=value" from every --set
  // The MPI world, created on first use (subcommands that need no MPI never
  // start it); threads: MPI may be called from a second thread (sync.overlap).
  Comm& world(bool threads = false);
  int world_rank_hint() const;  // rank from the launcher's environment, before MPI starts

  std::unique_ptr<Comm> world_;
};

struct Subcommand {
  const char* name;     // "train", "bench allreduce", ...
  int (*run)(CliContext&);
  const char* summary;
};

std::span<const Subcommand> subcommands();

// An integer command-line argument: `text` must be all digits and ≥ min;
// otherwise a ConfigError naming the command and the flag.
int64_t parse_int_arg(const std::string& command, const std::string& flag,
                      const std::string& text, int64_t min);
// A subcommand's flags as (flag, value) pairs, from "--flag value", "-f value"
// or "--flag=value"; "-h" and "--help" come back as {"--help", ""}. A flag
// without its value is a ConfigError naming the command and the flag.
struct FlagArg {
  std::string flag, value;
};
std::vector<FlagArg> split_flags(const std::string& command, const std::vector<std::string>& args,
                                 const std::string& usage);
// "a,b,,c" -> {"a", "b", "c"}: a comma-separated list argument, empty items dropped.
std::vector<std::string> split_list_arg(const std::string& text);

// Subcommands, one file each.
int cmd_train(CliContext&);
int cmd_bench_allreduce(CliContext&);
int cmd_cost(CliContext&);
int cmd_tune(CliContext&);
int cmd_bench_ps(CliContext&);
int cmd_schedule(CliContext&);
int cmd_keys(CliContext&);
int cmd_simulate(CliContext&);
int cmd_plan(CliContext&);

}  // namespace psar
