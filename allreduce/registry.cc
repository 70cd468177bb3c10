#include "allreduce/allreducer.h"

#include <unistd.h>

#include <algorithm>
#include <iterator>
#include <map>
#include <numeric>
#include <utility>

#include "allreduce/algorithms.h"
#include "allreduce/collectives.h"
#include "allreduce/tags.h"
#include "core/errors.h"

namespace psar {

namespace {
// Adding an algorithm: its own file (the program and the cost form), one
// entry here, one row in docs/algorithms.md. Tests, benchmarks, the
// simulator and `psar cost` read this table; a test fails for an entry
// without its cost form, or whose program's bytes disagree with its form.
const AllreducerEntry kBuiltin[] = {
    {.name = "ring", .summary = "reduce-scatter + all-gather around a ring, pipelined",
     .program = &ring_program, .cost = &ring_cost,
     .reduce_scatter = &ring_reduce_scatter_program, .all_gather = &ring_all_gather_program},
    {.name = "tree", .summary = "binary-tree reduce to rank 0 + broadcast, pipelined",
     .program = &tree_program, .needs_nodes = true, .cost = &tree_cost},
    {.name = "butterfly", .summary = "recursive doubling: log2 N full-vector swaps",
     .program = &butterfly_program, .needs_nodes = true, .cost = &butterfly_cost},
    {.name = "halving_doubling",
     .summary = "Rabenseifner: recursive-halving reduce-scatter + recursive-doubling all-gather",
     .program = &halving_doubling_program, .needs_nodes = true,
     .cost = &halving_doubling_cost,
     .reduce_scatter = &halving_doubling_reduce_scatter_program,
     .all_gather = &halving_doubling_all_gather_program},
    {.name = "naive", .summary = "all-to-all: every rank sends its vector to every other",
     .program = &naive_program, .needs_nodes = true, .cost = &naive_cost},
    // On one node — all the registry's uniform α-β model sees — it is the
    // ring; its two-level form is in hierarchical.cc.
    {.name = "hierarchical",
     .summary = "reduce-scatter inside each node, ring allreduce of each slice across nodes, all-gather",
     .program = &hierarchical_program, .needs_nodes = true, .cost = &ring_cost,
     .reduce_scatter = &hierarchical_reduce_scatter_program,
     .all_gather = &hierarchical_all_gather_program},
    // Open MPI picks its own schedule; its times are fitted to the ring's
    // form, and the simulator times it as the ring.
    {.name = "mpi", .summary = "MPI_Allreduce of the MPI library (the measured peer)",
     .make = &make_mpi_allreducer, .needs_mpi = true, .cost = &ring_cost, .timed_as = "ring",
     .make_sharded = &make_mpi_sharded},
    // NCCL's ring on one node: the ring's form.
    {.name = "nccl",
     .summary = "ncclAllReduce on the GPU (device data in place; host buffers copied in and out)",
     .make = &make_nccl_allreducer, .device = true, .cost = &ring_cost, .timed_as = "ring",
     .make_sharded = &make_nccl_sharded},
};

}  // namespace

std::vector<int> node_map(Comm& comm) {
  if (!comm.nodes().empty()) return comm.nodes();
  // A one-level emulated network gives every rank a NIC of its own
  // (comm/netem.h): each rank stands for a host.
  if (comm.network() != nullptr) {
    std::vector<int> node(static_cast<size_t>(comm.size()));
    std::iota(node.begin(), node.end(), 0);
    return node;
  }
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  const std::string mine(host);
  std::map<std::string, int> index;  // hostname -> node, in order of first appearance
  std::vector<int> node;
  for (const auto& v : comm.allgather_bytes(std::as_bytes(std::span<const char>(mine))))
    node.push_back(index.emplace(std::string(reinterpret_cast<const char*>(v.data()), v.size()),
                                 static_cast<int>(index.size()))
                       .first->second);
  return node;
}

NodeMapCache::NodeMapCache(const AllreducerEntry& entry, std::string operation)
    : needed_(entry.needs_nodes), operation_(std::move(operation)) {}

const std::vector<int>& NodeMapCache::get(Comm& comm) {
  if (needed_ && found_for_ != &comm) {
    Comm::OpScope op(comm, operation_ + ": finding the nodes");
    node_ = node_map(comm);
    found_for_ = &comm;
  }
  return node_;
}

CollectiveOptions collective_options(const AllreduceOptions& options) {
  return {.segment_bytes = options.segment_bytes, .dtype = options.dtype,
          .accumulate_in_dtype = options.accumulate_in_dtype};
}

namespace {
// A program algorithm: its program, planned once per (ranks, count), run by
// the engine.
class ProgramAllreducer final : public Allreducer {
 public:
  ProgramAllreducer(const AllreducerEntry& entry, const AllreduceOptions& options)
      : name_(entry.name), nodes_(entry, name_ + " allreduce"),
        run_(entry.program, collective_options(options), allreduce_tags::kAllreduce) {}
  std::string name() const override { return name_; }

