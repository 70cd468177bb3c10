// Servers and clients end to end over TCP loopback: N worker threads, S shard
// threads. Under bsp every worker ends with the reference parameters, the
// shards hold the same bits, and the byte counters are exactly 2·N·M per step
// in total (each worker pushes M and pulls M floats).

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <thread>

#include "comm/inproc_comm.h"
#include "core/errors.h"
#include "ps/launch.h"
#include "ps/raw_echo.h"
#include "tests/ps/ps_test_util.h"

namespace psar::ps {
namespace {

using testing::initial_params;
using testing::LocalJob;
using testing::make_grad;
using testing::reference_bsp;
using testing::relative_error;
using testing::run_workers;

struct JobCase {
  int workers;
  int shards;
  int64_t size;
  int64_t chunk = 0;  // floats per chunk, 0: one chunk per shard
};

std::string job_name(const ::testing::TestParamInfo<JobCase>& info) {
  return std::to_string(info.param.workers) + "workers_" + std::to_string(info.param.shards) +
         "shards_" + std::to_string(info.param.size) + "floats_" +
         (info.param.chunk ? std::to_string(info.param.chunk) + "perchunk" : "unchunked");
}

class BspJob : public ::testing::TestWithParam<JobCase> {};

TEST_P(BspJob, EveryWorkerEndsWithTheReferenceAndCountersAreExact) {
  const auto [workers, shards, size, chunk] = GetParam();
  constexpr int64_t kSteps = 5;
  const auto init = initial_params(size);
  ServerOptions base = testing::server_options();
  base.chunk_floats = chunk;
  LocalJob job(init, shards, workers, base);
  std::vector<std::vector<float>> finals(static_cast<size_t>(workers));
  std::vector<PsCounters> counted(static_cast<size_t>(workers));
  run_workers(workers, [&](int w) {
    Client client(job.client(w));
    std::vector<float> params = init;
    for (int64_t t = 0; t < kSteps; ++t) client.push_pull(make_grad(w, t, size), params);
    EXPECT_EQ(client.clock(), kSteps);
    EXPECT_EQ(client.min_version(), kSteps) << "bsp: the pull saw every clock applied";
    client.close();
    finals[w] = params;
    counted[w] = client.counters();
  });
  job.join();
  int64_t chunks = 0;  // over all shards
  for (auto& s : job.servers) chunks += s->server().layout().chunks();
  const auto ref = reference_bsp(init, workers, kSteps, testing::sgd());
  const int64_t step_bytes = size * static_cast<int64_t>(sizeof(float));
  for (int w = 0; w < workers; ++w) {
    EXPECT_LT(relative_error(finals[w], ref), 1e-6) << "worker " << w;
    EXPECT_EQ(finals[w], job.params()) << "worker " << w << " holds the shards' bits";
    EXPECT_EQ(counted[w].payload_bytes_out, kSteps * step_bytes);
    EXPECT_EQ(counted[w].payload_bytes_in, kSteps * step_bytes);
    // One push_pull per chunk per step, plus one goodbye per shard.
    EXPECT_EQ(counted[w].messages_out, kSteps * chunks + shards);
    EXPECT_EQ(counted[w].rejected, 0);
  }
  const PsCounters servers = job.total();
  EXPECT_EQ(servers.payload_bytes_in, workers * kSteps * step_bytes);
  EXPECT_EQ(servers.payload_bytes_out, workers * kSteps * step_bytes);
  EXPECT_EQ(servers.messages_in, workers * (kSteps * chunks + shards));
  EXPECT_EQ(servers.rejected, 0);
}

// The overlap's staged push_pull: each worker gives the keys of a step in
// ranges of its own (cut at 1, 2, 3, … floats, back to front, so that ranges
// cut chunks and shards); the result is the reference, bit for bit the
// shards' parameters, with the same messages as push_pull.
TEST_P(BspJob, AStagedPushPullInRangesOfAnyCutEqualsTheReference) {
  const auto [workers, shards, size, chunk] = GetParam();
  constexpr int64_t kSteps = 3;
  const auto init = initial_params(size);
  ServerOptions base = testing::server_options();
  base.chunk_floats = chunk;
  LocalJob job(init, shards, workers, base);
  std::vector<std::vector<float>> finals(static_cast<size_t>(workers));
  run_workers(workers, [&](int w) {
    Client client(job.client(w));
    std::vector<float> params = init;
    for (int64_t t = 0; t < kSteps; ++t) {
      const auto grads = make_grad(w, t, size);
      client.begin_push_pull(grads, params);
      int64_t end = size, cut = 1 + w;
      for (; end > 0; end -= cut, cut = cut * 2 + 1)
        client.push_pull_range({std::max<int64_t>(0, end - cut), end});
      client.end_push_pull();
    }
    EXPECT_EQ(client.clock(), kSteps);
    EXPECT_EQ(client.counters().messages_out,
              kSteps * [&] {
                int64_t n = 0;
                for (auto& sh : job.servers) n += sh->server().layout().chunks();
                return n;
              }());
    client.close();
    finals[w] = params;
  });
  job.join();
  const auto ref = reference_bsp(init, workers, kSteps, testing::sgd());
  for (int w = 0; w < workers; ++w) {
    EXPECT_LT(relative_error(finals[w], ref), 1e-6) << "worker " << w;
    EXPECT_EQ(finals[w], job.params()) << "worker " << w << " holds the shards' bits";
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, BspJob,
                         ::testing::Values(JobCase{1, 1, 1000}, JobCase{1, 3, 1}, JobCase{2, 1, 0},
                                           JobCase{2, 2, 4097}, JobCase{3, 4, 3},
                                           JobCase{4, 2, 100003}, JobCase{5, 3, 777},
                                           JobCase{1, 1, 1000, 1000}, JobCase{2, 1, 1001, 1000},
                                           JobCase{3, 2, 4097, 7}, JobCase{4, 3, 100003, 4096},
                                           JobCase{2, 4, 3, 2}),
                         job_name);

TEST(SspJob, EndsWithBspParametersOnTheServers) {
  constexpr int kWorkers = 3;
  constexpr int64_t kSize = 500, kSteps = 8;
  const auto init = initial_params(kSize);
  ServerOptions base = testing::server_options();
  base.consistency = Consistency::kSsp;
  base.staleness = 2;
  LocalJob job(init, 2, kWorkers, base);
  run_workers(kWorkers, [&](int w) {
    Client client(job.client(w));
    std::vector<float> params = init;
    for (int64_t t = 0; t < kSteps; ++t) {
      client.push_pull(make_grad(w, t, kSize), params);
      // The parameters for step t+1 include at least clocks 0..t-s.
      EXPECT_GE(client.min_version(), t + 1 - base.staleness);
      if (w == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));  // a straggler
    }
  });
  job.join();
  EXPECT_LT(relative_error(job.params(), reference_bsp(init, kWorkers, kSteps, testing::sgd())),
            1e-6);
}

TEST(AspJob, AppliesEveryPushOnceInSomeOrder) {
  // Plain SGD is order-independent up to rounding: p0 - lr · Σ g / N.
  constexpr int kWorkers = 3;
  constexpr int64_t kSize = 300, kSteps = 6;
  const auto init = initial_params(kSize);
  ServerOptions base = testing::server_options();
  base.consistency = Consistency::kAsp;
  base.optimizer = testing::sgd(0.1f, 0.0f);
  LocalJob job(init, 3, kWorkers, base);
  run_workers(kWorkers, [&](int w) {
    Client client(job.client(w));
    std::vector<float> params = init;
    for (int64_t t = 0; t < kSteps; ++t) client.push_pull(make_grad(w, t, kSize), params);
  });
  job.join();
  EXPECT_LT(relative_error(job.params(), reference_bsp(init, kWorkers, kSteps, base.optimizer)),
            1e-5);
  for (auto& s : job.servers) EXPECT_EQ(s->server().applied(), kWorkers * kSteps);
}

TEST(Client, PushThenPullEqualsPushPull) {
  constexpr int64_t kSize = 257;
  const auto init = initial_params(kSize);
  LocalJob job(init, 2, 1);
  Client client(job.client(0));
  std::vector<float> params(kSize);
  client.pull(params);
  EXPECT_EQ(params, init);
  client.push(make_grad(0, 0, kSize));
  client.pull(params);
  client.push_pull(make_grad(0, 1, kSize), params);
  client.close();
  job.join();
  EXPECT_EQ(params, job.params());
  EXPECT_LT(relative_error(params, reference_bsp(init, 1, 2, testing::sgd())), 1e-6);
}

TEST(Client, AStagedPushPullRefusesKeysGivenTwiceOrAnEndBeforeEveryKey) {
  constexpr int64_t kSize = 100;
  const auto init = initial_params(kSize);
  std::vector<float> params = init;
  const auto grads = make_grad(0, 0, kSize);
  {
    LocalJob job(init, 2, 1);
    Client client(job.client(0));
    client.begin_push_pull(grads, params);
    client.push_pull_range({0, 30});
    EXPECT_THROW(client.push_pull_range({20, 40}), Error);
    EXPECT_THROW(client.push_pull_range({90, 101}), Error);
  }
  {
    LocalJob job(init, 2, 1);
    Client client(job.client(0));
    client.begin_push_pull(grads, params);
    client.push_pull_range({0, 99});
    EXPECT_THROW(client.end_push_pull(), Error);
  }
}

// The layer-wise start (docs/overlap.md): every reply may land before
// end_push_pull — here taken by wait_sent on an emulated NIC — and the step
// still ends normally; on_params hears of every key once.
TEST(Client, AStagedPushPullWhoseRepliesAllLandedBeforeItsEndStillEnds) {
  constexpr int64_t kSize = 1000;
  const auto init = initial_params(kSize);
  LocalJob job(init, 2, 1);
  ClientOptions options = job.client(0);
  options.nic = std::make_shared<Nic>(NetModel{1.25e9, 0.0});
  Client client(options);
  int64_t landed = 0;
  client.set_on_params([&](KeyRange keys) { landed += keys.size(); });
  std::vector<float> params = init;
  for (int64_t t = 0; t < 2; ++t) {
    const auto grads = make_grad(0, t, kSize);
    client.begin_push_pull(grads, params);
    client.push_pull_range({0, kSize});
    const double deadline = now_seconds() + 10;
    while (landed < (t + 1) * kSize && now_seconds() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      client.wait_sent();  // takes the replies that arrived
    }
    EXPECT_EQ(landed, (t + 1) * kSize) << "step " << t << ": every reply before the end";
    client.wait_sent();  // once more, with nothing left to take
    client.end_push_pull();
    EXPECT_EQ(client.clock(), t + 1);
  }
  client.close();
  job.join();
  EXPECT_EQ(params, job.params());
  EXPECT_LT(relative_error(params, reference_bsp(init, 1, 2, testing::sgd())), 1e-6);
}

// launch_ps over the in-process transport: endpoints and the token travel
// through the communicator, in both layouts.
struct LaunchCase {
  int ranks;
  int servers;
  bool colocated;
};

class Launch : public ::testing::TestWithParam<LaunchCase> {};

TEST_P(Launch, BootstrapsServersAndWorkersThatTrainLikeTheReference) {
  const auto [ranks, servers, colocated] = GetParam();
  constexpr int64_t kSize = 1000, kSteps = 4;
  const auto init = initial_params(kSize);
  const int workers = colocated ? ranks : ranks - servers;
  std::vector<std::vector<float>> finals(static_cast<size_t>(ranks));
  run_inproc(ranks, [&](Comm& world) {
    PsOptions o;
    o.servers = servers;
    o.colocated = colocated;
    o.server.optimizer = testing::sgd();
    o.set_timeout(20);
    PsRank me = launch_ps(world, o, init);
    EXPECT_EQ(me.workers, workers);
    EXPECT_EQ(me.shards.size(), static_cast<size_t>(colocated ? ranks : servers));
    if (me.server) {
      me.server->run();
      return;
    }
    ASSERT_TRUE(me.client);
    if (!colocated) {
      ASSERT_TRUE(me.worker_comm);
      EXPECT_EQ(me.worker_comm->size(), workers);
      EXPECT_EQ(me.worker_comm->rank(), me.worker);
    }
    std::vector<float> params = init;
    for (int64_t t = 0; t < kSteps; ++t)
      me.client->push_pull(make_grad(me.worker, t, kSize), params);
    me.client->close();
    if (me.server_thread) me.server_thread->join();
    finals[world.rank()] = params;
  });
  const auto ref = reference_bsp(init, workers, kSteps, testing::sgd());
  for (int r = colocated ? 0 : servers; r < ranks; ++r)
    EXPECT_LT(relative_error(finals[r], ref), 1e-6) << "rank " << r;
}

INSTANTIATE_TEST_SUITE_P(Layouts, Launch,
                         ::testing::Values(LaunchCase{2, 1, false}, LaunchCase{4, 2, false},
                                           LaunchCase{5, 1, false}, LaunchCase{1, 1, true},
                                           LaunchCase{3, 1, true}));

// The benchmark's transport ceiling: every chunk comes back as it was sent
// (each echo copied to its place and compared with what left), and the echo
// server ends once each client said goodbye.
TEST(RawEcho, EchoesEveryChunkOfEveryShardAndEndsAfterTheGoodbyes) {
  constexpr int kClients = 2;
  std::vector<std::unique_ptr<EchoServer>> servers;
  std::vector<std::string> endpoints;
  for (int s = 0; s < 2; ++s) {
    servers.push_back(std::make_unique<EchoServer>("127.0.0.1", kClients, 20.0));
    endpoints.push_back(servers.back()->endpoint());
  }
  std::vector<std::thread> serving;
  std::vector<std::exception_ptr> errors(servers.size());
  for (size_t s = 0; s < servers.size(); ++s)
    serving.emplace_back([&, s] {
      try {
        servers[s]->run();
      } catch (...) {
        errors[s] = std::current_exception();
      }
    });
  const auto plan = plan_shards(10001, 2);
  run_workers(kClients, [&](int) {
    EchoClient client(endpoints, {{0, plan[0], 1000}, {1, plan[1], 0}}, 20.0);
    const auto data = initial_params(10001);
    for (int i = 0; i < 5; ++i) {
      std::vector<float> echoed(data.size(), std::nanf(""));
      client.round_trip(data, echoed);
      EXPECT_EQ(std::memcmp(echoed.data(), data.data(), data.size() * sizeof(float)), 0)
          << "round trip " << i;
    }
  });
  for (auto& t : serving) t.join();
  for (auto& e : errors) EXPECT_FALSE(e) << "an echo server failed";
}

TEST(Launch, RefusesALayoutWithoutWorkers) {
  EXPECT_THROW(run_inproc(2,
                          [&](Comm& world) {
                            PsOptions o;
                            o.servers = 2;
                            launch_ps(world, o, initial_params(10));
                          }),
               ConfigError);
}

}  // namespace
}  // namespace psar::ps
