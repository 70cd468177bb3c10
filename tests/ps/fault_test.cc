// Faults: a worker that hangs, a worker that leaves early, a server that stops
// answering. Everyone still waiting ends with an error that names the culprit,
// within the configured timeout — nobody hangs.

#include <gtest/gtest.h>

#include <thread>

#include "core/errors.h"
#include "core/timer.h"
#include "tests/ps/ps_test_util.h"

namespace psar::ps {
namespace {

using testing::initial_params;
using testing::LocalJob;
using testing::make_grad;

constexpr double kTimeout = 1.0;
// Generous bound for "within the timeout": detection takes one timeout, plus
// scheduling on a loaded 2-core machine. A hang would take forever.
constexpr double kWithin = kTimeout + 10.0;

ServerOptions short_timeout() {
  ServerOptions o = testing::server_options();
  o.timeout_s = kTimeout;
  return o;
}

template <typename E>
std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong exception type: " << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no exception";
  return {};
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(DeadWorker, AStalledWorkerFailsTheOthersAndTheServerWithinTheTimeout) {
  LocalJob job(initial_params(64), 2, 3, short_timeout());
  // Worker 2 connects and then never pushes (a hung or dead process).
  Client silent(job.client(2));
  Stopwatch clock;
  std::vector<std::string> errors(2);
  std::vector<std::thread> threads;
  for (int w = 0; w < 2; ++w)
    threads.emplace_back([&, w] {
      Client client(job.client(w));
      std::vector<float> params(64);
      errors[w] = message_of<TimeoutError>([&] { client.push_pull(make_grad(w, 0, 64), params); });
      EXPECT_TRUE(
          contains(message_of<CommError>([&] { client.push_pull(make_grad(w, 0, 64), params); }),
                   "unusable after an earlier failure"));
    });
  for (auto& t : threads) t.join();
  EXPECT_LT(clock.seconds(), kWithin);
  for (const auto& e : errors) {
    EXPECT_TRUE(contains(e, "waits for the pushes of worker(s) 2")) << e;
    EXPECT_TRUE(contains(e, "ps shard")) << e;
  }
  const std::string server_error = message_of<TimeoutError>([&] { job.join(); });
  EXPECT_TRUE(contains(server_error, "worker(s) 2")) << server_error;
  EXPECT_EQ(job.servers[0]->server().rejected(wire::STATUS_TIMEOUT), 2);
}

TEST(DeadWorker, AWorkerThatLeavesEarlyFailsTheOthersAtOnce) {
  LocalJob job(initial_params(64), 1, 2, short_timeout());
  std::string error;
  std::thread stays([&] {
    Client client(job.client(0));
    std::vector<float> params(64);
    for (int64_t t = 0; t < 2; ++t) client.push_pull(make_grad(0, t, 64), params);
    error = message_of<CommError>([&] { client.push_pull(make_grad(0, 2, 64), params); });
  });
  {
    Client leaves(job.client(1));  // two steps, then its destructor says goodbye
    std::vector<float> params(64);
    for (int64_t t = 0; t < 2; ++t) leaves.push_pull(make_grad(1, t, 64), params);
  }
  stays.join();
  EXPECT_TRUE(contains(error, "worker 1 left after 2 steps")) << error;
  EXPECT_TRUE(contains(error, "peer failed")) << error;
  const std::string server_error = message_of<CommError>([&] { job.join(); });
  EXPECT_TRUE(contains(server_error, "worker 1 left")) << server_error;
}

TEST(DeadServer, AClientTimesOutNamingTheShardAndItsEndpoint) {
  LocalJob job(initial_params(64), 2, 1, short_timeout());
  job.servers[1]->server().stop();  // shard 1 stops reading its socket
  ASSERT_TRUE(testing::wait_until([&] { return job.servers[1]->finished(); }));
  Client client(job.client(0));
  std::vector<float> params(64);
  Stopwatch clock;
  const std::string e =
      message_of<TimeoutError>([&] { client.push_pull(make_grad(0, 0, 64), params); });
  EXPECT_LT(clock.seconds(), kWithin);
  EXPECT_TRUE(contains(e, "no reply from shard 1 (" + job.addresses[1].endpoint + ")")) << e;
  EXPECT_FALSE(contains(e, "shard 0 (")) << "shard 0 answered: " << e;
}

}  // namespace
}  // namespace psar::ps
