// hierarchical — Horovod's hierarchical allreduce. N ranks on M nodes of L
// ranks each (N = M·L); local rank j of node k. Three phases, each a piece
// of the ring schedule (allreduce/ring_pipeline.h) on a sub-communicator:
//   1. inside each node, a ring reduce-scatter (L-1 steps): local rank j
//      holds the node's sum of slice j of Partition{count, L};
//   2. across nodes, local rank j of every node runs a ring allreduce of
//      slice j (2(M-1) steps, M ranks): it holds the global sum of slice j;
//   3. inside each node, a ring all-gather (L-1 steps) of the slices.
// Cost, n bytes, α/β inside a node (α_i, β_i) and between nodes (α, β):
//   2(L-1)α_i + 2(M-1)α + 2(L-1)/L·nβ_i + 2(M-1)/(M·L)·nβ + (N-1)/N·nγ.
// Bytes each rank sends, exactly (P_L = Partition{count, L}, c_j = P_L.size(j),
// P_M = Partition{c_j, M}, 4-byte floats):
//   inside the node   4·(2·count − c_j − c_{(j+1) mod L})
//   between nodes     4·(2·c_j − P_M.size(k) − P_M.size((k+1) mod M))   (0 when M = 1)
// So only n/L per rank crosses the node boundary, over M-way rings: the
// latency term grows with M, not N, and a node's NIC carries 2(M-1)/M·n in
// all, the same as one rank of a flat ring. Every slice is summed by one
// ring and copied everywhere else, so all ranks hold identical bits.
// Nodes come from Comm::nodes() (net.node_size, or a test), else from the
// hostnames, exchanged once over the control plane. Nodes of unequal size
// (as Horovod, this schedule needs L ranks on every node) fall back to the
// flat ring over all N ranks. Any count ≥ 0.

#include "allreduce/hierarchical.h"

#include <unistd.h>

#include <algorithm>
#include <map>

#include "allreduce/algorithms.h"
#include "allreduce/partition.h"
#include "allreduce/steps.h"
#include "allreduce/tags.h"
#include "core/errors.h"

