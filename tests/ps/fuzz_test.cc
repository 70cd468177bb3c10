// Fuzz: 100,000 random and mutated messages at a live server over TCP
// loopback. Every message must get
// exactly one error reply and be counted, and afterwards the real workers'
// push_pull must still give the reference parameters.
//
// Mutations start from valid requests (all four types) and flip bits, cut or
// pad the header, rewrite fields with random values, resize, drop or add
// frames. A mutant that still carries the job token and a real worker id is
// given an impossible clock, so that every message is invalid by
// construction and a server that accepted one would be caught by the counts.

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <random>
#include <thread>

#include "ps/zmq_util.h"
#include "tests/ps/ps_test_util.h"

namespace psar::ps {
namespace {

using testing::initial_params;
using testing::kToken;
using testing::LocalJob;
using testing::make_grad;

constexpr int64_t kSize = 64;
constexpr int kWorkers = 2;
constexpr int64_t kMessages = 100000;
constexpr int kWindow = 256;  // requests in flight before draining replies

class Fuzzer {
 public:
  explicit Fuzzer(uint64_t seed) : rng_(seed) {}

  std::vector<std::string> next() {
    auto frames = pick(4) == 0 ? random_frames() : mutant();
    keep_invalid(frames);
    return frames;
  }

 private:
  uint64_t pick(uint64_t n) { return rng_() % n; }
  std::string bytes(size_t n) {
    std::string s(n, '\0');
    for (auto& c : s) c = static_cast<char>(rng_());
    return s;
  }
  int64_t wild() {  // edge values and random ones
    const int64_t edges[] = {0,         1,         -1,        kSize - 1, kSize,
                             kSize + 1, INT32_MAX, INT64_MIN, INT64_MAX};
    return pick(2) ? edges[pick(std::size(edges))] : static_cast<int64_t>(rng_());
  }

  std::vector<std::string> random_frames() {
    std::vector<std::string> frames(1 + pick(4));
    for (auto& f : frames) f = bytes(pick(8) == 0 ? pick(4096) : pick(64));
    return frames;
  }

  std::vector<std::string> mutant() {
    const wire::MessageType types[] = {wire::MSG_PUSH, wire::MSG_PULL, wire::MSG_PUSH_PULL,
                                       wire::MSG_BYE};
    wire::Header h;
    h.set_type(types[pick(4)]);
    h.set_token(kToken);
    h.set_worker(static_cast<int>(pick(kWorkers)));
    h.set_clock(static_cast<int64_t>(pick(3)));
    h.set_key_begin(0);
    h.set_key_end(kSize);
    const bool push = h.type() == wire::MSG_PUSH || h.type() == wire::MSG_PUSH_PULL;
    h.set_payload_floats(push ? kSize : 0);
    for (int field = static_cast<int>(pick(3)); field >= 0; --field) switch (pick(9)) {
        case 0:
          h.set_type(static_cast<wire::MessageType>(wild() % 64));
          break;
        case 1:
          h.set_token(pick(2) ? rng_() : kToken ^ (uint64_t{1} << pick(64)));
          break;
        case 2:
          h.set_worker(static_cast<int32_t>(wild()));
          break;
        case 3:
          h.set_clock(wild());
          break;
        case 4:
          h.set_shard(static_cast<int32_t>(wild()));
          break;
        case 5:
          h.set_key_begin(wild());
          break;
        case 6:
          h.set_key_end(wild());
          break;
        case 7:
          h.set_payload_floats(wild());
          break;
        case 8:
          h.set_error(bytes(pick(40)));
          break;
      }
    std::vector<std::string> frames{encode_header(h)};
    if (push || pick(4) == 0) frames.push_back(std::string(kSize * sizeof(float), '\1'));
    switch (pick(8)) {
      case 0:
        frames[0][pick(frames[0].size())] ^= static_cast<char>(1 << pick(8));
        break;
      case 1:
        frames[0].resize(pick(frames[0].size() + 1));
        break;
      case 2:
        frames[0] += bytes(1 + pick(16));
        break;
      case 3:
        if (frames.size() > 1) frames.pop_back();
        break;
      case 4:
        if (frames.size() > 1) frames[1].resize(pick(2 * kSize * sizeof(float)));
        break;
      case 5:
        frames.push_back(bytes(pick(32)));
        break;
      default:
        break;  // fields only
    }
    return frames;
  }

