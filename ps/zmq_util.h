#pragma once
// ZeroMQ plumbing shared by the server, the client and the raw-transport
// benchmark (so that the PS and its ceiling run with the same socket setup).

#include <atomic>
#include <cstddef>
#include <span>
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

// ZeroMQ I/O threads for the context of a server that `peers` clients talk
// to: two when there are several peers and at least two cores, else one. A
// bsp clock takes in every worker's push and then answers all of them at
// once; with one I/O thread every byte of both bursts is copied to and from
// the kernel by that one thread, while with two the peers' connections are
// split between them and two cores copy (results/ps_lite).
int server_io_threads(int peers);

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

// Connects sockets[i] to endpoints[i] and waits until every TCP connection
// is up or `timeout_s` passed. Returns, per socket, -1 once connected, else
// its failed attempts (0: no answer at all); non-TCP endpoints count as
// connected. How long a client waits by default before it gives up:
inline constexpr double kConnectTimeout = 5.0;
std::vector<int> connect_all(zmq::context_t& context, std::span<zmq::socket_t> sockets,
                             std::span<const std::string> endpoints, double timeout_s);
// "tcp://10.0.0.1:5555 (host h1): no answer" for connect_all's verdict `attempts`.
std::string unreachable(const std::string& endpoint, const std::string& host, int attempts);

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
