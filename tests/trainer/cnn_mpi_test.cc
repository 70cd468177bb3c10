// The CNN under mpirun -np 4 over MPI: plain data parallelism and the hybrid
// scheme at n = 4, each with the ring and with MPI's own allreduce as the
// sync, end with the parameters every rank computes alone on MPI_COMM_SELF
// for the serial model (‖Δθ‖/‖θ‖ ≤ 1e-5 after 10 steps).

#include <gtest/gtest.h>

#include "comm/mpi_comm.h"
#include "tests/common/mpi_world.h"
#include "tests/trainer/cnn_fixture.h"
#include "tests/trainer/train_fixture.h"
#include "trainer/trainer.h"

namespace psar {
namespace {

struct Case {
  bool hybrid;
  const char* sync;
};

class CnnMpi : public ::testing::TestWithParam<Case> {};

TEST_P(CnnMpi, EqualsTheSerialModel) {
  const Case c = GetParam();
  MpiComm& world = testing::mpi_world();
  const std::vector<std::string> sync = {std::string("sync.backend=") + c.sync};
  const TrainResult parallel = train(world, testing::cnn_config(c.hybrid, sync));
  MpiComm self(MPI_COMM_SELF);
  const TrainResult serial = train(self, testing::cnn_config(false));
  EXPECT_LE(testing::relative_difference(serial.params, parallel.params), 1e-5)
      << (c.hybrid ? "hybrid" : "dp") << " on rank " << world.rank() << " of " << world.size();
  EXPECT_NEAR(parallel.final_loss, serial.final_loss, 1e-5 * serial.final_loss);
}

INSTANTIATE_TEST_SUITE_P(Schemes, CnnMpi,
                         ::testing::Values(Case{false, "ring"}, Case{true, "ring"},
                                           Case{true, "mpi"}),
                         [](const auto& info) {
                           return std::string(info.param.hybrid ? "hybrid_" : "dp_") +
                                  info.param.sync;
                         });

}  // namespace
}  // namespace psar
