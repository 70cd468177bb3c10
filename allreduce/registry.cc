#include "allreduce/allreducer.h"

#include <algorithm>
#include <iterator>

#include "allreduce/algorithms.h"
#include "core/errors.h"

namespace psar {

namespace {
// Adding an algorithm: its own file (factory, cost form, bytes sent per rank),
// one entry here, one row in docs/algorithms.md. Tests, benchmarks and
// `psar cost` read this table; a test fails for a host algorithm without its
// cost form or its byte count.
const AllreducerEntry kBuiltin[] = {
    {.name = "ring", .make = &make_ring_allreducer,
     .summary = "reduce-scatter + all-gather around a ring, pipelined",
     .cost = &ring_cost, .sent_bytes = &ring_sent_bytes,
     .steps = &ring_steps},
    {.name = "tree", .make = &make_tree_allreducer,
     .summary = "binary-tree reduce to rank 0 + broadcast, pipelined",
     .cost = &tree_cost, .sent_bytes = &tree_sent_bytes,
     .steps = &tree_steps},
    {.name = "butterfly", .make = &make_butterfly_allreducer,
     .summary = "recursive doubling: log2 N full-vector swaps",
     .cost = &butterfly_cost, .sent_bytes = &butterfly_sent_bytes,
     .steps = &butterfly_steps},
    {.name = "halving_doubling", .make = &make_halving_doubling_allreducer,
     .summary = "Rabenseifner: recursive-halving reduce-scatter + recursive-doubling all-gather",
     .cost = &halving_doubling_cost, .sent_bytes = &halving_doubling_sent_bytes,
     .steps = &halving_doubling_steps},
    {.name = "naive", .make = &make_naive_allreducer,
     .summary = "all-to-all: every rank sends its vector to every other",
     .cost = &naive_cost, .sent_bytes = &naive_sent_bytes,
     .steps = &naive_steps},
    // On one node — all the registry's uniform α-β model sees — it is the
    // ring; its two-level form and bytes per level are in hierarchical.cc.
    {.name = "hierarchical", .make = &make_hierarchical_allreducer,
     .summary = "reduce-scatter inside each node, ring allreduce of each slice across nodes, all-gather",
     .cost = &ring_cost, .sent_bytes = &ring_sent_bytes, .steps = &ring_steps},
    // Open MPI picks its own schedule; its times are fitted to the ring's form.
    {.name = "mpi", .make = &make_mpi_allreducer,
     .summary = "MPI_Allreduce of the MPI library (the measured peer)",
     .needs_mpi = true, .cost = &ring_cost},
    // NCCL's ring on one node: the ring's form.
    {.name = "nccl", .make = &make_nccl_allreducer,
     .summary = "ncclAllReduce on the GPU (device data in place; host buffers copied in and out)",
     .device = true, .cost = &ring_cost},
};

std::vector<AllreducerEntry>& entries() {
  static std::vector<AllreducerEntry> all(std::begin(kBuiltin), std::end(kBuiltin));
  return all;
}

std::string known_names() {
  std::string known;
  for (const auto& e : entries()) known += (known.empty() ? "" : ", ") + std::string(e.name);
  return known;
}
}  // namespace

int64_t nccl_bytes_per_rank(int ranks, int64_t count) {
  if (ranks <= 1) return 0;
  const auto bytes = static_cast<int64_t>(sizeof(float)) * count;
  // 2(N−1)/N·n, exact in 128-bit arithmetic before rounding down.
  return static_cast<int64_t>(static_cast<__int128>(2 * (ranks - 1)) * bytes / ranks);
}

int64_t AllreducerEntry::sent_bytes_total(int ranks, int64_t count) const {
  int64_t total = 0;
  for (int r = 0; r < ranks; ++r) total += sent_bytes(r, ranks, count);
  return total;
}

int64_t AllreducerEntry::sent_bytes_busiest(int ranks, int64_t count) const {
  int64_t busiest = 0;
  for (int r = 0; r < ranks; ++r) busiest = std::max(busiest, sent_bytes(r, ranks, count));
  return busiest;
}

std::span<const AllreducerEntry> allreducer_registry() { return entries(); }

std::vector<std::string> allreducer_names(bool include_device) {
  std::vector<std::string> names;
  for (const auto& e : entries())
    if (include_device || !e.device) names.push_back(e.name);
  return names;
}

const AllreducerEntry& find_allreducer(const std::string& name) {
  for (const auto& e : entries())
    if (name == e.name) return e;
  throw ConfigError("unknown allreduce algorithm '" + name + "' (known: " + known_names() + ")");
}

std::unique_ptr<Allreducer> make_allreducer(const std::string& name,
                                            const AllreduceOptions& options) {
  return find_allreducer(name).make(options);
}

AllreducerRegistration::AllreducerRegistration(const AllreducerEntry& entry) : name_(entry.name) {
  for (const auto& e : entries())
    if (name_ == e.name)
      throw ConfigError("allreduce algorithm '" + name_ + "' is registered already");
  entries().push_back(entry);
}

AllreducerRegistration::~AllreducerRegistration() {
  auto& all = entries();
  all.erase(std::remove_if(all.begin(), all.end(),
                           [&](const AllreducerEntry& e) { return name_ == e.name; }),
            all.end());
}

}  // namespace psar
