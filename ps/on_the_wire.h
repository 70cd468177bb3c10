#pragma once
// Messages on the emulated wire (comm/netem.h) at a parameter-server
// endpoint. ZeroMQ may hand over one peer's whole burst before another's,
// but a NIC takes packets in the order they arrive; so a shard (and a
// worker) holds what ZeroMQ hands over and releases it in the order it left
// its sender, each once the wire could have delivered it (egress end +
// latency) and after its slot on this endpoint's ingress. A message handed
// over later than its modelled arrival is delivered late by that much.

#include <cstddef>
#include <map>
#include <optional>
#include <utility>

#include "comm/netem.h"
#include "core/timer.h"

namespace psar::ps {

template <typename M>
class OnTheWire {
 public:
  explicit OnTheWire(Nic* nic) : nic_(nic) {}

  // `sent_at`: the sender's egress end; `bytes`: what crosses the ingress.
  void hold(double sent_at, size_t bytes, M message) {
    held_.emplace(sent_at, Held{bytes, std::move(message)});
  }

  // The earliest-sent message once it can have arrived, after waiting out its
  // ingress slot; nullopt while none can, with `next` set to when the earliest
  // may arrive (0: nothing held).
  std::optional<M> release(double& next) {
    next = 0;
    if (held_.empty()) return std::nullopt;
    auto first = held_.begin();
    const double sent_at = first->first;
    if (now_seconds() < sent_at + nic_->model().latency) {
      next = sent_at + nic_->model().latency;
      return std::nullopt;
    }
    Held held = std::move(first->second);
    held_.erase(first);
    wait_until(nic_->arrive(held.bytes, sent_at));
    return std::move(held.message);
  }

  void clear() { held_.clear(); }

 private:
  struct Held {
    size_t bytes;
    M message;
  };
  Nic* nic_;
  std::multimap<double, Held> held_;  // by the sender's egress end
};

}  // namespace psar::ps
