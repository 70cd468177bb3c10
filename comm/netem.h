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

#include <map>
#include <memory>
#include <mutex>
#include <string>

namespace psar {

class Config;

struct NetModel {
  double bandwidth = 0;  // bytes per second; 0 = emulation off
  double latency = 0;    // seconds per message
  bool enabled() const { return bandwidth > 0; }
  std::string describe() const;  // "1Gbit, 50us" or "off"
};

// From `net.bandwidth` and `net.latency` (off when net.bandwidth is unset).
NetModel net_model_from_config(const Config& config);

class Comm;
// Gives `comm` (and whatever is split from it later) an emulated NIC when the
// config enables one; returns the model in force.
NetModel apply_network_model(Comm& comm, const Config& config);

class Nic {
 public:
  explicit Nic(NetModel model) : model_(model) {}
  const NetModel& model() const { return model_; }
  // Egress: when a message of `bytes` posted at `now` has left this NIC.
  double depart(size_t bytes, double now);
  // Ingress: when a message of `bytes` that left its sender at `egress_end`
  // is delivered here.
  double arrive(size_t bytes, double egress_end);

 private:
  NetModel model_;
  std::mutex mu_;
  double egress_free_ = 0;
  std::map<double, double> ingress_busy_;  // start -> end, disjoint, merged when touching
  double ingress_floor_ = 0;               // before it, all counts as busy (forgotten)
};

// Blocks until the shared monotonic clock reads `when`: sleeps for the bulk,
// then yields (never hogs a core that another rank may need).
void wait_until(double when);

}  // namespace psar
