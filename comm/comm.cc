#include "comm/comm.h"

#include "comm/netem.h"

#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

#include "core/errors.h"
#include "core/log.h"
#include "core/timer.h"

namespace psar {

namespace {
constexpr int kTagBarrier = Comm::kReservedTagBase + 1;
constexpr int kTagGatherSize = Comm::kReservedTagBase + 2;
constexpr int kTagGatherData = Comm::kReservedTagBase + 3;
constexpr int kTagBcast = Comm::kReservedTagBase + 4;
}  // namespace

bool RequestImpl::wait_for(double seconds) {
  const double deadline = now_seconds() + seconds;
  for (;;) {
    if (test()) return true;
    if (now_seconds() >= deadline) return false;
    sched_yield();  // ranks may outnumber cores: never hog one
  }
}

// ---- Request ---------------------------------------------------------------------

Request::Request(Comm* comm, std::unique_ptr<RequestImpl> impl)
    : comm_(comm), impl_(std::move(impl)) {}

Request::Request(Comm* comm, std::unique_ptr<RequestImpl> impl, double ready_at, Nic* nic,
                 size_t recv_bytes)
    : comm_(comm), impl_(std::move(impl)), ready_at_(ready_at), recv_nic_(nic),
      recv_bytes_(recv_bytes) {}

Request::~Request() = default;

void Request::transport_done() {
  if (recv_nic_) ready_at_ = recv_nic_->arrive(recv_bytes_, impl_->stamp());
  impl_.reset();
}

// Transports name the peer in their errors; the operation in progress is
// added here, so an error inside a collective reads "rank 1: ring allreduce: …".
bool Request::test() {
  if (impl_) {
    bool done = false;
    try {
      done = impl_->test();
    } catch (const TimeoutError&) {
      throw;
    } catch (const CommError& e) {
      throw CommError(comm_->context(e.what()));
    }
    if (!done) return false;
    transport_done();
  }
  // Network emulation: not before the modelled completion time.
  return ready_at_ <= 0 || now_seconds() >= ready_at_;
}

void Request::wait() {
  if (impl_) {
    const double timeout = comm_->timeout();
    bool done = false;
    try {
      if (const double nap = comm_->poll_sleep(); nap > 0) {
        const double deadline = now_seconds() + timeout;
        while (!(done = impl_->test()) && now_seconds() < deadline)
          std::this_thread::sleep_for(std::chrono::duration<double>(nap));
      } else {
        done = impl_->wait_for(timeout);
      }
    } catch (const TimeoutError&) {
      throw;
    } catch (const CommError& e) {
      throw CommError(comm_->context(e.what()));
    }
    if (!done) {
      throw TimeoutError(comm_->context(impl_->describe() + " timed out after " +
                                        std::to_string(timeout) + " s"));
    }
    transport_done();
  }
  if (ready_at_ > 0) wait_until(ready_at_);
  ready_at_ = 0;
}

void wait_all(std::span<Request> requests) {
  for (auto& r : requests) r.wait();
}

// ---- Comm --------------------------------------------------------------------------

void Comm::set_nodes(std::vector<int> nodes) {
  PSAR_CHECK(nodes.empty() || static_cast<int>(nodes.size()) == size_, "set_nodes: ",
             nodes.size(), " nodes for a communicator of ", size_, " ranks");
  nodes_ = std::move(nodes);
}

void Comm::add_counters(const CommCounters& moved) {
  counters_.bytes_sent += moved.bytes_sent;
  counters_.bytes_recv += moved.bytes_recv;
  counters_.messages_sent += moved.messages_sent;
  counters_.messages_recv += moved.messages_recv;
}

Nic* Comm::link_to(int peer) const {
  if (intra_nic_ && !nodes_.empty() &&
      nodes_[static_cast<size_t>(peer)] == nodes_[static_cast<size_t>(rank_)])
    return intra_nic_.get();
  return nic_.get();
}

std::shared_ptr<Nic> Comm::shared_nic(int, const NetModel&) { return nullptr; }

void Comm::inherit(Comm& parent) {
  set_timeout(parent.timeout());
  set_network(parent.network(), parent.intra_network());
  if (parent.nodes().empty()) return;  // the same on every rank of the parent
  const int mine = parent.nodes()[static_cast<size_t>(parent.rank())];
  const auto all = allgather_bytes(std::as_bytes(std::span<const int>(&mine, 1)));
  std::vector<int> nodes;
  for (const auto& v : all) {
    int node = 0;
    std::memcpy(&node, v.data(), sizeof node);
    nodes.push_back(node);
  }
  set_nodes(std::move(nodes));
}

std::string Comm::context(const std::string& what) const {
  std::string s = "rank " + std::to_string(rank_) + ": ";
  if (!operation_.empty()) s += operation_ + ": ";
  return s + what;
}

void Comm::check_peer(int peer, const char* op) const {
  if (peer < 0 || peer >= size_)
    throw CommError(context(std::string(op) + " to/from rank " + std::to_string(peer) +
                            " outside communicator of size " + std::to_string(size_)));
}

Request Comm::isend(int peer, std::span<const std::byte> data, int tag) {
  check_peer(peer, "send");
  counters_.bytes_sent += static_cast<int64_t>(data.size());
  counters_.messages_sent += 1;
  try {
    Nic* nic = link_to(peer);
    if (!nic) return Request(this, post_send(peer, data, tag, 0.0));
    const double egress_end = nic->depart(data.size(), now_seconds());
    return Request(this, post_send(peer, data, tag, egress_end), egress_end, nullptr, 0);
  } catch (const TimeoutError&) {
    throw;
  } catch (const CommError& e) {
    throw CommError(context(e.what()));
  }
}

Request Comm::irecv(int peer, std::span<std::byte> data, int tag) {
  check_peer(peer, "recv");
  counters_.bytes_recv += static_cast<int64_t>(data.size());
  counters_.messages_recv += 1;
  Nic* nic = link_to(peer);
  if (!nic) return Request(this, post_recv(peer, data, tag));
  return Request(this, post_recv(peer, data, tag), 0.0, nic, data.size());
}

void Comm::send(int peer, std::span<const std::byte> data, int tag) {
  isend(peer, data, tag).wait();
}

void Comm::recv(int peer, std::span<std::byte> data, int tag) { irecv(peer, data, tag).wait(); }

void Comm::sendrecv(int dst, std::span<const std::byte> send_data, int src,
                    std::span<std::byte> recv_data, int tag) {
  Request r = irecv(src, recv_data, tag);
  Request s = isend(dst, send_data, tag);
  r.wait();
  s.wait();
}

Comm::OpScope::OpScope(Comm& comm, std::string name) : comm_(comm), saved_(comm.operation_) {
  comm_.operation_ = saved_.empty() ? std::move(name) : saved_ + "/" + name;
}
Comm::OpScope::~OpScope() { comm_.operation_ = std::move(saved_); }

// The control plane below is deliberately simple (linear through rank 0): it
// carries a few bytes at start-up and per epoch, never gradients. Its traffic
// is kept out of the counters so byte accounting of collectives stays exact.

bool Comm::is_dead(int rank) const {
  return std::find(dead_.begin(), dead_.end(), rank) != dead_.end();
}

void Comm::receive_from_survivors(std::vector<std::span<std::byte>> into, int tag) {
  std::vector<Request> pending(static_cast<size_t>(size_));
  for (int r = 1; r < size_; ++r)
    if (!is_dead(r)) pending[r] = irecv(r, into[r], tag);
  const double deadline = now_seconds() + timeout_s_;
  for (int r = 1; r < size_; ++r) {
    if (!pending[r].valid()) continue;
    while (!pending[r].test()) {
      if (now_seconds() >= deadline) {
        PSAR_LOG(kWarn, "comm", context("control plane: nothing from rank " + std::to_string(r) +
                                        " within " + std::to_string(timeout_s_) +
                                        " s; going on without it"));
        dead_.push_back(r);
        pending[r] = Request();  // cancels the receive
        break;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }
}

void Comm::receive_from_root(std::span<std::byte> data, int tag) {
  if (!tolerate_failures_) return recv(0, data, tag);
  const double saved = timeout_s_;
  timeout_s_ = 2 * saved;
  try {
    recv(0, data, tag);
  } catch (...) {
    timeout_s_ = saved;
    throw;
  }
  timeout_s_ = saved;
}

void Comm::barrier() {
  const CommCounters saved = counters_;
  OpScope op(*this, "barrier");
  std::byte token{};
  if (rank_ == 0) {
    std::vector<std::byte> tokens(static_cast<size_t>(size_));
    if (tolerate_failures_) {
      std::vector<std::span<std::byte>> into;
      for (auto& t : tokens) into.emplace_back(&t, 1);
      receive_from_survivors(std::move(into), kTagBarrier);
    } else {
      for (int r = 1; r < size_; ++r) recv(r, std::span<std::byte>(&token, 1), kTagBarrier);
    }
    for (int r = 1; r < size_; ++r)
      if (!is_dead(r)) send(r, std::span<const std::byte>(&token, 1), kTagBarrier);
  } else {
    send(0, std::span<const std::byte>(&token, 1), kTagBarrier);
    receive_from_root(std::span<std::byte>(&token, 1), kTagBarrier);
  }
  counters_ = saved;
}

std::vector<std::vector<std::byte>> Comm::allgather_bytes(std::span<const std::byte> mine) {
  const CommCounters saved = counters_;
  OpScope op(*this, "allgather (control)");
  std::vector<std::vector<std::byte>> all(static_cast<size_t>(size_));
  if (rank_ == 0) {
    all[0].assign(mine.begin(), mine.end());
    // Tolerating failures, the sizes come in under one deadline; the data
    // follows each size at once.
    std::vector<uint64_t> n(static_cast<size_t>(size_), 0);
    if (tolerate_failures_) {
      std::vector<std::span<std::byte>> into;
      for (auto& v : n) into.push_back(std::as_writable_bytes(std::span<uint64_t>(&v, 1)));
      receive_from_survivors(std::move(into), kTagGatherSize);
    }
    for (int r = 1; r < size_; ++r) {
      if (is_dead(r)) continue;
      if (!tolerate_failures_)
        recv(r, std::as_writable_bytes(std::span<uint64_t>(&n[r], 1)), kTagGatherSize);
      all[r].resize(n[r]);
      recv(r, std::span<std::byte>(all[r]), kTagGatherData);
    }
  } else {
    uint64_t n = mine.size();
    send(0, std::as_bytes(std::span<const uint64_t>(&n, 1)), kTagGatherSize);
    send(0, mine, kTagGatherData);
  }
  // Rank 0 sends the concatenation (sizes first) back to everyone.
  std::vector<uint64_t> sizes(static_cast<size_t>(size_));
  if (rank_ == 0)
    for (int r = 0; r < size_; ++r) sizes[r] = all[r].size();
  broadcast_bytes(std::as_writable_bytes(std::span<uint64_t>(sizes)), 0);
  size_t total = 0;
  for (auto s : sizes) total += s;
  std::vector<std::byte> flat(total);
  if (rank_ == 0) {
    size_t off = 0;
    for (auto& v : all) {
      std::memcpy(flat.data() + off, v.data(), v.size());
      off += v.size();
    }
  }
  broadcast_bytes(std::span<std::byte>(flat), 0);
  size_t off = 0;
  for (int r = 0; r < size_; ++r) {
    all[r].assign(flat.begin() + static_cast<ptrdiff_t>(off),
                  flat.begin() + static_cast<ptrdiff_t>(off + sizes[r]));
    off += sizes[r];
  }
  counters_ = saved;
  return all;
}

void Comm::broadcast_bytes(std::span<std::byte> data, int root) {
  const CommCounters saved = counters_;
  OpScope op(*this, "broadcast (control)");
  check_peer(root, "broadcast");
  if (rank_ == root) {
    std::vector<Request> reqs;
    for (int r = 0; r < size_; ++r)
      if (r != root && !is_dead(r))
        reqs.push_back(isend(r, std::span<const std::byte>(data), kTagBcast));
    wait_all(reqs);
  } else if (root == 0) {
    receive_from_root(data, kTagBcast);
  } else {
    recv(root, data, kTagBcast);
  }
  counters_ = saved;
}

double Comm::allreduce_sum(double value) {
  const auto all = allgather_bytes(std::as_bytes(std::span<const double>(&value, 1)));
  double sum = 0;  // same order on every rank: identical result everywhere
  for (const auto& v : all) {
    if (v.size() != sizeof(double)) continue;  // a dead rank's (tolerate_failures)
    double x;
    std::memcpy(&x, v.data(), sizeof x);
    sum += x;
  }
  return sum;
}

double Comm::allreduce_max(double value) {
  const auto all = allgather_bytes(std::as_bytes(std::span<const double>(&value, 1)));
  double best = value;
  for (const auto& v : all) {
    if (v.size() != sizeof(double)) continue;  // a dead rank's (tolerate_failures)
    double x;
    std::memcpy(&x, v.data(), sizeof x);
    best = std::max(best, x);
  }
  return best;
}

}  // namespace psar
