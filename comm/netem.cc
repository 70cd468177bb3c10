#include "comm/netem.h"

#include <sched.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "comm/comm.h"
#include "core/config.h"
#include "core/timer.h"
#include "core/units.h"

namespace psar {

std::string NetModel::describe() const {
  if (!enabled()) return "off";
  return format_bandwidth(bandwidth) + ", " + format_duration(latency);
}

NetModel net_model_from_config(const Config& config) {
  NetModel m;
  if (config.has("net.bandwidth")) m.bandwidth = config.get_bandwidth("net.bandwidth");
  m.latency = config.get_duration("net.latency");
  return m;
}

NetModel apply_network_model(Comm& comm, const Config& config) {
  const NetModel m = net_model_from_config(config);
  comm.set_network(m.enabled() ? std::make_shared<Nic>(m) : nullptr);
  return m;
}

double Nic::depart(size_t bytes, double now) {
  std::lock_guard<std::mutex> lock(mu_);
  const double start = std::max(now, egress_free_);
  egress_free_ = start + static_cast<double>(bytes) / model_.bandwidth;
  return egress_free_;
}

double Nic::arrive(size_t bytes, double egress_end) {
  std::lock_guard<std::mutex> lock(mu_);
  const double transfer = static_cast<double>(bytes) / model_.bandwidth;
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
