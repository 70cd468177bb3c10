#include "ps/zmq_util.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <thread>

#include "comm/netem.h"
#include "core/timer.h"

namespace psar::ps {

void tune_socket(zmq::socket_t& socket) { socket.set(zmq::sockopt::linger, 0); }

int server_io_threads(int peers) {
  return peers >= 2 && std::thread::hardware_concurrency() >= 2 ? 2 : 1;
}

std::string bind_endpoint(zmq::socket_t& socket, const std::string& where,
                          const std::string& advertise) {
  const std::string address =
      where.find("://") != std::string::npos ? where : "tcp://" + where + ":*";
  socket.bind(address);
  const std::string bound = socket.get(zmq::sockopt::last_endpoint);  // "tcp://0.0.0.0:41234"
  const size_t host = bound.find("://"), port = bound.rfind(':');
  if (advertise.empty() || host == std::string::npos || port <= host + 3) return bound;
  return bound.substr(0, host + 3) + advertise + bound.substr(port);
}

size_t recv_frames(zmq::socket_t& socket, std::vector<zmq::message_t>& frames, size_t max_frames) {
  frames.clear();
  size_t count = 0;
  for (;;) {
    zmq::message_t frame;
    if (!socket.recv(frame, zmq::recv_flags::dontwait)) break;  // nothing (more) waiting
    ++count;
    const bool more = frame.more();
    if (frames.size() < max_frames) frames.push_back(std::move(frame));
    if (!more) break;
  }
  return count;
}

namespace {

// Watches outgoing TCP connections through ZeroMQ's socket monitor, so that
// a peer nobody can reach is reported at once instead of at the first
// reply's deadline (ZeroMQ itself retries a connect forever). watch() a
// socket before connecting it; wait() returns, for each watched socket in
// order, the failed attempts if it has not connected by `deadline`, or -1
// once it has. Monitoring stops when the watch is destroyed.
class ConnectWatch {
 public:
  explicit ConnectWatch(zmq::context_t& context) : context_(context) {}
  ~ConnectWatch();
  ConnectWatch(const ConnectWatch&) = delete;
  ConnectWatch& operator=(const ConnectWatch&) = delete;
  void watch(zmq::socket_t& socket);
  std::vector<int> wait(double deadline);

 private:
  zmq::context_t& context_;
  std::vector<void*> watched_;           // the sockets' handles
  std::vector<zmq::socket_t> monitors_;  // PAIR sockets receiving their events
};

ConnectWatch::~ConnectWatch() {
  for (void* s : watched_) zmq_socket_monitor(s, nullptr, 0);
}

void ConnectWatch::watch(zmq::socket_t& socket) {
  // The inproc name only has to be unique within the context: the socket's address is.
  const std::string name =
      "inproc://psar-connect-" + std::to_string(reinterpret_cast<uintptr_t>(socket.handle()));
  if (zmq_socket_monitor(socket.handle(), name.c_str(),
                         ZMQ_EVENT_CONNECTED | ZMQ_EVENT_CONNECT_RETRIED) != 0)
    throw zmq::error_t();
  watched_.push_back(socket.handle());
  monitors_.emplace_back(context_, zmq::socket_type::pair);
  tune_socket(monitors_.back());
  monitors_.back().connect(name);
}

std::vector<int> ConnectWatch::wait(double deadline) {
  std::vector<int> failed(monitors_.size(), 0);  // attempts so far; -1 = connected
  size_t open = monitors_.size();
  while (open > 0) {
    std::vector<zmq::pollitem_t> items;
    for (auto& m : monitors_) items.push_back({m.handle(), 0, ZMQ_POLLIN, 0});
    const long ms = poll_millis(deadline, 0.1);
    zmq::poll(items.data(), items.size(), std::chrono::milliseconds(ms));
    for (size_t i = 0; i < items.size(); ++i) {
      if (!(items[i].revents & ZMQ_POLLIN)) continue;
      // An event is two frames: [uint16 event, uint32 value] and the endpoint.
      std::vector<zmq::message_t> frames;
      if (recv_frames(monitors_[i], frames, 2) == 0 || frames[0].size() < sizeof(uint16_t)) continue;
      uint16_t event = 0;
      std::memcpy(&event, frames[0].data(), sizeof event);
      if (failed[i] < 0) continue;
      if (event == ZMQ_EVENT_CONNECTED) {
        failed[i] = -1;
        --open;
      } else if (event == ZMQ_EVENT_CONNECT_RETRIED) {
        ++failed[i];
      }
    }
    if (open > 0 && now_seconds() >= deadline) break;
  }
  return failed;
}

}  // namespace

std::vector<int> connect_all(zmq::context_t& context, std::span<zmq::socket_t> sockets,
                             std::span<const std::string> endpoints, double timeout_s) {
  std::vector<int> verdict(sockets.size(), -1);
  std::vector<size_t> watched;  // indexes of the TCP sockets, in watch order
  {
    ConnectWatch watch(context);
    for (size_t i = 0; i < sockets.size(); ++i) {
      if (endpoints[i].rfind("tcp://", 0) == 0) {
        watch.watch(sockets[i]);
        watched.push_back(i);
      }
      sockets[i].connect(endpoints[i]);
    }
    const std::vector<int> failed = watch.wait(now_seconds() + timeout_s);
    for (size_t w = 0; w < watched.size(); ++w) verdict[watched[w]] = failed[w];
  }
  return verdict;
}

std::string unreachable(const std::string& endpoint, const std::string& host, int attempts) {
  return endpoint + (host.empty() ? "" : " (host " + host + ")") + ": " +
         (attempts > 0 ? std::to_string(attempts + 1) + " attempts refused or failed"
                       : "no answer");
}

zmq::message_t BorrowedFrames::borrow(const float* data, size_t floats) {
  if (floats == 0) return zmq::message_t();  // ZeroMQ would never call release for it
  held_.fetch_add(1, std::memory_order_relaxed);
  return zmq::message_t(const_cast<float*>(data), floats * sizeof(float), &release, &held_);
}

void BorrowedFrames::release(void*, void* hint) {
  static_cast<std::atomic<int>*>(hint)->fetch_sub(1, std::memory_order_release);
}

bool BorrowedFrames::wait_released(double deadline) const {
  // acquire: ZeroMQ's last reads of the memory happen before the caller's writes.
  while (held_.load(std::memory_order_acquire) != 0) {
    if (now_seconds() >= deadline) return false;
    std::this_thread::yield();
  }
  return true;
}

long poll_millis(double deadline, double slice_s) {
  const double left = std::clamp(deadline - now_seconds(), 0.0, slice_s);
  return static_cast<long>(std::ceil(left * 1e3));
}

long poll_millis_before(double next, long ms) {
  if (next <= 0) return ms;
  const double left = next - now_seconds();
  if (left < 2e-3) {
    wait_until(next);
    return 0;
  }
  return static_cast<long>(std::min<double>(static_cast<double>(ms), (left - 1e-3) * 1e3));
}

}  // namespace psar::ps
