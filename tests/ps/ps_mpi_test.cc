// The parameter server under mpirun: real processes, ZeroMQ over TCP, the
// endpoints and job token exchanged over MPI. Layout and consistency come
// from `--set ps.key=value` arguments (see CMakeLists.txt), so one binary
// covers dedicated servers, several shards and co-located shards.
//
// Under bsp, 50 steps of fixed per-worker gradient sequences through the
// `ps` GradientSync end within 1e-5 relative of MPI_Allreduce + the local
// optimizer, and the byte counters are exact: every worker pushes and pulls
// M floats per step; the servers together receive and send N·M per step.
// Then the trainer itself: `psar train` with --sync ps against --sync mpi.

#include <gtest/gtest.h>

#include <cstring>
#include <thread>

#include "allreduce/allreducer.h"
#include "comm/mpi_comm.h"
#include "core/ops.h"
#include "tests/ps/ps_test_util.h"
#include "tests/trainer/train_fixture.h"
#include "sync/ps_sync.h"
#include "trainer/schema.h"
#include "trainer/trainer.h"

namespace psar {
namespace {

std::vector<std::string> g_overrides;  // from the command line

MpiComm& world() {
  static MpiComm c(MPI_COMM_WORLD);
  return c;
}

Config config(const std::string& base = "") {
  std::vector<std::string> all = {"ps.timeout=30s", "optimizer.lr=0.05", "optimizer.momentum=0.9"};
  all.insert(all.end(), g_overrides.begin(), g_overrides.end());
  return Config::load_string(base, config_schema(), all);
}

TEST(PsUnderMpi, MatchesMpiAllreduceAfterFiftyStepsWithExactByteCounts) {
  constexpr int64_t kSteps = 50;
  const Config cfg = config();
  ParamStore store;  // tensors of uneven sizes, for ps.align_shards
  store.add("w1", {37, 11}, Init::normal(0.1f));
  store.add("b1", {11}, Init::zeros());
  store.add("w2", {11, 301}, Init::normal(0.1f));
  store.add("b2", {301}, Init::zeros());
  store.finalize(5);
  const int64_t M = store.size();
  const OptimizerOptions opt = optimizer_options(cfg);
  SyncInit init{world(), sync_options(cfg), store, opt};
  auto served = std::make_shared<ps::PsCounters>();
  SyncSetup setup = make_ps_sync(init, served);
  ps::PsCounters shard;  // this rank's shard, if it hosts one
  if (setup.serve) {
    setup.serve();
    shard = *served;
  } else {
    Comm& workers = *setup.workers;
    const int N = workers.size(), me = workers.rank();
    auto mpi = make_allreducer("mpi");
    auto ref_opt = make_optimizer(opt, M);
    std::vector<float> ref(store.params().begin(), store.params().end());
    for (int64_t t = 0; t < kSteps; ++t) {
      auto g = ps::testing::make_grad(me, t, M);
      std::copy(g.begin(), g.end(), store.grads().begin());
      setup.sync->step(store.params(), store.grads());
      mpi->allreduce(workers, g);
      ops::scale(g.data(), 1.0f / N, M);
      ref_opt->step(ref, g);
    }
    const std::vector<float> got(store.params().begin(), store.params().end());
    EXPECT_LE(testing::relative_difference(ref, got), 1e-5) << "worker " << me;
    const CommCounters c = setup.sync->counters();
    EXPECT_EQ(c.bytes_sent, kSteps * M * 4) << "each worker pushes M floats per step";
    EXPECT_EQ(c.bytes_recv, kSteps * M * 4) << "each worker pulls M floats per step";
    workers.barrier();  // every reply of the last step has been sent
    shard = static_cast<PsSync&>(*setup.sync).server_counters();
    setup.sync.reset();  // goodbye
  }
  const int N = world().size() -
                (cfg.get_bool("ps.colocated") ? 0 : static_cast<int>(cfg.get_int("ps.servers")));
  const double in = world().allreduce_sum(static_cast<double>(shard.payload_bytes_in));
  const double out = world().allreduce_sum(static_cast<double>(shard.payload_bytes_out));
  EXPECT_EQ(in, static_cast<double>(N * kSteps * M * 4)) << "servers receive N·M per step";
  EXPECT_EQ(out, static_cast<double>(N * kSteps * M * 4)) << "servers send N·M per step";
  EXPECT_EQ(world().allreduce_sum(static_cast<double>(shard.rejected)), 0.0);
}

TEST(PsUnderMpi, TrainingWithSyncPsEndsWithinOneE5OfSyncMpi) {
  const std::string base = ::psar::testing::small_mlp_config("mpi", 50).dump();
  Config ps_cfg = config(base);
  ps_cfg.set("sync.backend=ps");
  const TrainResult ps = train(world(), ps_cfg);
  const TrainResult mpi = train(world(), config(base));
  if (ps.server) return;
  EXPECT_EQ(ps.steps, 50);
  EXPECT_LE(testing::relative_difference(mpi.params, ps.params), 1e-5);
}


// Under ps.security curve (--set ps.security=curve): while the job trains,
// worker 0 also connects to every shard as two strangers — a plain socket
// and a CURVE client with a key pair of its own — each pushing zeros and
// pulling with the job's token. They get nothing, every shard counts them,
// and every worker ends with parameters bitwise equal to the same job's
// without them.
TEST(PsUnderMpi, CurveRefusesStrangersAndTrainsBitwiseAsWithoutThem) {
  const Config cfg = config();
  if (cfg.get_string("ps.security") != "curve") GTEST_SKIP() << "needs --set ps.security=curve";
  constexpr int64_t kSteps = 20, M = 3001;
  constexpr double kReplyWait = 1.0;
  const ps::PsOptions po = ps_options(cfg, optimizer_options(cfg));
  const std::vector<float> initial = ps::testing::initial_params(M);
  struct Outcome {
    std::vector<float> params;
    double refused = 0, frames = 0;
  };
  auto run = [&](bool attacked) {
    ps::PsRank me = ps::launch_ps(world(), po, initial);
    Outcome out;
    int64_t refused = 0;
    if (me.server) {
      me.server->run();
      refused = me.server->counters().refused;
    } else {
      std::vector<float> params(static_cast<size_t>(M));
      std::thread attacker;
      size_t frames = 0;
      if (attacked && me.worker == 0)
        attacker = std::thread([&] {
          for (const auto& shard : me.shards)
            for (auto kind : {ps::testing::Intruder::kPlain, ps::testing::Intruder::kOwnKeys})
              frames += ps::testing::intrude(shard, kind, me.token, kReplyWait, [] {});
        });
      for (int64_t t = 0; t < kSteps; ++t)
        me.client->push_pull(ps::testing::make_grad(me.worker, t, M), params);
      if (attacker.joinable()) attacker.join();  // before the goodbye: the shards still listen
      me.client->close();
      if (me.server_thread) {
        me.server_thread->join();
        refused = me.server_thread->server().counters().refused;
      }
      out.params = params;
      out.frames = static_cast<double>(frames);
    }
    out.refused = world().allreduce_sum(static_cast<double>(refused));
    out.frames = world().allreduce_sum(out.frames);
    return out;
  };
  const Outcome quiet = run(false);
  const Outcome attacked = run(true);
  const int S = po.colocated ? world().size() : po.servers;
  EXPECT_EQ(quiet.refused, 0.0);
  EXPECT_GE(attacked.refused, 2.0 * S) << "each shard refuses two strangers";
  EXPECT_EQ(attacked.frames, 0.0) << "a stranger got a reply";
  ASSERT_EQ(attacked.params.size(), quiet.params.size());
  EXPECT_EQ(std::memcmp(attacked.params.data(), quiet.params.data(),
                        quiet.params.size() * sizeof(float)),
            0)
      << "the strangers changed the parameters";
}

}  // namespace
}  // namespace psar

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  psar::MpiRuntime mpi(&argc, &argv);
  psar::ops::set_blas_threads(1);
  for (int i = 1; i + 1 < argc; ++i)
    if (std::string(argv[i]) == "--set") psar::g_overrides.push_back(argv[++i]);
  if (psar::world().rank() != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  const int rc = RUN_ALL_TESTS();
  return psar::world().allreduce_max(rc) != 0 ? 1 : 0;
}
