#include "tools/cli.h"

namespace psar {

namespace {
constexpr Subcommand kCommands[] = {
    {"train", &cmd_train, "train a model: psar train CONFIG.yaml [--sync NAME] [--out DIR]"},
    {"bench allreduce", &cmd_bench_allreduce,
     "allreduce sweep, nccl-tests style: --algos ring,mpi -b 4K -e 64M -f 2 -n 20 -w 5"},
    {"bench ps", &cmd_bench_ps, "parameter-server push+pull sweep beside raw ZeroMQ"},
    {"cost", &cmd_cost,
     "allreduce cost forms and exact bytes: --p 2,4 --n 4K,16M --alpha 5us --beta 1e-10"},
    {"tune", &cmd_tune,
     "measure every allreduce per size into a tuning table for --sync auto: --out TABLE"},
    {"keys", &cmd_keys, "list every configuration key (Markdown)"},
    {"schedule", &cmd_schedule, "print a pipeline schedule: --kind 1f1b --stages 4 --microbatches 8"},
    {"simulate", &cmd_simulate, "simulate a training step on a modelled cluster: psar simulate CONFIG.yaml"},
    {"plan", &cmd_plan,
     "rank the grids that fit in memory by simulated throughput: psar plan CONFIG.yaml --gpus N"},
};
}  // namespace

std::span<const Subcommand> subcommands() { return kCommands; }

}  // namespace psar
