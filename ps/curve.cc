#include "ps/curve.h"

#include <array>
#include <chrono>
#include <cstring>
#include <vector>

#include "core/errors.h"
#include "core/log.h"
#include "ps/zmq_util.h"

namespace psar::ps {

namespace {

constexpr size_t kZ85Key = 40;  // a 32-byte key in Z85
constexpr double kPollSlice = 0.1;
constexpr int kHandshakeFailures = ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL |
                                   ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
                                   ZMQ_EVENT_HANDSHAKE_FAILED_AUTH;

std::string frame_text(const zmq::message_t& m) {
  return std::string(static_cast<const char*>(m.data()), m.size());
}

}  // namespace

std::vector<std::string> security_names() {
  return {to_string(Security::kNone), to_string(Security::kCurve)};
}

Security parse_security(const std::string& name) {
  for (const Security s : {Security::kNone, Security::kCurve})
    if (name == to_string(s)) return s;
  throw ConfigError("ps.security: expected none or curve, got '" + name + "'");
}

const char* to_string(Security security) {
  return security == Security::kCurve ? "curve" : "none";
}

void require_curve() {
  if (!zmq_has("curve"))
    throw ConfigError("ps.security: curve needs a libzmq built with CURVE (libsodium); this one "
                      "has none");
}

CurveKeys make_curve_keys() {
  require_curve();
  std::array<char, kZ85Key + 1> pub{}, sec{};
  if (zmq_curve_keypair(pub.data(), sec.data()) != 0) throw zmq::error_t();
  return {std::string(pub.data(), kZ85Key), std::string(sec.data(), kZ85Key)};
}

void set_curve_server(zmq::socket_t& socket, const CurveKeys& keys) {
  socket.set(zmq::sockopt::curve_server, 1);
  socket.set(zmq::sockopt::curve_secretkey, keys.secret_key);
  socket.set(zmq::sockopt::zap_domain, std::string("psar"));
}

void set_curve_client(zmq::socket_t& socket, const CurveKeys& keys,
                      const std::string& server_key) {
  socket.set(zmq::sockopt::curve_serverkey, server_key);
  socket.set(zmq::sockopt::curve_publickey, keys.public_key);
  socket.set(zmq::sockopt::curve_secretkey, keys.secret_key);
}

CurveGuard::CurveGuard(zmq::context_t& context, zmq::socket_t& watched,
                       std::set<std::string> allowed)
    : allowed_(std::move(allowed)),
      watched_(watched.handle()),
      zap_(context, zmq::socket_type::rep),
      monitor_(context, zmq::socket_type::pair) {
  tune_socket(zap_);
  tune_socket(monitor_);
  zap_.bind("inproc://zeromq.zap.01");
  // The inproc name only has to be unique within the context: the socket's address is.
  const std::string name =
      "inproc://psar-curve-" + std::to_string(reinterpret_cast<uintptr_t>(watched_));
  if (zmq_socket_monitor(watched_, name.c_str(), kHandshakeFailures) != 0) throw zmq::error_t();
  monitor_.connect(name);
  // From here on the sockets belong to the guard's thread (its start is a full barrier).
  thread_ = std::thread([this] { serve(); });
}

CurveGuard::~CurveGuard() {
  stop_.store(true);
  thread_.join();
  zmq_socket_monitor(watched_, nullptr, 0);
}

void CurveGuard::serve() {
  while (!stop_.load()) {
    std::array<zmq::pollitem_t, 2> items{{{zap_.handle(), 0, ZMQ_POLLIN, 0},
                                          {monitor_.handle(), 0, ZMQ_POLLIN, 0}}};
    try {
      zmq::poll(items.data(), items.size(),
                std::chrono::milliseconds(static_cast<long>(kPollSlice * 1e3)));
      if (items[0].revents & ZMQ_POLLIN) answer_zap();
      if (items[1].revents & ZMQ_POLLIN) read_event();
    } catch (const zmq::error_t& e) {
      // The context is terminating: nothing is left to guard.
      if (e.num() == ETERM) return;
      PSAR_LOG(kWarn, "ps", "curve guard: " << e.what());
    }
  }
}

void CurveGuard::answer_zap() {
  // Request (RFC 27): version, request id, domain, address, identity,
  // mechanism, credentials (for CURVE: the client's 32-byte public key).
  std::vector<zmq::message_t> request;
  const size_t count = recv_frames(zap_, request, 8);
  if (count == 0) return;
  std::string status = "400", text = "not a key of this job";
  if (count == 7 && frame_text(request[5]) == "CURVE" && request[6].size() == 32) {
    std::array<char, kZ85Key + 1> key{};
    zmq_z85_encode(key.data(), static_cast<const uint8_t*>(request[6].data()), 32);
    if (allowed_.count(std::string(key.data(), kZ85Key))) status = "200", text = "OK";
  } else {
    text = "expected a CURVE handshake";
  }
  const std::string request_id = count >= 2 ? frame_text(request[1]) : "";
  const std::array<std::string, 6> reply{"1.0", request_id, status, text, "", ""};
  for (size_t i = 0; i < reply.size(); ++i)
    zap_.send(zmq::buffer(reply[i]),
              i + 1 < reply.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
}

void CurveGuard::read_event() {
  // An event is two frames: [uint16 event, uint32 value] and the peer's address.
  std::vector<zmq::message_t> frames;
  if (recv_frames(monitor_, frames, 2) < 2 || frames[0].size() < sizeof(uint16_t)) return;
  uint16_t event = 0;
  std::memcpy(&event, frames[0].data(), sizeof event);
  if (!(event & kHandshakeFailures)) return;
  const int64_t n = refused_.fetch_add(1, std::memory_order_relaxed) + 1;
  // The first is worth a warning; a flood is counted, not logged line by line.
  if (n == 1)
    PSAR_LOG(kWarn, "ps", "refused a connection without this job's CURVE keys on "
                              << frame_text(frames[1]) << "; further ones are only counted");
  else
    PSAR_LOG(kDebug, "ps", "refused a connection without this job's CURVE keys on "
                               << frame_text(frames[1]));
}

}  // namespace psar::ps
