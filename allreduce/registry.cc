#include "allreduce/allreducer.h"

#include "allreduce/algorithms.h"
#include "core/errors.h"

namespace psar {

namespace {
// Adding an algorithm: its own file, one line here, one row in docs/algorithms.md.
constexpr AllreducerEntry kRegistry[] = {
    {"ring", &make_ring_allreducer, "reduce-scatter + all-gather around a ring, pipelined"},
    {"tree", &make_tree_allreducer, "binary-tree reduce to rank 0 + broadcast, pipelined"},
    {"butterfly", &make_butterfly_allreducer, "recursive doubling: log2 N full-vector swaps"},
    {"halving_doubling", &make_halving_doubling_allreducer,
     "Rabenseifner: recursive-halving reduce-scatter + recursive-doubling all-gather"},
    {"naive", &make_naive_allreducer, "all-to-all: every rank sends its vector to every other"},
    {"hierarchical", &make_hierarchical_allreducer,
     "reduce-scatter inside each node, ring allreduce of each slice across nodes, all-gather"},
    {"mpi", &make_mpi_allreducer, "MPI_Allreduce of the MPI library (the measured peer)"},
    {"nccl", &make_nccl_allreducer, "ncclAllReduce on the GPU (host buffers copied in and out)",
     true},
};
}  // namespace

std::span<const AllreducerEntry> allreducer_registry() { return kRegistry; }

std::vector<std::string> allreducer_names(bool include_device) {
  std::vector<std::string> names;
  for (const auto& e : kRegistry)
    if (include_device || !e.device) names.push_back(e.name);
  return names;
}

std::unique_ptr<Allreducer> make_allreducer(const std::string& name,
                                            const AllreduceOptions& options) {
  for (const auto& e : kRegistry)
    if (name == e.name) return e.make(options);
  std::string known;
  for (const auto& e : kRegistry) known += (known.empty() ? "" : ", ") + std::string(e.name);
  throw ConfigError("unknown allreduce algorithm '" + name + "' (known: " + known + ")");
}

}  // namespace psar
