// 3D parallelism under mpirun -np 8, over MPI point-to-point: the GPT on the
// grids (p, t, d) = (2, 2, 2) — with and without scatter/gather —, (4, 2, 1)
// and (2, 1, 4), with `sync.backend: mpi` on (2, 2, 2), and the MLP on
// (2, 1, 4), end with the parameters each rank
// computes alone on MPI_COMM_SELF for the serial model (‖Δθ‖/‖θ‖ ≤ 1e-5
// after 10 steps).

#include <gtest/gtest.h>

#include "comm/mpi_comm.h"
#include "tests/common/mpi_world.h"
#include "tests/trainer/three_d_fixture.h"
#include "tests/trainer/train_fixture.h"
#include "trainer/trainer.h"

namespace psar {
namespace {

using testing::Grid3d;

MpiComm& world() { return testing::mpi_world(); }

class Mpi3d : public ::testing::TestWithParam<Grid3d> {};

TEST_P(Mpi3d, TheGptEqualsTheSerialModel) {
  const Grid3d g = GetParam();
  ASSERT_EQ(g.world(), world().size()) << "run with mpirun -np " << g.world();
  const TrainResult parallel = train(world(), testing::gpt_3d_config(g));
  MpiComm self(MPI_COMM_SELF);
  const TrainResult serial = train(self, testing::gpt_3d_config({}));
  EXPECT_LE(testing::relative_difference(serial.params, parallel.params), 1e-5)
      << describe(g) << " on rank " << world().rank();
  EXPECT_EQ(parallel.workers, g.d);
}

INSTANTIATE_TEST_SUITE_P(Grids, Mpi3d,
                         ::testing::Values(Grid3d{2, 2, 2, "1f1b", 1, false},
                                           Grid3d{2, 2, 2, "interleaved", 2, true},
                                           Grid3d{4, 2, 1, "1f1b", 1, true},
                                           Grid3d{2, 1, 4, "zb_h1", 1, false}),
                         [](const auto& info) {
                           const Grid3d& g = info.param;
                           return g.schedule + "_p" + std::to_string(g.p) + "_t" +
                                  std::to_string(g.t) + "_d" + std::to_string(g.d) +
                                  (g.sg ? "_sg" : "");
                         });

// Sequence parallelism on (t, p, d) = (2, 2, 2) equals the run without it
// (1e-5), and selective and full recomputation end bitwise where none ends.
TEST(Mpi3dSeqPar, SequenceParallelAndRecomputationEqualThePlainRun) {
  const Grid3d g{2, 2, 2, "1f1b", 1, false};
  ASSERT_EQ(g.world(), world().size()) << "run with mpirun -np " << g.world();
  auto cfg = [&](bool sp, const std::string& recompute) {
    return testing::gpt_3d_config(g, {std::string("parallel.sequence_parallel=") + (sp ? "true" : "false"),
                                      "train.recompute=" + recompute, "model.dropout=0.1"});
  };
  const TrainResult plain = train(world(), cfg(false, "none"));
  const TrainResult sp = train(world(), cfg(true, "none"));
  EXPECT_LE(testing::relative_difference(plain.params, sp.params), 1e-5) << "rank " << world().rank();
  for (const char* mode : {"selective", "full"})
    EXPECT_EQ(train(world(), cfg(true, mode)).params, sp.params) << mode << " on rank " << world().rank();
}

// Open MPI's own allreduce as the data-parallel sync of each slice.
TEST(Mpi3dSync, MpiAllreduceSyncsTheReplicasOfEachSlice) {
  const Grid3d g{2, 2, 2, "1f1b", 1, true};
  const TrainResult parallel = train(world(), testing::gpt_3d_config(g, {"sync.backend=mpi"}));
  MpiComm self(MPI_COMM_SELF);
  const TrainResult serial = train(self, testing::gpt_3d_config({}));
  EXPECT_LE(testing::relative_difference(serial.params, parallel.params), 1e-5);
}

TEST(Mpi3dMlp, TheMlpOnTwoStagesOfFourReplicasEqualsTheSerialModel) {
  const Grid3d g{2, 1, 4, "1f1b", 1, false};
  const TrainResult parallel = train(world(), testing::mlp_3d_config(g));
  MpiComm self(MPI_COMM_SELF);
  const TrainResult serial = train(self, testing::mlp_3d_config({}));
  EXPECT_LE(testing::relative_difference(serial.params, parallel.params), 1e-5);
}

}  // namespace
}  // namespace psar
