// Pipeline training under mpirun -np 4, over MPI point-to-point: a
// representative subset of the in-process sweep — every schedule, p = 4 with
// d = 1 and p = 2 with d = 2 (the gradient sync over the replicas on MPI
// too) — ends with the parameters each rank computes alone on MPI_COMM_SELF
// for the serial model (‖Δθ‖/‖θ‖ ≤ 1e-5 after 10 steps).

#include <gtest/gtest.h>

#include "comm/mpi_comm.h"
#include "tests/common/mpi_world.h"
#include "tests/pp/pipeline_fixture.h"
#include "tests/trainer/train_fixture.h"
#include "trainer/trainer.h"

namespace psar {
namespace {

using testing::PipelineCase;

MpiComm& world() { return testing::mpi_world(); }

class MpiPipeline : public ::testing::TestWithParam<PipelineCase> {};

TEST_P(MpiPipeline, EqualsTheSerialModel) {
  const PipelineCase c = GetParam();
  ASSERT_EQ(c.p * c.d, world().size()) << "run with mpirun -np " << c.p * c.d;
  const TrainResult parallel = train(world(), testing::pipeline_mlp_config(c));
  MpiComm self(MPI_COMM_SELF);
  const TrainResult serial = train(self, testing::pipeline_mlp_config({"", 1, 1, 1}));
  EXPECT_LE(testing::relative_difference(serial.params, parallel.params), 1e-5)
      << testing::describe(c) << " on rank " << world().rank();
  EXPECT_EQ(parallel.workers, c.d);
}

INSTANTIATE_TEST_SUITE_P(
    Schedules, MpiPipeline,
    ::testing::Values(PipelineCase{"gpipe", 4, 4, 1, 1}, PipelineCase{"1f1b", 4, 8, 1, 1},
                      PipelineCase{"interleaved", 4, 8, 2, 1}, PipelineCase{"zb_h1", 4, 12, 1, 1},
                      PipelineCase{"1f1b", 2, 4, 1, 2}, PipelineCase{"interleaved", 2, 4, 2, 2},
                      PipelineCase{"zb_h1", 2, 6, 1, 2}),
    [](const auto& info) {
      const PipelineCase& c = info.param;
      return c.schedule + "_p" + std::to_string(c.p) + "_m" + std::to_string(c.m) + "_v" +
             std::to_string(c.v) + "_d" + std::to_string(c.d);
    });

// The GPT cut into stages, its tied head's gradient summed over MPI between
// the first and the last stage: against the serial GPT after 6 steps.
class MpiGptPipeline : public ::testing::TestWithParam<PipelineCase> {};

TEST_P(MpiGptPipeline, EqualsTheSerialGpt) {
  const PipelineCase c = GetParam();
  ASSERT_EQ(c.p * c.d, world().size()) << "run with mpirun -np " << c.p * c.d;
  const TrainResult parallel = train(world(), testing::pipeline_gpt_config(c));
  MpiComm self(MPI_COMM_SELF);
  const TrainResult serial = train(self, testing::pipeline_gpt_config({"", 1, 1, 1}));
  EXPECT_LE(testing::relative_difference(serial.params, parallel.params), 1e-5)
      << testing::describe(c) << " on rank " << world().rank();
}

INSTANTIATE_TEST_SUITE_P(Schedules, MpiGptPipeline,
                         ::testing::Values(PipelineCase{"1f1b", 4, 8, 1, 1},
                                           PipelineCase{"zb_h1", 2, 4, 1, 2}),
                         [](const auto& info) {
                           const PipelineCase& c = info.param;
                           return c.schedule + "_p" + std::to_string(c.p) + "_m" +
                                  std::to_string(c.m) + "_d" + std::to_string(c.d);
                         });

}  // namespace
}  // namespace psar
