#pragma once
// Messages on the emulated wire (comm/netem.h) at a parameter-server
// endpoint. ZeroMQ may hand over one peer's whole burst before another's,
// but a NIC takes packets in the order they arrive; so a shard (and a
// worker) holds what ZeroMQ hands over and releases it in the order it left
// its sender, each once the wire could have delivered it (egress end +
// latency) and after its slot on this endpoint's ingress. A message handed
// over later than its modelled arrival is delivered late by that much.
// Nothing here sleeps: while a message waits out its ingress slot, its
// holder goes on sending (a worker's paced pushes) and receiving.

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

  // The earliest-sent message once it has arrived: once the wire can have
  // delivered it, it takes its ingress slot (and keeps it, ahead of any
  // message handed over later) and is released at the slot's end. nullopt
  // while none has arrived, with `next` set to when the next may (0:
  // nothing held).
  std::optional<M> release(double& next) {
    next = 0;
    if (!arriving_) {
      if (held_.empty()) return std::nullopt;
      auto first = held_.begin();
      const double sent_at = first->first;
      if (now_seconds() < sent_at + nic_->model().latency) {
        next = sent_at + nic_->model().latency;
        return std::nullopt;
      }
      arriving_.emplace(nic_->arrive(first->second.bytes, sent_at), std::move(first->second.message));
      held_.erase(first);
    }
    if (now_seconds() < arriving_->first) {
      next = arriving_->first;
      return std::nullopt;
    }
    std::optional<M> out(std::move(arriving_->second));
    arriving_.reset();
    return out;
  }

  void clear() {
    held_.clear();
    arriving_.reset();
  }

 private:
  struct Held {
    size_t bytes;
    M message;
  };
  Nic* nic_;
  std::multimap<double, Held> held_;  // by the sender's egress end
  std::optional<std::pair<double, M>> arriving_;  // in its ingress slot, until its end
};

}  // namespace psar::ps
