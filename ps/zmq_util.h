#pragma once
// ZeroMQ plumbing shared by the server, the client and the raw-transport
// benchmark (so that the PS and its ceiling run with the same socket setup).

#include <atomic>
#include <cstddef>
#include <string>
#include <vector>

#include <zmq.hpp>

namespace psar::ps {

// Options every psar ZeroMQ socket gets: no lingering on close (a closed
// socket drops what it had queued, so a torn-down job never waits on a dead
// peer). Queues keep ZeroMQ's default high-water mark (1000 messages per
// peer): a worker has one request in flight per shard, and a ROUTER drops
// replies to a peer that never reads them instead of growing without bound.
void tune_socket(zmq::socket_t& socket);

// Binds `socket` and returns the endpoint peers connect to. `where` is an
// address or interface name ("127.0.0.1", "eth0", "*" for every interface:
// tcp on a free port) or a full ZeroMQ address ("inproc://name",
// "tcp://10.0.0.1:5555"). A non-empty `advertise` replaces the bound host in
// the returned endpoint (a wildcard bind is no address to connect to);
// ps/address.h chooses both.
std::string bind_endpoint(zmq::socket_t& socket, const std::string& where,
                          const std::string& advertise = "");

// Receives every frame of the next message without waiting (ZeroMQ delivers
// a multipart message whole, so once the first frame is there all are).
// Frames beyond `max_frames` are read and dropped; returns how many arrived,
// 0 if no message was waiting.
size_t recv_frames(zmq::socket_t& socket, std::vector<zmq::message_t>& frames, size_t max_frames);

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

// A graceful close waits this long for queued goodbyes to leave.
inline constexpr int kCloseLingerMs = 1000;

// Zero-copy sends of the caller's memory: a frame made by borrow() reads
// `data` in place, and counts as held until ZeroMQ lets go of it (after the
// bytes are written to the socket). The caller may reuse `data` only then.
class BorrowedFrames {
 public:
  zmq::message_t borrow(const float* data, size_t floats);  // empty frame for 0 floats
  // True once ZeroMQ holds none of the frames; false if `deadline` passed first.
  bool wait_released(double deadline) const;

 private:
  static void release(void* data, void* hint);
  std::atomic<int> held_{0};
};

// Milliseconds for zmq::poll: until `deadline` (now_seconds() clock), at most `slice_s`.
long poll_millis(double deadline, double slice_s);

// At most `ms`, and ending by `next` (a held message's modelled arrival,
// on_the_wire.h; 0: no limit). ZeroMQ's poll counts milliseconds, so a
// `next` closer than 2 ms is waited out here and the poll should not block.
long poll_millis_before(double next, long ms);

}  // namespace psar::ps
