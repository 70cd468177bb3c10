#pragma once
// Network emulation: one NIC per rank (and per parameter-server shard) with
// egress and ingress capacity B bytes/s and per-message latency L, so one host
// behaves like a cluster whose links, not its two cores, are the bottleneck.
//
// A message of n bytes posted at time t:
//   egress   s = max(t, egress_free);  e = s + n/B;  egress_free = e
//            (the send completes at e)
//   delivery D = the earliest time ≥ e + L such that the receiver's ingress
//            is idle during [D − n/B, D]; that interval is then marked busy
//            (the receive completes at D: the message occupied the receiver's
//             ingress for n/B, serialized with everything else arriving there)
// so a lone message takes n/B + L, and N messages into one NIC take N·n/B.
// The ingress keeps its busy intervals, so a message the application
// completes late still takes the idle slot it arrived in: delivery follows
// arrival order, as on a real NIC, not the order the receives are completed
// (for receives completed in arrival order this is max(e + L, ingress_free +
// n/B)). The sender's e travels with the message; every rank on one host
// shares the monotonic clock, so the receiver can compute D. Limits
// (docs/network.md): no switch contention, one NIC per rank, host jitter.
//
// Two levels (node_size = k > 0): ranks r with the same r / k form a node.
// Messages between nodes leave through the sender node's NIC and enter
// through the receiver node's, each of capacity B and latency L as above,
// shared by the node's k ranks (so k ranks sending out of one node serialize
// on its egress); messages inside a node pass through the two ranks' own
// links of capacity B_i (intra_bandwidth; unset = not limited) and latency
// L_i, the same model one level down. The node's NIC is one object that its
// ranks share: where they are threads of one process (the in-process
// transport) a plain object, where they are processes of one host (mpirun)
// its state lives in POSIX shared memory that the node's ranks map (a node's
// ranks on different hosts are a ConfigError: use real hosts,
// scripts/cluster.sh, for the outer level).

#include <memory>
#include <string>

namespace psar {

class Config;

struct NetModel {
  double bandwidth = 0;  // bytes per second; 0 = emulation off
  double latency = 0;    // seconds per message
  // Two levels: ranks per node (0 = one level: a NIC per rank).
  int node_size = 0;
  double intra_bandwidth = 0;  // bytes per second inside a node; 0 = not limited
  double intra_latency = 0;    // seconds per message inside a node
  bool enabled() const { return bandwidth > 0; }
  // "1Gbit, 50us", "off", "1Gbit, 50us; nodes of 4, inside 10Gbit, 5us"
  std::string describe() const;
  // The links inside a node, as a model of their own.
  NetModel inside() const { return NetModel{intra_bandwidth, intra_latency}; }
};

// From `net.bandwidth`, `net.latency`, `net.node_size`, `net.intra_bandwidth`
// and `net.intra_latency` (off when net.bandwidth is unset).
NetModel net_model_from_config(const Config& config);

// The model of world rank `rank`: net_model_from_config, with the bandwidth
// of hetero.nic_bandwidth where hetero.nic_ranks names the rank (a worker's
// or a PS server's NIC: egress and ingress both, one-level networks only).
// A ConfigError names a rank outside [0, world_size) and a key without its
// partner.
NetModel net_model_of_rank(const Config& config, int rank, int world_size);

class Comm;
// Gives `comm` (and whatever is split from it later) an emulated NIC when the
// config enables one (net_model_of_rank for comm's rank); returns the model
// in force. With net.node_size it also sets the nodes (Comm::set_nodes:
// rank / node_size), with or without emulation, and under emulation the two
// levels.
NetModel apply_network_model(Comm& comm, const Config& config);
// The same from a model: every rank of `comm` calls it (the world's ranks
// of a node then share their NIC).
void apply_network_model(Comm& comm, const NetModel& model);

class Nic {
 public:
  // Egress and ingress state, plain data with a lock-free lock, so that it
  // can live in memory that several processes map (netem.cc).
  struct State;
  explicit Nic(NetModel model);
  // A NIC whose state is `shared` (constructed by the caller), kept mapped
  // by `mapping` while this NIC lives.
  Nic(NetModel model, State* shared, std::shared_ptr<void> mapping);
  ~Nic();
  Nic(const Nic&) = delete;
  Nic& operator=(const Nic&) = delete;
  const NetModel& model() const { return model_; }
  // A bandwidth of 0 transfers in no time (only the latency counts).
  // Egress: when a message of `bytes` posted at `now` has left this NIC.
  double depart(size_t bytes, double now);
  // Ingress: when a message of `bytes` that left its sender at `egress_end`
  // is delivered here.
  double arrive(size_t bytes, double egress_end);
  // When every message posted so far has left this NIC.
  double egress_free();

 private:
  NetModel model_;
  std::unique_ptr<State> own_;    // a NIC of this process alone
  std::shared_ptr<void> mapping_;  // or a node's, in shared memory
  State* state_;
};

// The NIC of this rank's node (ranks r / node_size) for ranks that are
// processes on one host: rank 0 names one POSIX shared-memory segment per
// node of several ranks, the node's first rank creates it, the others map
// it, and it is unlinked once all have (nothing is left behind when the job
// ends). Collective over `comm`. A rank alone on its node gets a NIC of its
// own; a node whose ranks run on different hosts is a ConfigError.
std::shared_ptr<Nic> node_nic_in_shared_memory(Comm& comm, int node_size, const NetModel& model);

// Blocks until the shared monotonic clock reads `when`: sleeps for the bulk,
// then yields (never hogs a core that another rank may need).
void wait_until(double when);

}  // namespace psar
