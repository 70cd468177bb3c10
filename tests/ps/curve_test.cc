// ps.security: curve. A job whose shards speak CURVE with key pairs made for
// it: intruders that lack the job's keys — a plain ZeroMQ socket, a CURVE
// client with a key pair of its own, a CURVE client with a wrong server key —
// connect during training and send a push and a pull that carry the job's
// token. None gets a reply, each is counted as refused, none reaches the
// request queue, and the job's parameters are bitwise those of the same job
// without the intruder. The control: the same plain intruder against a plain
// job does get a reply, so the probe can see one.

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <exception>
#include <thread>

#include "core/timer.h"
#include "ps/curve.h"
#include "ps/zmq_util.h"
#include "tests/ps/ps_test_util.h"

namespace psar::ps {
namespace {

using testing::initial_params;
using testing::intrude;
using testing::Intruder;
using testing::kToken;
using testing::LocalJob;
using testing::make_grad;
using testing::run_workers;
using testing::server_options;
using testing::wait_until;

constexpr int64_t kSize = 1000;
constexpr int kShards = 2;
constexpr int kWorkers = 2;
constexpr int64_t kSteps = 20;
constexpr double kReplyWait = 1.0;  // how long an intruder waits for any reply

struct Outcome {
  std::vector<float> params;
  PsCounters counters;
  size_t intruder_frames = 0;
};

// kSteps of bsp push_pull by kWorkers workers of a CURVE job; with an
// intruder, the workers start once its requests are out.
Outcome run_job(const Intruder* intruder) {
  ServerOptions base = server_options();
  base.security = Security::kCurve;
  LocalJob job(initial_params(kSize), kShards, kWorkers, base);
  std::atomic<bool> sent{intruder == nullptr};
  Outcome out;
  std::thread attacker;
  if (intruder)
    attacker = std::thread([&] {
      out.intruder_frames = intrude(job.addresses.front(), *intruder, kToken, kReplyWait,
                                    [&] { sent.store(true); });
    });
  std::exception_ptr failed;
  try {
    run_workers(kWorkers, [&](int w) {
      EXPECT_TRUE(wait_until([&] { return sent.load(); }));
      Client client(job.client(w));
      std::vector<float> params(kSize);
      for (int64_t t = 0; t < kSteps; ++t) client.push_pull(make_grad(w, t, kSize), params);
    });
  } catch (...) {
    failed = std::current_exception();
  }
  if (attacker.joinable()) attacker.join();
  if (failed) std::rethrow_exception(failed);
  if (intruder) {  // its refusal is counted by the guard's thread
    EXPECT_TRUE(wait_until([&] { return job.total().refused >= 1; }, 10.0));
  }
  out.counters = job.total();
  job.join();
  out.params = job.params();
  return out;
}

class CurveIntruder : public ::testing::TestWithParam<Intruder> {};

TEST_P(CurveIntruder, GetsNothingIsCountedAndLeavesTheParametersBitwiseUndisturbed) {
  const Outcome quiet = run_job(nullptr);
  EXPECT_EQ(quiet.counters.refused, 0);
  const Intruder intruder = GetParam();
  const Outcome attacked = run_job(&intruder);
  EXPECT_EQ(attacked.intruder_frames, 0u) << "the intruder got a reply";
  EXPECT_GE(attacked.counters.refused, 1) << "the refused handshake was not counted";
  EXPECT_EQ(attacked.counters.rejected, 0) << "the intruder's requests reached the server";
  ASSERT_EQ(attacked.params.size(), quiet.params.size());
  EXPECT_EQ(std::memcmp(attacked.params.data(), quiet.params.data(),
                        quiet.params.size() * sizeof(float)),
            0)
      << "the intruder changed the parameters";
  // The same requests as the workers': N·M pushed per step on both runs.
  EXPECT_EQ(attacked.counters.payload_bytes_in, quiet.counters.payload_bytes_in);
}

INSTANTIATE_TEST_SUITE_P(Kinds, CurveIntruder,
                         ::testing::Values(Intruder::kPlain, Intruder::kOwnKeys,
                                           Intruder::kWrongServerKey),
                         [](const auto& info) {
                           switch (info.param) {
                             case Intruder::kPlain: return std::string("PlainSocket");
                             case Intruder::kOwnKeys: return std::string("OwnKeyPair");
                             default: return std::string("WrongServerKey");
                           }
                         });

// The server refuses frames larger than a chunk (ZMQ_MAXMSGSIZE); under
// CURVE the limit must leave room for the seal around a whole chunk. Shards
// of exactly 64 KiB, the smallest limit, one chunk each, against the bsp
// reference.
TEST(CurveJob, AChunkOfExactlyTheFrameLimitPasses) {
  constexpr int64_t kLimitFloats = 64 * 1024 / sizeof(float), kBig = 2 * kLimitFloats;
  ServerOptions base = server_options();
  base.security = Security::kCurve;
  base.timeout_s = 10;
  const auto initial = initial_params(kBig);
  LocalJob job(initial, 2, kWorkers, base);
  ASSERT_EQ(job.addresses.front().range.size(), kLimitFloats);
  run_workers(kWorkers, [&](int w) {
    Client client(job.client(w));
    std::vector<float> params(kBig);
    for (int64_t t = 0; t < 3; ++t) client.push_pull(make_grad(w, t, kBig), params);
  });
  job.join();
  EXPECT_LE(testing::relative_error(job.params(), testing::reference_bsp(initial, kWorkers, 3,
                                                                          server_options().optimizer)),
            1e-6);
}

// (Its push would count as worker 0's: the job is not trained after it.)
TEST(CurveProbe, DoesGetRepliesFromAPlainJob) {
  LocalJob job(initial_params(kSize), kShards, kWorkers);
  const size_t frames = intrude(job.addresses.front(), Intruder::kPlain, kToken, kReplyWait, [] {});
  EXPECT_GT(frames, 0u) << "the probe sees no reply even where one is sent";
}

TEST(CurveKeys, AreFreshZ85PairsAndUnknownSecurityIsAConfigError) {
  const CurveKeys a = make_curve_keys(), b = make_curve_keys();
  EXPECT_EQ(a.public_key.size(), 40u);
  EXPECT_EQ(a.secret_key.size(), 40u);
  EXPECT_NE(a.public_key, b.public_key);
  EXPECT_NE(a.secret_key, a.public_key);
  EXPECT_EQ(parse_security("curve"), Security::kCurve);
  EXPECT_EQ(parse_security("none"), Security::kNone);
  EXPECT_THROW(parse_security("tls"), ConfigError);
}

}  // namespace
}  // namespace psar::ps
