#pragma once
// The modelled cluster of `psar simulate` (docs/simulate.md): nodes of
// gpus_per_node GPUs; inside a node every GPU has one link to a switch
// (NVSwitch: intra.bandwidth each way), between nodes every node has
// nics_per_node NICs of inter.bandwidth each way, GPU i of a node using NIC
// ⌊i·nics/gpus⌋ (DGX: GPU i ↔ NIC i). Hosts beyond the GPUs (dedicated
// parameter-server shards) each have one NIC of inter.bandwidth.
//
// Links are one-way: a message from GPU a to GPU b crosses a's egress and
// b's ingress — the GPUs' switch links if both sit on one node, the two
// NICs otherwise — and pays that path's latency once. Contention: flows that
// share a link in the same round share its bandwidth equally
// (sim/collective.h).

#include <cstdint>
#include <utility>
#include <vector>

#include "core/config.h"
#include "sim/gemm_table.h"

namespace psar::sim {

// A link type's bandwidth, latency and bus efficiency: the share of
// `bandwidth` a collective of S bytes (the whole vector, as nccl-tests
// counts a collective's size) reaches once its per-message latency is taken
// out, as (S, share) points ascending in S, interpolated linearly in log S
// and held flat beyond the first and last point (link_efficiency). Empty:
// the ideal link, share 1 at every size.
struct LinkSpec {
  double bandwidth = 0;  // bytes/s, each way
  double latency = 0;    // s per message
  std::vector<std::pair<double, double>> efficiency;
};

// The share of `link.bandwidth` a collective of `bytes` reaches (above).
double link_efficiency(const LinkSpec& link, double bytes);

struct GpuSpec {
  double peak_flops = 0;       // dense bf16 FLOP/s
  double gemm_efficiency = 1;  // share of peak a layer's FLOPs run at
  double kernel_overhead = 0;  // s per kernel launch (a fixed cost per kernel)
  int64_t memory = 0;          // bytes
  // Wave quantization (sim/gpt_cost.h, gemm_wave_efficiency): a GEMM's
  // output is cut into tiles of one of `tiles` (rows, cols), whichever fills
  // the waves best, and the GPU runs them in waves of `sms` (one tile per
  // streaming multiprocessor); 0 SMs: off.
  int sms = 0;
  // Bytes/s of the GPU's memory, for the memory-bound kernels of a layer
  // (sim/gpt_cost.h, block_memory_bytes); 0: those kernels cost only their
  // launch.
  double memory_bandwidth = 0;
  std::vector<std::pair<int, int>> tiles = {{128, 256}, {256, 128}, {128, 128}};
  // The GPU model's measured GEMM rates (cluster.gpu.gemm_table; one of the
  // built-in tables, sim/gemm_table.h): when set, a GEMM's math runs at the
  // table's rate for its layout and shape, in place of peak_flops ·
  // gemm_efficiency · wave quantization (sim/gpt_cost.h, gemm_seconds).
  const GemmTable* gemm_table = nullptr;
};

struct ClusterSpec {
  int nodes = 1;
  int gpus_per_node = 1;
  GpuSpec gpu;
  LinkSpec intra, inter;
  int nics_per_node = 1;
  int gpus() const { return nodes * gpus_per_node; }
};

// From the config's cluster.* keys; ConfigError naming the key for an
// unknown cluster.gpu.gemm_table, a
// non-positive size, bandwidth or peak, an efficiency outside (0, 1], a
// cluster.{intra,inter}.efficiency entry that is not "SIZE:SHARE" with sizes
// ascending and shares in (0, 1], or more NICs than GPUs per node.
ClusterSpec cluster_from_config(const Config& config);

// Endpoints: GPUs 0..gpus()-1 (node = gpu / gpus_per_node), then `hosts`
// extra hosts.
class Network {
 public:
  Network(ClusterSpec spec, int hosts = 0);
  const ClusterSpec& spec() const { return spec_; }
  int endpoints() const { return spec_.gpus() + hosts_; }
  int links() const { return static_cast<int>(bandwidth_.size()); }
  double bandwidth(int link) const { return bandwidth_[static_cast<size_t>(link)]; }
  // The link's bandwidth for a collective of `bytes`: bandwidth(link) times
  // its type's link_efficiency (intra for the GPUs' switch links, inter for
  // the NICs).
  double bandwidth(int link, double bytes) const;

  struct Path {
    int egress = -1, ingress = -1;  // link ids; -1: none (a message to oneself)
    double latency = 0;
  };
  Path path(int src, int dst) const;

 private:
  int node_of(int endpoint) const;
  int nic_of(int endpoint) const;  // the NIC link pair's index
  ClusterSpec spec_;
  int hosts_ = 0;
  std::vector<double> bandwidth_;  // [link]: GPU switch links, then NICs
};

}  // namespace psar::sim
