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
  ingress_free_ = std::max(egress_end + model_.latency, ingress_free_ + transfer);
  return ingress_free_;
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
