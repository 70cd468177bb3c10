#include "comm/netem.h"

#include <sched.h>

#include <algorithm>
#include <chrono>
#include <thread>
#include <vector>

#include "comm/comm.h"
#include "core/config.h"
#include "core/errors.h"
#include "core/timer.h"
#include "core/units.h"

namespace psar {

std::string NetModel::describe() const {
  if (!enabled()) return "off";
  std::string s = format_bandwidth(bandwidth) + ", " + format_duration(latency);
  if (node_size > 0)
    s += "; nodes of " + std::to_string(node_size) + ", inside " +
         (intra_bandwidth > 0 ? format_bandwidth(intra_bandwidth) : std::string("unlimited")) +
         ", " + format_duration(intra_latency);
  return s;
}

NetModel net_model_from_config(const Config& config) {
  NetModel m;
  if (config.has("net.bandwidth")) m.bandwidth = config.get_bandwidth("net.bandwidth");
  m.latency = config.get_duration("net.latency");
  const int64_t k = config.get_int("net.node_size");
  if (k < 0) throw ConfigError("net.node_size: must be >= 0 (0: one level), got " + std::to_string(k));
  m.node_size = static_cast<int>(k);
  if (config.has("net.intra_bandwidth"))
    m.intra_bandwidth = config.get_bandwidth("net.intra_bandwidth");
  m.intra_latency = config.get_duration("net.intra_latency");
  if (m.node_size == 0 && (m.intra_bandwidth > 0 || m.intra_latency > 0))
    throw ConfigError("net.intra_bandwidth / net.intra_latency: need net.node_size (ranks per node)");
  return m;
}

NetModel apply_network_model(Comm& comm, const Config& config) {
  const NetModel m = net_model_from_config(config);
  apply_network_model(comm, m);
  return m;
}

void apply_network_model(Comm& comm, const NetModel& m) {
  if (m.node_size > 0) {
    std::vector<int> nodes;
    for (int r = 0; r < comm.size(); ++r) nodes.push_back(r / m.node_size);
    comm.set_nodes(std::move(nodes));
  }
  if (!m.enabled()) {
    comm.set_network(nullptr);
    return;
  }
  if (m.node_size == 0) {
    comm.set_network(std::make_shared<Nic>(m));
    return;
  }
  // The node's NIC: this rank's own when it is alone on its node.
  const int node = comm.rank() / m.node_size;
  const int ranks_on_node = std::min(m.node_size, comm.size() - node * m.node_size);
  const NetModel nic_model{m.bandwidth, m.latency};
  std::shared_ptr<Nic> nic =
      ranks_on_node == 1 ? std::make_shared<Nic>(nic_model) : comm.shared_nic(node, nic_model);
  if (!nic)
    throw ConfigError("net.node_size = " + std::to_string(m.node_size) +
                      ": the ranks of a node share one emulated NIC, which needs them in one "
                      "process; the " + comm.transport() +
                      " transport runs each rank on its own (use net.node_size 1 there, or "
                      "real hosts: scripts/cluster.sh)");
  comm.set_network(std::move(nic), std::make_shared<Nic>(m.inside()));
}

double Nic::depart(size_t bytes, double now) {
  std::lock_guard<std::mutex> lock(mu_);
  const double start = std::max(now, egress_free_);
  if (model_.bandwidth > 0) egress_free_ = start + static_cast<double>(bytes) / model_.bandwidth;
  else egress_free_ = start;
  return egress_free_;
}

double Nic::egress_free() {
  std::lock_guard<std::mutex> lock(mu_);
  return egress_free_;
}

double Nic::arrive(size_t bytes, double egress_end) {
  std::lock_guard<std::mutex> lock(mu_);
  const double transfer =
      model_.bandwidth > 0 ? static_cast<double>(bytes) / model_.bandwidth : 0.0;
  const double earliest = egress_end + model_.latency;
  if (transfer <= 0) return earliest;  // nothing occupies the ingress
  // First fit: the earliest window [start, start + transfer] with start ≥
  // earliest − transfer that overlaps no busy interval.
  double start = std::max(earliest - transfer, ingress_floor_);
  auto it = ingress_busy_.upper_bound(start);
  if (it != ingress_busy_.begin() && std::prev(it)->second > start) --it;
  for (; it != ingress_busy_.end() && it->first < start + transfer; ++it)
    start = std::max(start, it->second);
  const double end = start + transfer;
  // Insert [start, end], merging with neighbours that touch it.
  double lo = start, hi = end;
  auto next = ingress_busy_.lower_bound(start);
  if (next != ingress_busy_.begin()) {
    auto before = std::prev(next);
    if (before->second >= lo) {
      lo = before->first;
      hi = std::max(hi, before->second);
      next = ingress_busy_.erase(before);
    }
  }
  while (next != ingress_busy_.end() && next->first <= hi) {
    hi = std::max(hi, next->second);
    next = ingress_busy_.erase(next);
  }
  ingress_busy_.emplace(lo, hi);
  // Keep the history bounded: forgetting the oldest interval, count all time
  // before its end as taken, so a receive completed thousands of gaps late
  // lands after it instead of in time that was busy.
  constexpr size_t kMaxIntervals = 4096;
  while (ingress_busy_.size() > kMaxIntervals) {
    ingress_floor_ = std::max(ingress_floor_, ingress_busy_.begin()->second);
    ingress_busy_.erase(ingress_busy_.begin());
  }
  return end;
}

void wait_until(double when) {
  constexpr double kSpin = 200e-6;  // below this, sleeping overshoots too much
  for (;;) {
    const double left = when - now_seconds();
    if (left <= 0) return;
    if (left > kSpin) std::this_thread::sleep_for(std::chrono::duration<double>(left - kSpin / 2));
    else sched_yield();
  }
}

}  // namespace psar
