#pragma once
// ps.security: curve — the parameter server's traffic encrypted and
// authenticated with ZeroMQ's CURVE mechanism (CurveZMQ: Curve25519 key
// exchange, every message sealed with a crypto_box, libsodium's XSalsa20 and
// Poly1305).
//
// Keys are made per job and never touch the disk: every server shard makes
// its key pair when it starts, every worker makes its own; the public halves
// travel over the control plane (MPI) together with the endpoints
// (ps/launch.h), the secret halves never leave their process. A worker
// connects with the server's public key and its own pair; the server's ZAP
// handler (ZeroMQ's authentication protocol, RFC 27) accepts exactly the
// workers' public keys of this job. A peer without them — a plain ZeroMQ
// socket, a CURVE client with keys of its own, or one with a wrong server key
// — fails the handshake: it reaches neither the server's queue nor any reply,
// and the shard counts it (PsCounters::refused).
//
// The guard runs on a thread of its own, beside the serving thread, so that
// handshakes are answered before, while and after Server::run().

#include <atomic>
#include <cstdint>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <zmq.hpp>

namespace psar::ps {

enum class Security { kNone, kCurve };
Security parse_security(const std::string& name);  // ConfigError unless none | curve
const char* to_string(Security security);
// Every mode by name (the schema's choices for ps.security).
std::vector<std::string> security_names();

// What CURVE adds to a frame on the wire: a MESSAGE command (8 bytes of
// name, an 8-byte nonce, a flags byte) around the sealed box (16 bytes of
// Poly1305 tag); ZMQ_MAXMSGSIZE counts the sealed frame.
inline constexpr int64_t kCurveFrameOverhead = 8 + 8 + 1 + 16;

// A Z85-encoded key pair (40 characters each).
struct CurveKeys {
  std::string public_key;
  std::string secret_key;
  bool empty() const { return public_key.empty(); }
};

// ConfigError if this libzmq was built without CURVE.
void require_curve();
// A fresh key pair from libsodium's random source (require_curve first).
CurveKeys make_curve_keys();

// Socket options: a server that holds `keys`, a client that holds `keys`
// and talks to the server whose public key is `server_key`. Set before bind
// or connect.
void set_curve_server(zmq::socket_t& socket, const CurveKeys& keys);
void set_curve_client(zmq::socket_t& socket, const CurveKeys& keys, const std::string& server_key);

// The ZAP handler of one ZeroMQ context, with an allow-list of client
// public keys (Z85), and the count of refused handshakes on `watched` (a
// server socket of that context). Construct it before `watched` binds (a
// handshake that finds no ZAP handler is let through); destroy it before
// `watched` closes.
class CurveGuard {
 public:
  CurveGuard(zmq::context_t& context, zmq::socket_t& watched, std::set<std::string> allowed);
  ~CurveGuard();
  CurveGuard(const CurveGuard&) = delete;
  CurveGuard& operator=(const CurveGuard&) = delete;

  // Handshakes refused so far: no CURVE, a key not on the list, a wrong server key.
  int64_t refused() const { return refused_.load(std::memory_order_relaxed); }

 private:
  void serve();
  void answer_zap();
  void read_event();

  std::set<std::string> allowed_;
  void* watched_;
  zmq::socket_t zap_;      // REP on inproc://zeromq.zap.01
  zmq::socket_t monitor_;  // PAIR receiving `watched`'s handshake failures
  std::atomic<int64_t> refused_{0};
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace psar::ps
