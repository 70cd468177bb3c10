// Tensor parallelism under mpirun -np 4 (real processes, the MPI transport):
//  - the world is cut into groups of t adjacent ranks (t ∈ {1, 2, 4}); each
//    group runs the GPT with its all-reduces by `ring` and by `mpi`
//    (MPI_Allreduce), and every rank checks its loss, logits and gradient
//    shards against the serial model it computes alone (1e-5 relative), and
//    the 4 all-reduces per layer;
//  - psar's trainer with parallel.tp = t (d = 4/t) gives, step by step, the
//    data-parallel mean loss of the serial run on MPI_COMM_SELF.

#include <gtest/gtest.h>

#include "tests/common/mpi_world.h"
#include "comm/mpi_comm.h"
#include "core/ops.h"
#include "gpt_fixture.h"
#include "tp_test_util.h"
#include "trainer/schema.h"
#include "trainer/trainer.h"

namespace psar {
namespace {

using namespace tp_testing;

MpiComm& world() { return testing::mpi_world(); }

struct Case {
  int t;
  std::string allreduce;
};

class MpiGpt : public ::testing::TestWithParam<Case> {};

TEST_P(MpiGpt, GroupsOfTRanksMatchTheSerialModel) {
  const auto c = GetParam();
  ASSERT_EQ(world().size() % c.t, 0);
  auto group = world().split(world().rank() / c.t, world().rank());
  ASSERT_EQ(group->size(), c.t);
  const GptOptions o = tiny(MlpSplit::kColumnRow, 0.1f);
  const Batch batch = batch_of(3, o, 1);
  auto serial = build(o);
  const double want = forward_backward(*serial->model, batch);
  auto algo = make_allreducer(c.allreduce);
  auto mine = build(o, group.get(), algo.get());
  const double got = forward_backward(*mine->model, batch);
  EXPECT_NEAR(got, want, 1e-5 * want);
  expect_shards_match(mine->store, *mine->model->sharded_params(), serial->store, true, 0.0);
  expect_shards_match(mine->store, *mine->model->sharded_params(), serial->store, false);
  const TpCounters& k = mine->model->tp().counters;
  EXPECT_EQ(k.g_forward, 2 * o.layers);
  EXPECT_EQ(k.f_backward, 2 * o.layers);
  EXPECT_EQ(k.allreduces, c.t > 1 ? 4 * o.layers : 0);
  EXPECT_EQ(k.allreduce_floats, c.t > 1 ? 4 * o.layers * 3 * o.seq_len * o.d_model : 0);
}

INSTANTIATE_TEST_SUITE_P(Groups, MpiGpt,
                         ::testing::Values(Case{1, "ring"}, Case{2, "ring"}, Case{4, "ring"},
                                           Case{2, "mpi"}, Case{4, "mpi"}),
                         [](const auto& info) {
                           return "t" + std::to_string(info.param.t) + "_" + info.param.allreduce;
                         });

Config gpt_config(int t, float dropout) {
  return Config::load_string(
      "model: {type: gpt, layers: 2, d_model: 32, heads: 4, seq_len: 16, init_std: 0.05, "
      "dropout: " +
          std::to_string(dropout) +
          "}\n"
          "data: {dataset: synthetic_tokens, synthetic_samples: 256}\n"
          "optimizer: {type: adam, lr: 0.003}\n"
          "train: {steps: 20, batch_size: 8, seed: 3, log_every: 1000}\n"
          "sync: {backend: mpi}\n"
          "parallel: {tp: " +
          std::to_string(t) + ", tp_allreduce: ring}\n",
      config_schema());
}

class MpiTrain : public ::testing::TestWithParam<int> {};

TEST_P(MpiTrain, TheDataParallelMeanLossFollowsTheSerialCurve) {
  const int t = GetParam();
  // Dropout masks are drawn per local batch, so only d = 1 runs can use it.
  const float dropout = t == world().size() ? 0.1f : 0.0f;
  const TrainResult parallel = train(world(), gpt_config(t, dropout));
  MpiComm self(MPI_COMM_SELF);
  const TrainResult serial = train(self, gpt_config(1, dropout));
  ASSERT_EQ(parallel.losses.size(), serial.losses.size());
  EXPECT_EQ(parallel.workers, world().size() / t);
  for (size_t s = 0; s < serial.losses.size(); ++s) {
    // Every rank's local mean; the world average weighs each data-parallel
    // slice t times, so it is the mean over slices = the global-batch loss.
    const double mean = world().allreduce_sum(parallel.losses[s]) / world().size();
    EXPECT_NEAR(mean, serial.losses[s], 1e-5 * serial.losses[s]) << "step " << s + 1;
  }
  EXPECT_LT(serial.losses.back(), serial.losses.front() - 0.1);
}

INSTANTIATE_TEST_SUITE_P(Degrees, MpiTrain, ::testing::Values(1, 2, 4),
                         [](const auto& info) { return "t" + std::to_string(info.param); });

}  // namespace
}  // namespace psar
