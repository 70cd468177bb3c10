#pragma once
// hierarchical — Horovod's hierarchical allreduce (and the shape of NCCL's
// inter-node algorithms): the ranks of one node first reduce-scatter inside
// the node, then every local rank j allreduces its slice j with the local
// rank j of every other node, then each node all-gathers. Only 1/L of the
// vector crosses the network per rank, over M-way rings instead of one N-way
// ring. The schedule and its cost are in hierarchical.cc; this header lets
// tests read the bytes each level moved.

#include <memory>

#include "allreduce/allreducer.h"
#include "allreduce/collectives.h"
#include "allreduce/ring_pipeline.h"

namespace psar {

// Bytes and messages of the last allreduce() of this rank, per level.
struct HierarchyCounters {
  CommCounters intra;  // inside the node (reduce-scatter + all-gather)
  CommCounters inter;  // between nodes (the slice's ring allreduce)
};

class HierarchicalAllreducer final : public Allreducer {
 public:
  explicit HierarchicalAllreducer(const AllreduceOptions& options);
  std::string name() const override { return "hierarchical"; }
  void allreduce(Comm& comm, std::span<float> data) override;

  const HierarchyCounters& last_call() const { return last_; }
  // After plan(): ranks per node (0 when the nodes differ in size and the
  // flat ring runs instead) and the number of nodes.
  int node_size() const { return local_size_; }
  int nodes() const { return node_count_; }

 private:
  // Finds the nodes of `comm` (its nodes(), else the hostnames) and splits
  // off the node's and the slice's communicators; once per communicator.
  void plan(Comm& comm);

  AllreduceOptions options_;
  const Comm* planned_for_ = nullptr;
  int planned_rank_ = -1, planned_size_ = 0;
  int local_size_ = 0, node_count_ = 0;
  std::unique_ptr<Comm> intra_, inter_;  // this rank's node; local rank j of every node
  RingReduceScatter reduce_scatter_;
  RingAllGather all_gather_;
  RingPipeline slice_ring_, flat_ring_;
  HierarchyCounters last_;
};

}  // namespace psar
