// Data-parallel equivalence under mpirun -np 4: the 4-rank run of every
// backend (MPI_Allreduce first) ends with the parameters that rank 0 computes
// alone on MPI_COMM_SELF with the whole batch (‖Δθ‖/‖θ‖ ≤ 1e-5, 20 steps).

#include <gtest/gtest.h>

#include "allreduce/allreducer.h"
#include "comm/mpi_comm.h"
#include "tests/common/mpi_world.h"
#include "train_fixture.h"
#include "trainer/trainer.h"

namespace psar {
namespace {

MpiComm& world() { return testing::mpi_world(); }

class MpiEquivalence : public ::testing::TestWithParam<std::string> {};

TEST_P(MpiEquivalence, WorldMatchesOneRankAfterTwentySteps) {
  const Config cfg = testing::small_mlp_config(GetParam());
  const TrainResult parallel = train(world(), cfg);
  // Every rank compares against its own serial run (cheap for this model),
  // so every rank's replica is checked.
  MpiComm self(MPI_COMM_SELF);
  const TrainResult serial = train(self, cfg);
  EXPECT_LE(testing::relative_difference(serial.params, parallel.params), 1e-5)
      << GetParam() << " on rank " << world().rank();
  EXPECT_EQ(parallel.workers, world().size());
}

TEST(MpiEquivalence, FashionMnistMlpWithMpiAllreduce) {
  // The quick start's model and data, 20 steps of a 64-sample global batch.
  const Config cfg = Config::load_string(
      "model: {type: mlp, hidden: [256, 128]}\n"
      "data: {dataset: fashion_mnist, train_limit: 4096, test_limit: 512}\n"
      "optimizer: {type: sgd, lr: 0.05, momentum: 0.9}\n"
      "train: {steps: 20, batch_size: 64, seed: 5, log_every: 1000}\n"
      "sync: {backend: mpi}\n",
      config_schema());
  const TrainResult parallel = train(world(), cfg);
  MpiComm self(MPI_COMM_SELF);
  const TrainResult serial = train(self, cfg);
  EXPECT_LE(testing::relative_difference(serial.params, parallel.params), 1e-5);
  EXPECT_LT(parallel.final_loss, serial.losses.front());
}

INSTANTIATE_TEST_SUITE_P(Backends, MpiEquivalence, ::testing::ValuesIn(allreducer_names()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace psar