  void keep_invalid(std::vector<std::string>& frames) {
    wire::Header h;
    if (!decode_header(frames[0].data(), frames[0].size(), h)) return;
    if (h.token() != kToken || h.worker() < 0 || h.worker() >= kWorkers) return;
    h.set_clock(1000 + static_cast<int64_t>(pick(1000000)));  // no worker gets there
    frames[0] = encode_header(h);
  }

  std::mt19937_64 rng_;
};

TEST(Fuzz, HundredThousandHostileMessagesEachGetOneErrorAndTheServerStillServes) {
  const auto init = initial_params(kSize);
  ServerOptions base = testing::server_options();
  base.timeout_s = 300;  // the fuzz itself is no progress for the idle deadline
  LocalJob job(init, 1, kWorkers, base);
  Server& server = job.servers[0]->server();
  std::vector<std::unique_ptr<Client>> clients;
  std::vector<std::vector<float>> params(kWorkers, init);
  for (int w = 0; w < kWorkers; ++w) clients.push_back(std::make_unique<Client>(job.client(w)));
  // Step 0 on two threads (bsp needs both), so the fuzz meets a server mid-job.
  auto step = [&](int64_t t) {
    std::thread other([&] { clients[1]->push_pull(make_grad(1, t, kSize), params[1]); });
    clients[0]->push_pull(make_grad(0, t, kSize), params[0]);
    other.join();
  };
  step(0);

  constexpr uint64_t kSeed = 20240611;
  Fuzzer fuzzer(kSeed);
  zmq::context_t context(1);
  zmq::socket_t attacker(context, zmq::socket_type::dealer);
  tune_socket(attacker);
  attacker.connect(job.addresses[0].endpoint);
  int64_t sent = 0, replies = 0, errors = 0;
  auto drain = [&](int64_t until) {
    while (replies < until) {
      zmq::pollitem_t item{attacker.handle(), 0, ZMQ_POLLIN, 0};
      zmq::poll(&item, 1, std::chrono::milliseconds(10000));
      std::vector<zmq::message_t> frames;
      if (recv_frames(attacker, frames, 4) == 0) return false;
      ++replies;
      wire::Header h;
      if (frames.size() == 1 && decode_header(frames[0].data(), frames[0].size(), h) &&
          h.type() == wire::MSG_ERROR && h.status() != wire::STATUS_OK)
        ++errors;
    }
    return true;
  };
  while (sent < kMessages) {
    const auto frames = fuzzer.next();
    for (size_t i = 0; i < frames.size(); ++i)
      attacker.send(zmq::buffer(frames[i]),
                    i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
    ++sent;
    if (sent - replies >= kWindow) {
      ASSERT_TRUE(drain(sent - kWindow / 2)) << "no reply in 10 s";
    }
  }
  ASSERT_TRUE(drain(sent)) << "no reply in 10 s";
  EXPECT_EQ(replies, kMessages);
  EXPECT_EQ(errors, kMessages) << "every reply is an error reply";
  EXPECT_EQ(server.counters().rejected, kMessages) << "every message was rejected and counted";
  for (int status = wire::STATUS_BAD_FRAMES; status <= wire::STATUS_BAD_CLOCK; ++status)
    EXPECT_GT(server.rejected(wire::Status(status)), 0)
        << "the fuzz never hit " << status_name(status);

  // Not fuzzed here: garbage on a bare TCP connection. libzmq 4.3.4 takes
  // some of it for a ZMTP 1.0 peer and can abort the process on an errno
  // assertion (zmtp_engine.cpp:446) — a libzmq robustness bug, recorded in
  // docs/ps.md; the server only ever sees what libzmq delivers as messages.
  EXPECT_EQ(server.applied(), 1) << "no fuzz message changed the parameters";

  step(1);
  step(2);
  clients.clear();  // goodbyes
  job.join();
  const auto ref = testing::reference_bsp(init, kWorkers, 3, testing::sgd());
  for (int w = 0; w < kWorkers; ++w) EXPECT_LT(testing::relative_error(params[w], ref), 1e-6);
  EXPECT_EQ(params[0], job.params());
}

}  // namespace
}  // namespace psar::ps
