#include "ps/raw_echo.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "core/errors.h"
#include "core/log.h"
#include "core/timer.h"
#include "ps/zmq_util.h"

namespace psar::ps {

namespace {
constexpr double kPollSlice = 0.1;
const std::string kBye = "bye";  // a two-frame message: [kBye][empty]

}  // namespace

EchoServer::EchoServer(const std::string& bind, int peers, double timeout_s,
                       const std::string& advertise)
    : context_(server_io_threads(peers)),
      socket_(context_, zmq::socket_type::router),
      peers_(peers),
      timeout_s_(timeout_s) {
  tune_socket(socket_);
  endpoint_ = bind_endpoint(socket_, bind, advertise);
}

void EchoServer::run() {
  int left = 0;
  double last = now_seconds();
  std::vector<zmq::message_t> frames;
  while (left < peers_) {
    zmq::pollitem_t item{socket_.handle(), 0, ZMQ_POLLIN, 0};
    zmq::poll(&item, 1, std::chrono::milliseconds(poll_millis(last + timeout_s_, kPollSlice)));
    while (left < peers_ && recv_frames(socket_, frames, 3) > 0) {
      last = now_seconds();
      if (frames.size() == 3) {  // [identity][kBye][empty]
        ++left;
        continue;
      }
      // [identity][payload]: back the same way, the received frame moved, not copied.
      socket_.send(frames[0], zmq::send_flags::sndmore);
      socket_.send(frames[1], zmq::send_flags::none);
    }
    if (left < peers_ && now_seconds() - last > timeout_s_)
      throw TimeoutError("echo server " + endpoint_ + ": no message for " +
                         std::to_string(timeout_s_) + " s; " + std::to_string(peers_ - left) +
                         " client(s) still connected");
  }
  socket_.set(zmq::sockopt::linger, kCloseLingerMs);
}

EchoClient::EchoClient(const std::vector<std::string>& endpoints, std::vector<ShardLayout> shards,
                       double timeout_s)
    : endpoints_(endpoints), shards_(std::move(shards)), timeout_s_(timeout_s) {
  PSAR_CHECK(endpoints_.size() == shards_.size(), "echo client: endpoints and shards differ");
  for (size_t i = 0; i < endpoints_.size(); ++i) {
    sockets_.emplace_back(context_, zmq::socket_type::dealer);
    tune_socket(sockets_.back());
  }
  const std::vector<int> verdict =
      connect_all(context_, sockets_, endpoints_, std::min(kConnectTimeout, timeout_s));
  std::string failed;
  for (size_t i = 0; i < verdict.size(); ++i)
    if (verdict[i] >= 0) failed += (failed.empty() ? "" : "; ") + unreachable(endpoints_[i], "", verdict[i]);
  if (!failed.empty()) throw TimeoutError("echo client: cannot connect to " + failed);
}

EchoClient::~EchoClient() {
  try {
    for (auto& s : sockets_) {
      s.set(zmq::sockopt::linger, kCloseLingerMs);
      s.send(zmq::buffer(kBye), zmq::send_flags::sndmore);
      s.send(zmq::message_t(), zmq::send_flags::none);
    }
  } catch (const std::exception& e) {
    PSAR_LOG(kWarn, "ps", "echo client: goodbye failed: " << e.what());
  }
  // Closing waits up to the linger for the goodbyes, then drops what is left;
  // the context's end waits for ZeroMQ to release every frame.
  for (auto& s : sockets_) s.close();
  context_.close();
}

void EchoClient::round_trip(std::span<const float> data, std::span<float> echoed) {
  PSAR_CHECK(echoed.empty() || echoed.size() == data.size(), "echo client: echoed holds ",
             echoed.size(), " floats for ", data.size());
  const double deadline = now_seconds() + timeout_s_;
  std::vector<int> waiting(shards_.size());
  int most = 0;
  for (size_t s = 0; s < shards_.size(); ++s) {
    waiting[s] = shards_[s].chunks();
    most = std::max(most, waiting[s]);
  }
  for (int c = 0; c < most; ++c)  // chunk 0 of every shard first, like the Client
    for (size_t s = 0; s < shards_.size(); ++s) {
      if (c >= waiting[s]) continue;
      const KeyRange keys = shards_[s].chunk(c);
      zmq::message_t payload =
          borrowed_.borrow(data.data() + keys.begin, static_cast<size_t>(keys.size()));
      sockets_[s].send(payload, zmq::send_flags::none);
    }
  std::vector<zmq::pollitem_t> items;
  for (auto& s : sockets_) items.push_back({s.handle(), 0, ZMQ_POLLIN, 0});
  size_t busy = sockets_.size();
  std::vector<zmq::message_t> frames;
  while (busy > 0) {
    zmq::poll(items.data(), items.size(),
              std::chrono::milliseconds(poll_millis(deadline, kPollSlice)));
    for (size_t i = 0; i < items.size(); ++i) {
      if (items[i].events == 0 || !(items[i].revents & ZMQ_POLLIN)) continue;
      while (waiting[i] > 0 && recv_frames(sockets_[i], frames, 1) > 0) {
        // A DEALER receives its server's echoes in the order it sent the chunks.
        const int chunk = shards_[i].chunks() - waiting[i]--;
        if (echoed.empty()) continue;
        const KeyRange keys = shards_[i].chunk(chunk);
        const size_t bytes = static_cast<size_t>(keys.size()) * sizeof(float);
        if (frames[0].size() != bytes)
          throw ProtocolError("echo client: chunk " + std::to_string(chunk) + " of shard " +
                              std::to_string(i) + " came back with " +
                              std::to_string(frames[0].size()) + " bytes, sent " +
                              std::to_string(bytes));
        std::memcpy(echoed.data() + keys.begin, frames[0].data(), bytes);
      }
      if (waiting[i] == 0) {
        items[i].events = 0;
        --busy;
      }
    }
    if (busy > 0 && now_seconds() >= deadline) {
      std::string missing;
      for (size_t i = 0; i < items.size(); ++i)
        if (items[i].events != 0) missing += (missing.empty() ? "" : ", ") + endpoints_[i];
      throw TimeoutError("echo client: no echo from " + missing + " within " +
                         std::to_string(timeout_s_) + " s");
    }
  }
  if (!borrowed_.wait_released(deadline))
    throw TimeoutError("echo client: frames still held by ZeroMQ");
}

}  // namespace psar::ps
