// Hostile input: every kind of bad request gets an error reply with its own
// status, is counted, and the server goes on serving the real workers, whose
// result is still the reference. The client, too, refuses foreign replies.

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <limits>
#include <thread>

#include "core/errors.h"
#include "core/timer.h"
#include "ps/zmq_util.h"
#include "tests/ps/ps_test_util.h"

namespace psar::ps {
namespace {

using testing::initial_params;
using testing::kToken;
using testing::LocalJob;
using testing::make_grad;
using testing::reference_bsp;
using testing::relative_error;

constexpr int64_t kSize = 100;
constexpr int kWorkers = 2;

// A raw DEALER that sends whatever frames it is given.
class Attacker {
 public:
  explicit Attacker(const std::string& endpoint) : socket_(context_, zmq::socket_type::dealer) {
    tune_socket(socket_);
    socket_.connect(endpoint);
  }
  // Sends `frames` as one message and returns the header of the reply.
  wire::Header exchange(const std::vector<std::string>& frames) {
    for (size_t i = 0; i < frames.size(); ++i)
      socket_.send(zmq::buffer(frames[i]),
                   i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
    zmq::pollitem_t item{socket_.handle(), 0, ZMQ_POLLIN, 0};
    zmq::poll(&item, 1, std::chrono::milliseconds(10000));
    std::vector<zmq::message_t> reply;
    EXPECT_GE(recv_frames(socket_, reply, 4), 1u) << "no reply within 10 s";
    wire::Header h;
    if (!reply.empty()) {
      EXPECT_TRUE(decode_header(reply[0].data(), reply[0].size(), h));
    }
    return h;
  }

 private:
  zmq::context_t context_{1};
  zmq::socket_t socket_;
};

wire::Header request(wire::MessageType type) {
  wire::Header h;
  h.set_type(type);
  h.set_token(kToken);
  h.set_worker(0);
  h.set_clock(0);
  h.set_shard(0);
  h.set_key_begin(0);
  h.set_key_end(kSize);
  h.set_payload_floats(type == wire::MSG_PUSH || type == wire::MSG_PUSH_PULL ? kSize : 0);
  return h;
}

std::string floats(int64_t n) { return std::string(static_cast<size_t>(n) * sizeof(float), '\0'); }

struct Hostile {
  const char* name;
  std::vector<std::string> (*frames)();
  wire::Status expected;
};

template <typename F>
std::vector<std::string> with(wire::MessageType type, F change, std::string payload = "") {
  wire::Header h = request(type);
  change(h);
  std::vector<std::string> out{encode_header(h)};
  if (!payload.empty()) out.push_back(payload);
  return out;
}

const Hostile kHostile[] = {
    {"WrongToken",
     [] {
       return with(
           wire::MSG_PUSH, [](auto& h) { h.set_token(kToken + 1); }, floats(kSize));
     },
     wire::STATUS_BAD_TOKEN},
    {"NoToken", [] { return with(wire::MSG_PULL, [](auto& h) { h.clear_token(); }); },
     wire::STATUS_BAD_TOKEN},
    {"EmptyFrame", [] { return std::vector<std::string>{""}; }, wire::STATUS_BAD_TOKEN},
    {"GarbageHeader", [] { return std::vector<std::string>{"\xff\xff\xff\xff garbage"}; },
     wire::STATUS_MALFORMED_HEADER},
    {"OversizedHeader",
     [] { return with(wire::MSG_PULL, [](auto& h) { h.set_error(std::string(4000, 'x')); }); },
     wire::STATUS_MALFORMED_HEADER},
    {"UnknownType",
     [] { return with(wire::MSG_PULL, [](auto& h) { h.set_type(wire::MessageType(99)); }); },
     wire::STATUS_UNKNOWN_TYPE},
    {"ReplyTypeAsRequest",
     [] { return with(wire::MSG_PULL, [](auto& h) { h.set_type(wire::MSG_PARAMS); }); },
     wire::STATUS_UNKNOWN_TYPE},
    {"WrongShard", [] { return with(wire::MSG_PULL, [](auto& h) { h.set_shard(1); }); },
     wire::STATUS_WRONG_SHARD},
    {"PullPastTheEnd",
     [] { return with(wire::MSG_PULL, [](auto& h) { h.set_key_end(kSize + 1); }); },
     wire::STATUS_KEY_RANGE},
    {"PullBeforeTheStart",
     [] { return with(wire::MSG_PULL, [](auto& h) { h.set_key_begin(-5); }); },
     wire::STATUS_KEY_RANGE},
    {"PullInverted",
     [] {
       return with(wire::MSG_PULL, [](auto& h) {
         h.set_key_begin(50);
         h.set_key_end(10);
       });
     },
     wire::STATUS_KEY_RANGE},
    {"PartialPush",
     [] {
       return with(
           wire::MSG_PUSH,
           [](auto& h) {
             h.set_key_end(kSize / 2);
             h.set_payload_floats(kSize / 2);
           },
           floats(kSize / 2));
     },
     wire::STATUS_KEY_RANGE},
    {"PayloadShorterThanHeader",
     [] {
       return with(
           wire::MSG_PUSH, [](auto&) {}, floats(kSize - 1));
     },
     wire::STATUS_BAD_LENGTH},
    {"PayloadNotWholeFloats",
     [] {
       return with(
           wire::MSG_PUSH, [](auto&) {}, floats(kSize) + "x");
     },
     wire::STATUS_BAD_LENGTH},
    {"PushWithoutPayload", [] { return with(wire::MSG_PUSH_PULL, [](auto&) {}); },
     wire::STATUS_BAD_LENGTH},
    {"PullWithPayload",
     [] {
       return with(
           wire::MSG_PULL, [](auto& h) { h.set_payload_floats(1); }, floats(1));
     },
     wire::STATUS_BAD_LENGTH},
    {"ExtraFrame",
     [] {
       auto f = with(
           wire::MSG_PUSH, [](auto&) {}, floats(kSize));
       f.push_back("extra");
       return f;
     },
     wire::STATUS_BAD_FRAMES},
    {"WorkerOutOfRange",
     [] { return with(wire::MSG_PULL, [](auto& h) { h.set_worker(kWorkers); }); },
     wire::STATUS_BAD_WORKER},
    {"NegativeWorker",
     [] {
       return with(
           wire::MSG_PUSH, [](auto& h) { h.set_worker(-1); }, floats(kSize));
     },
     wire::STATUS_BAD_WORKER},
    {"ClockFromTheFuture",
     [] {
       return with(
           wire::MSG_PUSH, [](auto& h) { h.set_clock(5); }, floats(kSize));
     },
     wire::STATUS_BAD_CLOCK},
    {"PullAheadOfOwnPushes", [] { return with(wire::MSG_PULL, [](auto& h) { h.set_clock(7); }); },
     wire::STATUS_BAD_CLOCK},
};

class HostileRequest : public ::testing::TestWithParam<Hostile> {};

TEST_P(HostileRequest, GetsAnErrorReplyIsCountedAndTheJobStillTrainsCorrectly) {
  const Hostile& hostile = GetParam();
  const auto init = initial_params(kSize);
  LocalJob job(init, 1, kWorkers);
  Server& server = job.servers[0]->server();
  Attacker attacker(job.addresses[0].endpoint);
  const wire::Header reply = attacker.exchange(hostile.frames());
  EXPECT_EQ(reply.type(), wire::MSG_ERROR);
  EXPECT_EQ(reply.status(), hostile.expected)
      << "got " << status_name(reply.status()) << ": " << reply.error();
  EXPECT_FALSE(reply.error().empty());
  if (hostile.expected == wire::STATUS_BAD_TOKEN) {
    EXPECT_NE(reply.token(), kToken) << "a foreign sender must not learn the token";
  }
  EXPECT_EQ(server.rejected(hostile.expected), 1);
  EXPECT_EQ(server.counters().rejected, 1);

  // The real workers train as if nothing happened, under a second attack
  // between their steps 0 and 1.
  std::atomic<int> step0_done{0};
  std::atomic<bool> attacked{false};
  std::vector<std::thread> threads;
  std::vector<std::vector<float>> finals(kWorkers);
  for (int w = 0; w < kWorkers; ++w)
    threads.emplace_back([&, w] {
      Client client(job.client(w));
      std::vector<float> params = init;
      for (int64_t t = 0; t < 3; ++t) {
        client.push_pull(make_grad(w, t, kSize), params);
        if (t == 0) {
          ++step0_done;
          testing::wait_until([&] { return attacked.load(); });
        }
      }
      finals[w] = params;
    });
  ASSERT_TRUE(testing::wait_until([&] { return step0_done.load() == kWorkers; }));
  EXPECT_EQ(attacker.exchange(hostile.frames()).status(), hostile.expected);
  attacked = true;
  for (auto& t : threads) t.join();
  job.join();
  const auto ref = reference_bsp(init, kWorkers, 3, testing::sgd());
  for (int w = 0; w < kWorkers; ++w) EXPECT_LT(relative_error(finals[w], ref), 1e-6);
  EXPECT_EQ(server.rejected(hostile.expected), 2);
  EXPECT_EQ(server.counters().payload_bytes_in, kWorkers * 3 * kSize * 4)
      << "rejected payloads are not counted as traffic";
}

INSTANTIATE_TEST_SUITE_P(Kinds, HostileRequest, ::testing::ValuesIn(kHostile),
                         [](const auto& info) { return std::string(info.param.name); });

// Under network emulation a request carries its departure time; one that is
// not finite or lies beyond the timeout would be held forever: rejected, and
// the workers still train correctly.
TEST(HostileRequest, DepartureTimesBeyondTheTimeoutAreRejected) {
  NetModel net;
  net.bandwidth = 1e9;
  net.latency = 10e-6;
  const auto init = initial_params(kSize);
  LocalJob job(init, 1, kWorkers, testing::server_options(), net);
  Server& server = job.servers[0]->server();
  Attacker attacker(job.addresses[0].endpoint);
  for (const double sent_at : {std::numeric_limits<double>::infinity(), now_seconds() + 1e6}) {
    const wire::Header reply = attacker.exchange(with(
        wire::MSG_PUSH, [&](auto& h) { h.set_sent_at(sent_at); }, floats(kSize)));
    EXPECT_EQ(reply.type(), wire::MSG_ERROR);
    EXPECT_EQ(reply.status(), wire::STATUS_MALFORMED_HEADER) << reply.error();
  }
  EXPECT_EQ(server.rejected(wire::STATUS_MALFORMED_HEADER), 2);
  std::vector<std::vector<float>> finals(kWorkers);
  testing::run_workers(kWorkers, [&](int w) {
    Client client(job.client(w));
    std::vector<float> params = init;
    for (int64_t t = 0; t < 2; ++t) client.push_pull(make_grad(w, t, kSize), params);
    finals[w] = params;
  });
  job.join();
  const auto ref = reference_bsp(init, kWorkers, 2, testing::sgd());
  for (int w = 0; w < kWorkers; ++w) EXPECT_LT(relative_error(finals[w], ref), 1e-6);
}

// With chunks, a push must cover exactly one chunk and a pull stay inside one.
TEST(HostileRequest, KeyRangesAcrossChunkBoundariesAreRejected) {
  ServerOptions base = testing::server_options();
  base.chunk_floats = 64;  // chunks [0, 64) and [64, 100)
  LocalJob job(initial_params(kSize), 1, kWorkers, base);
  Attacker attacker(job.addresses[0].endpoint);
  auto push = [&](int64_t begin, int64_t end) {
    return with(
        wire::MSG_PUSH,
        [&](auto& h) {
          h.set_key_begin(begin);
          h.set_key_end(end);
          h.set_payload_floats(end - begin);
        },
        floats(end - begin));
  };
  auto pull = [&](int64_t begin, int64_t end) {
    return with(wire::MSG_PULL, [&](auto& h) {
      h.set_key_begin(begin);
      h.set_key_end(end);
    });
  };
  EXPECT_EQ(attacker.exchange(push(0, kSize)).status(), wire::STATUS_KEY_RANGE);
  EXPECT_EQ(attacker.exchange(push(32, 96)).status(), wire::STATUS_KEY_RANGE);
  EXPECT_EQ(attacker.exchange(push(64, 99)).status(), wire::STATUS_KEY_RANGE);
  EXPECT_EQ(attacker.exchange(pull(60, 70)).status(), wire::STATUS_KEY_RANGE);
  // Inside one chunk a pull is fine: the parameters of step 0, as they started.
  const wire::Header ok = attacker.exchange(pull(70, 80));
  EXPECT_EQ(ok.type(), wire::MSG_PARAMS);
  EXPECT_EQ(ok.payload_floats(), 10);
  EXPECT_EQ(job.servers[0]->server().rejected(wire::STATUS_KEY_RANGE), 4);
}

// A client facing a foreign server: replies with another token are refused.
TEST(HostileReply, AReplyWithAForeignTokenFailsTheClientWithAProtocolError) {
  zmq::context_t context(1);
  zmq::socket_t fake(context, zmq::socket_type::router);
  tune_socket(fake);
  const std::string endpoint = bind_endpoint(fake, "127.0.0.1");
  std::thread server([&] {
    zmq::pollitem_t item{fake.handle(), 0, ZMQ_POLLIN, 0};
    zmq::poll(&item, 1, std::chrono::milliseconds(10000));
    std::vector<zmq::message_t> frames;
    if (recv_frames(fake, frames, 4) == 0) return;
    wire::Header reply;
    reply.set_type(wire::MSG_PARAMS);
    reply.set_token(kToken ^ 1);
    fake.send(frames[0], zmq::send_flags::sndmore);
    fake.send(zmq::buffer(encode_header(reply)), zmq::send_flags::none);
  });
  ClientOptions o;
  o.token = kToken;
  o.timeout_s = 10;
  o.shards = {{0, endpoint, {0, 4}, "this host", ""}};
  Client client(o);
  std::vector<float> params(4);
  try {
    client.pull(params);
    ADD_FAILURE() << "a foreign reply was accepted";
  } catch (const ProtocolError& e) {
    EXPECT_NE(std::string(e.what()).find("not this job's protocol"), std::string::npos) << e.what();
  }
  server.join();
}

}  // namespace
}  // namespace psar::ps
