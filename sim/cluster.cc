#include "sim/cluster.h"

#include <cmath>
#include <string>

#include "core/errors.h"
#include "core/units.h"

namespace psar::sim {

using psar::detail::concat;

namespace {

template <typename T>
T positive(const Config& c, const std::string& key, T value) {
  if (!(value > 0)) throw ConfigError(concat(key, " must be positive, got ", value));
  return value;
}

std::vector<std::pair<double, double>> efficiency_from_config(const Config& c,
                                                              const std::string& key) {
  std::vector<std::pair<double, double>> points;
  if (!c.has(key)) return points;
  for (const std::string& entry : c.get_string_list(key)) {
    const auto colon = entry.find(':');
    if (colon == std::string::npos)
      throw ConfigError(concat(key, ": entry '", entry, "' is not SIZE:SHARE (e.g. 16M:0.54)"));
    double bytes = 0, share = 0;
    try {
      bytes = static_cast<double>(parse_bytes(entry.substr(0, colon)));
      share = std::stod(entry.substr(colon + 1));
    } catch (const std::exception& e) {
      throw ConfigError(concat(key, ": entry '", entry, "': ", e.what()));
    }
    if (!(bytes > 0) || !(share > 0) || share > 1)
      throw ConfigError(concat(key, ": entry '", entry, "' needs a positive size and a share in (0, 1]"));
    if (!points.empty() && bytes <= points.back().first)
      throw ConfigError(concat(key, ": sizes must ascend ('", entry, "')"));
    points.emplace_back(bytes, share);
  }
  return points;
}

}  // namespace

double link_efficiency(const LinkSpec& link, double bytes) {
  const auto& e = link.efficiency;
  if (e.empty()) return 1.0;
  if (bytes <= e.front().first) return e.front().second;
  if (bytes >= e.back().first) return e.back().second;
  size_t k = 1;
  while (e[k].first < bytes) ++k;
  const double x = std::log(bytes / e[k - 1].first) / std::log(e[k].first / e[k - 1].first);
  return e[k - 1].second + x * (e[k].second - e[k - 1].second);
}

ClusterSpec cluster_from_config(const Config& c) {
  ClusterSpec s;
  s.nodes = positive(c, "cluster.nodes", static_cast<int>(c.get_int("cluster.nodes")));
  s.gpus_per_node =
      positive(c, "cluster.gpus_per_node", static_cast<int>(c.get_int("cluster.gpus_per_node")));
  s.gpu.peak_flops = positive(c, "cluster.gpu.peak_flops", c.get_float("cluster.gpu.peak_flops"));
  s.gpu.gemm_efficiency =
      positive(c, "cluster.gpu.gemm_efficiency", c.get_float("cluster.gpu.gemm_efficiency"));
  if (s.gpu.gemm_efficiency > 1)
    throw ConfigError(concat("cluster.gpu.gemm_efficiency must be in (0, 1], got ",
                             s.gpu.gemm_efficiency));
  s.gpu.kernel_overhead = c.get_duration("cluster.gpu.kernel_overhead");
  s.gpu.memory = positive(c, "cluster.gpu.memory", c.get_bytes("cluster.gpu.memory"));
  s.gpu.sms = static_cast<int>(c.get_int("cluster.gpu.sms"));
  if (s.gpu.sms < 0) throw ConfigError(concat("cluster.gpu.sms must be >= 0, got ", s.gpu.sms));
  s.gpu.memory_bandwidth = c.has("cluster.gpu.memory_bandwidth")
                               ? c.get_bandwidth("cluster.gpu.memory_bandwidth") : 0.0;
  if (s.gpu.memory_bandwidth < 0)
    throw ConfigError("cluster.gpu.memory_bandwidth must not be negative");
  const auto tiles = c.get_int_list("cluster.gpu.gemm_tiles");
  if (tiles.empty() || tiles.size() % 2 != 0)
    throw ConfigError(concat("cluster.gpu.gemm_tiles must list (rows, cols) pairs, got ",
                             tiles.size(), " numbers"));
  s.gpu.tiles.clear();
  for (size_t i = 0; i < tiles.size(); i += 2) {
    if (tiles[i] < 1 || tiles[i + 1] < 1)
      throw ConfigError("cluster.gpu.gemm_tiles: tile sizes must be positive");
    s.gpu.tiles.emplace_back(static_cast<int>(tiles[i]), static_cast<int>(tiles[i + 1]));
  }
  if (c.has("cluster.gpu.gemm_table"))
    s.gpu.gemm_table =
        &builtin_gemm_table(c.get_string("cluster.gpu.gemm_table"), "cluster.gpu.gemm_table");
  s.intra.bandwidth =
      positive(c, "cluster.intra.bandwidth", c.get_bandwidth("cluster.intra.bandwidth"));
  s.intra.latency = c.get_duration("cluster.intra.latency");
  s.intra.efficiency = efficiency_from_config(c, "cluster.intra.efficiency");
  s.inter.bandwidth =
      positive(c, "cluster.inter.bandwidth", c.get_bandwidth("cluster.inter.bandwidth"));
  s.inter.latency = c.get_duration("cluster.inter.latency");
  s.inter.efficiency = efficiency_from_config(c, "cluster.inter.efficiency");
  s.nics_per_node = positive(c, "cluster.inter.nics_per_node",
                             static_cast<int>(c.get_int("cluster.inter.nics_per_node")));
  if (s.nics_per_node > s.gpus_per_node)
    throw ConfigError(concat("cluster.inter.nics_per_node = ", s.nics_per_node,
                             " exceeds cluster.gpus_per_node = ", s.gpus_per_node,
                             " (each NIC serves at least one GPU)"));
  return s;
}

Network::Network(ClusterSpec spec, int hosts) : spec_(spec), hosts_(hosts) {
  PSAR_CHECK(spec_.gpus() > 0 && spec_.nics_per_node > 0 && hosts >= 0, "bad cluster shape");
  // [2g, 2g+1]: GPU g's switch egress and ingress; then per NIC the same pair.
  bandwidth_.assign(static_cast<size_t>(2 * spec_.gpus()), spec_.intra.bandwidth);
  const int nics = spec_.nodes * spec_.nics_per_node + hosts_;
  bandwidth_.resize(bandwidth_.size() + static_cast<size_t>(2 * nics), spec_.inter.bandwidth);
}

double Network::bandwidth(int link, double bytes) const {
  const bool intra = link < 2 * spec_.gpus();
  return bandwidth(link) * link_efficiency(intra ? spec_.intra : spec_.inter, bytes);
}

int Network::node_of(int e) const {
  return e < spec_.gpus() ? e / spec_.gpus_per_node : spec_.nodes + (e - spec_.gpus());
}

int Network::nic_of(int e) const {
  if (e >= spec_.gpus()) return spec_.nodes * spec_.nics_per_node + (e - spec_.gpus());
  const int local = e % spec_.gpus_per_node;
  return (e / spec_.gpus_per_node) * spec_.nics_per_node +
         local * spec_.nics_per_node / spec_.gpus_per_node;
}

Network::Path Network::path(int src, int dst) const {
  PSAR_CHECK(0 <= src && src < endpoints() && 0 <= dst && dst < endpoints(), "endpoint ", src,
             " or ", dst, " outside the network of ", endpoints());
  if (src == dst) return {};
  if (node_of(src) == node_of(dst) && src < spec_.gpus())
    return {2 * src, 2 * dst + 1, spec_.intra.latency};
  const int base = 2 * spec_.gpus();
  return {base + 2 * nic_of(src), base + 2 * nic_of(dst) + 1, spec_.inter.latency};
}

}  // namespace psar::sim