namespace psar {

namespace {

// This rank's node label and every rank's, in rank order.
std::vector<std::string> node_labels(Comm& comm) {
  std::string mine;
  if (!comm.nodes().empty()) {
    mine = "node " + std::to_string(comm.nodes()[static_cast<size_t>(comm.rank())]);
  } else {
    char host[256] = {};
    gethostname(host, sizeof host - 1);
    mine = std::string("host ") + host;
  }
  std::vector<std::string> labels;
  for (const auto& v : comm.allgather_bytes(std::as_bytes(std::span<const char>(mine))))
    labels.emplace_back(reinterpret_cast<const char*>(v.data()), v.size());
  return labels;
}

CommCounters minus(CommCounters a, const CommCounters& b) {
  a.bytes_sent -= b.bytes_sent;
  a.bytes_recv -= b.bytes_recv;
  a.messages_sent -= b.messages_sent;
  a.messages_recv -= b.messages_recv;
  return a;
}

}  // namespace

HierarchicalAllreducer::HierarchicalAllreducer(const AllreduceOptions& options)
    : options_(options),
      reduce_scatter_(CollectiveOptions{options.segment_bytes}),
      all_gather_(CollectiveOptions{options.segment_bytes}) {}

void HierarchicalAllreducer::plan(Comm& comm) {
  if (planned_for_ == &comm && planned_rank_ == comm.rank() && planned_size_ == comm.size())
    return;
  const std::vector<std::string> labels = node_labels(comm);
  std::map<std::string, int> index;  // label -> node, in order of first appearance
  std::vector<int> node(labels.size()), local(labels.size()), members;
  for (size_t r = 0; r < labels.size(); ++r) {
    const auto [it, fresh] = index.emplace(labels[r], static_cast<int>(index.size()));
    if (fresh) members.push_back(0);
    node[r] = it->second;
    local[r] = members[static_cast<size_t>(node[r])]++;
  }
  node_count_ = static_cast<int>(members.size());
  const bool even = std::all_of(members.begin(), members.end(),
                                [&](int m) { return m == members.front(); });
  local_size_ = even ? members.front() : 0;
  const size_t me = static_cast<size_t>(comm.rank());
  if (even) {
    intra_ = comm.split(node[me], comm.rank());
    inter_ = comm.split(local[me], node[me]);
  } else {
    intra_.reset();
    inter_.reset();
  }
  planned_for_ = &comm;
  planned_rank_ = comm.rank();
  planned_size_ = comm.size();
}

void HierarchicalAllreducer::allreduce(Comm& comm, std::span<float> data) {
  Comm::OpScope op(comm, "hierarchical allreduce");
  plan(comm);
  last_ = {};
  if (!intra_) {  // nodes of unequal size: the flat ring
    const CommCounters before = comm.counters();
    flat_ring_.plan(comm, static_cast<int64_t>(data.size()), options_.segment_bytes);
    flat_ring_.run(comm, data, 0, 2 * (comm.size() - 1), allreduce_tags::kHierarchical);
    last_.inter = minus(comm.counters(), before);
    return;
  }
  Comm& intra = *intra_;
  Comm& inter = *inter_;
  for (Comm* c : {&intra, &inter}) {
    c->set_timeout(comm.timeout());
    c->reset_counters();
  }
  // Errors on the sub-communicators name their own ranks: say whose they are.
  const std::string who = " (rank " + std::to_string(comm.rank()) + " of the whole)";
  Comm::OpScope in_node(intra, "hierarchical allreduce: inside node " +
                                   std::to_string(inter.rank()) + who);
  Comm::OpScope across(inter, "hierarchical allreduce: between nodes, slice " +
                                  std::to_string(intra.rank()) + who);
  // 1. The node's sum of slice j lands on local rank j.
  reduce_scatter_.reduce_scatter(intra, data);
  // 2. Slice j summed over the nodes.
  const Partition slices{static_cast<int64_t>(data.size()), intra.size()};
  const std::span<float> slice = data.subspan(static_cast<size_t>(slices.offset(intra.rank())),
                                              static_cast<size_t>(slices.size(intra.rank())));
  slice_ring_.plan(inter, static_cast<int64_t>(slice.size()), options_.segment_bytes);
  slice_ring_.run(inter, slice, 0, 2 * (inter.size() - 1), allreduce_tags::kHierarchical);
  // 3. Every slice to every rank of the node.
  all_gather_.all_gather(intra, data);
  last_ = {intra.counters(), inter.counters()};
  comm.add_counters(last_.intra);
  comm.add_counters(last_.inter);
}

std::unique_ptr<Allreducer> make_hierarchical_allreducer(const AllreduceOptions& options) {
  if (options.segment_bytes <= 0)
    throw ConfigError("hierarchical allreduce: segment size must be positive, got " +
                      std::to_string(options.segment_bytes));
  return std::make_unique<HierarchicalAllreducer>(options);
}

StepList hierarchical_steps(int nodes, int per_node, int64_t count) {
  PSAR_CHECK(nodes >= 1 && per_node >= 1, "hierarchical_steps: ", nodes, " nodes of ", per_node);
  const int L = per_node, M = nodes;
  StepList out{.algorithm = "hierarchical", .ranks = M * L, .count = count, .rounds = {}};
  // Copies `part`'s rounds from round `first` on, its ranks through rank_of
  // and its offsets shifted by `shift`; returns the rounds it took.
  auto merge = [&](const StepList& part, int first, auto rank_of, int64_t shift) {
    for (size_t k = 0; k < part.rounds.size(); ++k)
      for (StepMessage m : part.rounds[k].messages) {
        m.src = rank_of(m.src);
        m.dst = rank_of(m.dst);
        m.offset += shift;
        out.add(first + static_cast<int>(k), m);
      }
    return static_cast<int>(part.rounds.size());
  };
  int round = 0, took = 0;
  if (L > 1) {  // 1. reduce-scatter inside every node
    const StepList rs = ring_reduce_scatter_steps(L, count);
    for (int k = 0; k < M; ++k) took = merge(rs, round, [&](int j) { return k * L + j; }, 0);
    round += took;
  }
  if (M > 1) {  // 2. local rank j of every node: ring allreduce of slice j
    const Partition slices{count, L};
    took = 0;
    for (int j = 0; j < L; ++j) {
      const StepList ring = ring_steps(M, slices.size(j), AllreduceOptions{});
      took = std::max(took, merge(ring, round, [&](int k) { return k * L + j; },
                                  slices.offset(j)));
    }
    round += took;
  }
  if (L > 1) {  // 3. all-gather inside every node
    const StepList ag = ring_all_gather_steps(L, count);
    for (int k = 0; k < M; ++k) merge(ag, round, [&](int j) { return k * L + j; }, 0);
  }
  return out;
}

}  // namespace psar
