#include "ps/zmq_util.h"

#include <algorithm>
#include <cmath>
#include <thread>

#include "comm/netem.h"
#include "core/timer.h"

namespace psar::ps {

void tune_socket(zmq::socket_t& socket) { socket.set(zmq::sockopt::linger, 0); }

std::string bind_endpoint(zmq::socket_t& socket, const std::string& where) {
  const std::string address =
      where.find("://") != std::string::npos ? where : "tcp://" + where + ":*";
  socket.bind(address);
  return socket.get(zmq::sockopt::last_endpoint);
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
