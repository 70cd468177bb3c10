#pragma once
// A communicator that forwards every point-to-point call to another one (the
// in-process transport), for tests that watch or break the traffic: on_post
// runs as each send or receive is posted, on_received once a receive has
// completed (on the receiving rank's thread). It cannot split and emulates
// no network.

#include <memory>
#include <span>
#include <string>
#include <utility>

#include "comm/comm.h"
#include "core/errors.h"

namespace psar::testing {

class ForwardingComm : public Comm {
 public:
  explicit ForwardingComm(Comm& inner) : Comm(inner.rank(), inner.size()), inner_(inner) {
    set_timeout(inner.timeout());
  }
  std::string transport() const override { return inner_.transport(); }
  std::unique_ptr<Comm> split(int, int) override { throw CommError("a ForwardingComm cannot split"); }

 protected:
  enum class Post { kSend, kRecv };
  virtual void on_post(Post, int /*peer*/) {}
  virtual void on_received(int /*peer*/) {}
  Comm& inner() { return inner_; }

  std::unique_ptr<RequestImpl> post_send(int peer, std::span<const std::byte> data, int tag,
                                         double /*stamp: no network emulation here*/) final {
    on_post(Post::kSend, peer);
    return std::make_unique<Forwarded>(inner_.isend(peer, data, tag), nullptr, peer);
  }
  std::unique_ptr<RequestImpl> post_recv(int peer, std::span<std::byte> data, int tag) final {
    on_post(Post::kRecv, peer);
    return std::make_unique<Forwarded>(inner_.irecv(peer, data, tag), this, peer);
  }

 private:
  class Forwarded final : public RequestImpl {
   public:
    // receiver: told once the receive from `peer` completes (null: a send).
    Forwarded(Request r, ForwardingComm* receiver, int peer)
        : r_(std::move(r)), receiver_(receiver), peer_(peer) {}
    bool test() override {
      if (!r_.test()) return false;
      if (receiver_) std::exchange(receiver_, nullptr)->on_received(peer_);
      return true;
    }
    std::string describe() const override { return "forwarded request"; }

   private:
    Request r_;
    ForwardingComm* receiver_;
    int peer_;
  };

  Comm& inner_;
};

}  // namespace psar::testing
