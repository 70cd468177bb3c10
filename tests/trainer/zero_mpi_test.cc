// Sharded training state under mpirun (sync/zero_sync.h): stages 1, 2 (with
// overlap) and 3 (with prefetch on the communication thread, the GPT inside
// (2, 2, 2) with its embedding tied across the pipeline) after 10 steps
// equal the same backend's ZeRO-0 run within
// 1e-6 relative (bitwise for ring and halving_doubling under data
// parallelism alone: the same sums per element, as in-process), every rank
// bitwise the same as rank 0 — mpi
// (MPI_Reduce_scatter and MPI_Allgatherv against MPI_Allreduce), ring and
// halving_doubling over the MPI transport; MLP and GPT, SGD and Adam.
// Run with -np 4 (ZeroMpi: d = 4, and d = 2 inside t = 2) and -np 8
// (ZeroMpi3d: (p, t, d) = (2, 2, 2)).

#include <gtest/gtest.h>

#include "comm/mpi_comm.h"
#include "tests/common/mpi_world.h"
#include "tests/trainer/three_d_fixture.h"
#include "tests/trainer/train_fixture.h"
#include "trainer/trainer.h"

namespace psar {
namespace {

MpiComm& world() { return testing::mpi_world(); }

Config with(const Config& cfg, const std::vector<std::string>& sets) {
  return Config::load_string(cfg.dump(), config_schema(), sets);
}

// Every stage of `base` against its ZeRO-0 run; rank 0's parameters
// broadcast to check that every rank holds the same bits. Stage 3 (with
// prefetch) where `stage3` (the in-process tests sweep it over every
// algorithm; here the MPI transport and MPI's own pair).
void expect_stages_equal_zero0(const Config& base, const std::string& what, bool stage3 = true,
                               bool bitwise = false) {
  const auto zero0 = train(world(), base).params;
  std::vector<std::vector<std::string>> stages = {
      {"sync.zero=1"}, {"sync.zero=2", "sync.overlap=true"}};
  if (stage3) stages.push_back({"sync.zero=3", "sync.overlap=true"});
  for (const std::vector<std::string>& sets : stages) {
    const auto got = train(world(), with(base, sets)).params;
    ASSERT_EQ(got.size(), zero0.size());
    EXPECT_LE(testing::relative_difference(zero0, got), 1e-6) << what << " " << sets[0];
    if (bitwise) EXPECT_EQ(got, zero0) << what << " " << sets[0] << ": not bitwise";
    auto first = got;
    world().broadcast_bytes(std::as_writable_bytes(std::span<float>(first)), 0);
    EXPECT_EQ(first, got) << what << ": rank " << world().rank() << " differs from rank 0";
  }
}

// (algorithm, the optimizer its MLP starts with: 0 sgd, 1 adam)
class ZeroMpi : public ::testing::TestWithParam<std::pair<std::string, int>> {};

// Each algorithm runs each model once, the optimizers alternating between
// the algorithms so that every model meets SGD and Adam on the MPI
// transport (the in-process tests sweep every combination).
TEST_P(ZeroMpi, StagesEqualZero0ForMlpAndGptWithSgdAndAdam) {
  ASSERT_EQ(world().size(), 4);
  const auto [algo, first] = GetParam();
  const bool stage3 = algo != "halving_doubling";  // CI time: in-process covers it
  const bool bitwise = algo != "mpi";  // MPI's reduce-scatter may sum in another order
  const char* opts[] = {"sgd", "adam"};
  auto sets = [&](int k) {
    return std::vector<std::string>{"sync.backend=" + algo, "train.steps=10",
                                    std::string("optimizer.type=") + opts[(first + k) % 2],
                                    "optimizer.lr=0.01"};
  };
  expect_stages_equal_zero0(with(testing::small_mlp_config(algo), sets(0)),
                            algo + " mlp d=4 " + opts[first % 2], stage3, bitwise);
  expect_stages_equal_zero0(testing::gpt_3d_config({1, 1, 4}, sets(1)),
                            algo + " gpt d=4 " + opts[(first + 1) % 2], stage3, bitwise);
  expect_stages_equal_zero0(testing::gpt_3d_config({1, 2, 2}, sets(0)),
                            algo + " gpt t=2 d=2 " + opts[first % 2], stage3);
}

INSTANTIATE_TEST_SUITE_P(Backends, ZeroMpi,
                         ::testing::Values(std::pair<std::string, int>{"mpi", 0},
                                           std::pair<std::string, int>{"ring", 1},
                                           std::pair<std::string, int>{"halving_doubling", 0}),
                         [](const auto& info) { return info.param.first; });

TEST(ZeroMpi3d, A222GptShardsOverEachDataParallelGroup) {
  ASSERT_EQ(world().size(), 8);
  // (Each algorithm with one optimizer: in-process, Zero3d runs both.)
  for (const auto& [algo, opt] : {std::pair{"mpi", "adam"}, std::pair{"ring", "sgd"}})
    expect_stages_equal_zero0(
        testing::gpt_3d_config({2, 2, 2, "1f1b", 1, true},
                               {std::string("sync.backend=") + algo, "train.steps=10",
                                std::string("optimizer.type=") + opt, "optimizer.lr=0.01"}),
        std::string(algo) + " gpt (2, 2, 2) " + opt);
}

}  // namespace
}  // namespace psar
