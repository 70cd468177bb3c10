// Placeholder until its issue lands; replaced by the real subcommand.
#include "core/errors.h"
#include "trainer/cli.h"

namespace psar {
int cmd_bench_ps(CliContext&) { throw Error("psar: this subcommand is being built (cmd_bench_ps)"); }
}  // namespace psar
