// A parameter-server job under mpirun in which one worker rank fails after a
// few steps; expect_failure.sh asserts that the whole job then ends non-zero
// within the timeout instead of hanging.
//
//   ps_mpi_fault stall RANK [--set key=value ...]  rank RANK stops pushing and sleeps
//   ps_mpi_fault exit RANK [--set ...]             rank RANK _exit(0)s without MPI_Finalize
// With --set sync.overlap=true the culprit fails in the middle of a step
// pushed in parts (GradientSync::sync_range), after its back half.
//
// Every other rank behaves like psar's main(): an error is printed and the
// job is aborted (MPI_Abort), which also ends the sleeping rank.

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "comm/mpi_comm.h"
#include "tests/ps/ps_test_util.h"
#include "sync/ps_sync.h"
#include "trainer/schema.h"

int main(int argc, char** argv) {
  using namespace psar;
  MpiRuntime runtime(&argc, &argv);
  MpiComm world(MPI_COMM_WORLD);
  if (argc < 3) {
    std::fprintf(stderr, "usage: ps_mpi_fault stall|exit RANK [--set key=value ...]\n");
    return 2;
  }
  const std::string mode = argv[1];
  const int culprit = std::atoi(argv[2]);
  std::vector<std::string> overrides;
  for (int i = 3; i + 1 < argc; ++i)
    if (std::string(argv[i]) == "--set") overrides.push_back(argv[++i]);
  constexpr int64_t kSize = 10000, kStepsBefore = 3, kSteps = 20;
  try {
    const Config cfg = Config::load_string("", config_schema(), overrides);
    ParamStore store;
    store.add("w", {kSize}, Init::normal(0.1f));
    store.finalize(1);
    SyncInit init{world, sync_options(cfg), store, OptimizerOptions{}};
    SyncSetup setup = make_ps_sync(init);
    if (setup.serve) {
      setup.serve();
    } else {
      // With sync.overlap the steps go through sync_range in two halves (the
      // back half first, as a backward would) and finish(), and the culprit
      // fails between the halves: in the middle of an overlapped step.
      const bool staged = cfg.get_bool("sync.overlap");
      const auto half = static_cast<size_t>(kSize / 2);
      auto sync_back_half = [&] {
        setup.sync->sync_range(kSize / 2, store.params().subspan(half), store.grads().subspan(half));
      };
      for (int64_t t = 0; t < kSteps; ++t) {
        auto g = ps::testing::make_grad(setup.workers->rank(), t, kSize);
        std::copy(g.begin(), g.end(), store.grads().begin());
        if (staged) sync_back_half();
        if (world.rank() == culprit && t == kStepsBefore) {
          std::fprintf(stderr, "ps_mpi_fault: rank %d %s at step %ld\n", culprit, mode.c_str(),
                       static_cast<long>(t));
          std::fflush(stderr);
          if (mode == "exit") std::_Exit(0);
          std::this_thread::sleep_for(std::chrono::minutes(10));
        }
        if (!staged) {
          setup.sync->step(store.params(), store.grads());
          continue;
        }
        setup.sync->sync_range(0, store.params().first(half), store.grads().first(half));
        setup.sync->finish(store.params(), store.grads());
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ps_mpi_fault: error on rank %d: %s\n", world.rank(), e.what());
    std::fflush(stderr);
    MpiRuntime::abort(1);
  }
  std::fprintf(stderr, "ps_mpi_fault: rank %d finished without noticing the failure\n",
               world.rank());
  return 0;
}