  void allreduce(Comm& comm, std::span<float> data) override {
    run_.run(comm, data, 0, nodes_.get(comm));
  }

 private:
  std::string name_;
  NodeMapCache nodes_;
  ProgramCollective run_;
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

int64_t nccl_bytes_per_rank(int ranks, int64_t count, int element) {
  if (ranks <= 1) return 0;
  const int64_t bytes = element * count;
  // 2(N−1)/N·n, exact in 128-bit arithmetic before rounding down.
  return static_cast<int64_t>(static_cast<__int128>(2 * (ranks - 1)) * bytes / ranks);
}

AllreduceOptions allreduce_options(const Config& config) {
  AllreduceOptions options;
  options.segment_bytes = config.get_bytes("sync.segment_bytes");
  if (options.segment_bytes < 1) throw ConfigError("sync.segment_bytes must be positive");
  options.dtype = parse_element_type(config.get_string("sync.dtype"), "sync.dtype");
  options.accumulate_in_dtype = config.get_string("sync.accumulate") == "dtype";
  options.nccl_algo = config.get_string("sync.nccl_algo");
  options.nccl_proto = config.get_string("sync.nccl_proto");
  return options;
}

AllreduceOptions activation_allreduce_options(AllreduceOptions options) {
  options.dtype = ElementType::kFp32;
  options.accumulate_in_dtype = false;
  return options;
}

Program AllreducerEntry::program_for(int ranks, int64_t count, const AllreduceOptions& options,
                                     const std::vector<int>& node) const {
  if (!program)
    throw ConfigError(std::string("allreduce algorithm '") + name +
                      "' is a library's and has no program of psar's to count or simulate");
  return program({.ranks = ranks, .count = count, .segment_bytes = options.segment_bytes,
                  .dtype = options.dtype, .root = 0, .node = node});
}

int64_t AllreducerEntry::sent_bytes_total(int ranks, int64_t count,
                                          const AllreduceOptions& options) const {
  return program_for(ranks, count, options).sent_elements_total() * element_size(options.dtype);
}

int64_t AllreducerEntry::sent_bytes_busiest(int ranks, int64_t count,
                                            const AllreduceOptions& options) const {
  const Program p = program_for(ranks, count, options);
  int64_t busiest = 0;
  for (int r = 0; r < ranks; ++r) busiest = std::max(busiest, p.sent_bytes(r, options.dtype));
  return busiest;
}

std::span<const AllreducerEntry> allreducer_registry() { return entries(); }

std::vector<std::string> allreducer_names(bool include_device) {
  std::vector<std::string> names;
  for (const auto& e : entries())
    if (include_device || !e.device) names.push_back(e.name);
  return names;
}

std::vector<std::string> bench_allreduce_default_algos() { return allreducer_names(); }

const AllreducerEntry& find_allreducer(const std::string& name) {
  for (const auto& e : entries())
    if (name == e.name) return e;
  throw ConfigError("unknown allreduce algorithm '" + name + "' (known: " + known_names() + ")");
}

std::unique_ptr<Allreducer> make_allreducer(const std::string& name,
                                            const AllreduceOptions& options) {
  const AllreducerEntry& e = find_allreducer(name);
  if (options.segment_bytes <= 0)
    throw ConfigError(name + " allreduce: segment size must be positive, got " +
                      std::to_string(options.segment_bytes));
  if (!e.program) return e.make(options);
  return std::make_unique<ProgramAllreducer>(e, options);
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
