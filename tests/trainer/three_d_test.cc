// 3D parallelism in-process: the GPT trained 10 steps on a (p, t, d) grid
// equals the serial model (np = 1, the same global batch) within 1e-5
// relative — every grid with p·t·d ∈ {1, 2, 4, 8}, 1F1B and interleaved
// (v = 2) with and without scatter/gather, GPipe and ZB-H1 at (2, 2, 2), the
// other rank orders — and so does the MLP where t = 1. The run files: the
// per-axis floats equal their closed forms (worked out here from the model's
// sizes, not read from the code that counts them), scatter/gather cuts the
// pipeline's bytes exactly t×, and the measured peak of the activations per
// stage equals the simulator's in-flight count weighed by the GPT's
// activation size computed from its layer shapes. Every grid the model
// cannot use is a ConfigError naming the keys and values.

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <functional>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>

#include "allreduce/allreducer.h"
#include "comm/inproc_comm.h"
#include "core/errors.h"
#include "core/ops.h"
#include "modelpar/grid.h"
#include "modelpar/pp/generators.h"
#include "modelpar/pp/simulate.h"
#include "tests/trainer/three_d_fixture.h"
#include "tests/trainer/train_fixture.h"
#include "trainer/trainer.h"

namespace psar {
namespace {

using ::testing::HasSubstr;
using testing::Grid3d;
using testing::relative_difference;

using testing::train_grid;

const std::vector<float>& serial_gpt() {
  static const std::vector<float> params = train_grid(1, testing::gpt_3d_config({}));
  return params;
}

const std::vector<float>& serial_mlp() {
  static const std::vector<float> params = train_grid(1, testing::mlp_3d_config({}));
  return params;
}

std::string case_name(const ::testing::TestParamInfo<Grid3d>& info) {
  const Grid3d& g = info.param;
  return g.schedule + "_p" + std::to_string(g.p) + "_t" + std::to_string(g.t) + "_d" +
         std::to_string(g.d) + "_v" + std::to_string(g.v) + (g.sg ? "_sg" : "");
}

class Gpt3d : public ::testing::TestWithParam<Grid3d> {
 protected:
  static void SetUpTestSuite() { ops::set_blas_threads(1); }
};

TEST_P(Gpt3d, EqualsTheSerialModelAfterTenSteps) {
  const Grid3d g = GetParam();
  const auto parallel = train_grid(g.world(), testing::gpt_3d_config(g));
  ASSERT_EQ(parallel.size(), serial_gpt().size());
  EXPECT_LE(relative_difference(serial_gpt(), parallel), 1e-5) << describe(g);
}

// Every (p, t, d) with p·t·d ∈ {1, 2, 4, 8}: 1F1B, and interleaved v = 2
// where 8 blocks allow p·v; scatter/gather wherever a stage has a TP group
// and a neighbour.
std::vector<Grid3d> gpt_grids() {
  std::vector<Grid3d> grids;
  for (int n : {1, 2, 4, 8})
    for (int p = 1; p <= n; p *= 2)
      for (int t = 1; p * t <= n; t *= 2) {
        const int d = n / (p * t);
        for (int v : {1, 2}) {
          if (2 * p * v > 16) continue;
          const std::string kind = v == 1 ? "1f1b" : "interleaved";
          grids.push_back({p, t, d, kind, v, false});
          if (p > 1 && t > 1) grids.push_back({p, t, d, kind, v, true});
        }
      }
  for (const char* kind : {"gpipe", "zb_h1"})
    for (bool sg : {false, true}) grids.push_back({2, 2, 2, kind, 1, sg});
  return grids;
}

INSTANTIATE_TEST_SUITE_P(Grids, Gpt3d, ::testing::ValuesIn(gpt_grids()), case_name);

TEST(Gpt3dCheck, TheComparisonCanFailTrainingMovedTheParameters) {
  const auto start = train_grid(1, testing::gpt_3d_config({}, {"train.steps=1", "optimizer.lr=0"}));
  EXPECT_GT(relative_difference(serial_gpt(), start), 1e-3);
}

// The world rank of (pp, tp, dp) under each order, as docs/parallelism_3d.md
// writes it, and back.
TEST(GridOrders, RanksFollowTheDocumentedFormulas) {
  const int p = 2, t = 4, d = 3;
  const std::map<std::string, std::function<int(int, int, int)>> formula{
      {"tp-dp-pp", [&](int pp, int tp, int dp) { return (pp * d + dp) * t + tp; }},
      {"tp-pp-dp", [&](int pp, int tp, int dp) { return (dp * p + pp) * t + tp; }},
      {"dp-tp-pp", [&](int pp, int tp, int dp) { return (pp * t + tp) * d + dp; }},
      {"pp-tp-dp", [&](int pp, int tp, int dp) { return (dp * t + tp) * p + pp; }}};
  for (const auto& [order, rank_of] : formula) {
    const GridShape shape = make_grid_shape(p * t * d, t, p, order);
    for (int pp = 0; pp < p; ++pp)
      for (int tp = 0; tp < t; ++tp)
        for (int dp = 0; dp < d; ++dp) {
          const int rank = rank_of(pp, tp, dp);
          EXPECT_EQ(grid_rank(shape, {tp, dp, pp}), rank) << order;
          const GridCoord c = grid_coord(shape, rank);
          EXPECT_EQ(c.pp, pp);
          EXPECT_EQ(c.tp, tp);
          EXPECT_EQ(c.dp, dp) << order;
        }
  }
}

TEST(Gpt3dCheck, OtherRankOrdersComputeTheSameModel) {
  for (const char* order : {"tp-pp-dp", "dp-tp-pp", "pp-tp-dp"}) {
    const auto parallel = train_grid(
        8, testing::gpt_3d_config({2, 2, 2, "1f1b", 1, true}, {std::string("parallel.order=") + order}));
    EXPECT_LE(relative_difference(serial_gpt(), parallel), 1e-5) << order;
  }
}

// Every point-to-point allreduce as the data-parallel sync of a 3D run
// (`mpi` runs under mpirun: three_d_mpi_test.cc).
class Gpt3dSync : public ::testing::TestWithParam<std::string> {
 protected:
  static void SetUpTestSuite() { ops::set_blas_threads(1); }
};

TEST_P(Gpt3dSync, EveryAllreduceSyncsTheReplicasOfEachSlice) {
  const auto parallel = train_grid(
      8, testing::gpt_3d_config({2, 2, 2, "1f1b", 1, true}, {"sync.backend=" + GetParam()}));
  EXPECT_LE(relative_difference(serial_gpt(), parallel), 1e-5) << GetParam();
}

std::vector<std::string> point_to_point_allreduces() {
  std::vector<std::string> names;
  for (const auto& e : allreducer_registry())
    if (!e.device && !e.needs_mpi) names.push_back(e.name);
  return names;
}

INSTANTIATE_TEST_SUITE_P(Backends, Gpt3dSync, ::testing::ValuesIn(point_to_point_allreduces()),
                         [](const auto& info) { return info.param; });

class Mlp3d : public ::testing::TestWithParam<Grid3d> {
 protected:
  static void SetUpTestSuite() { ops::set_blas_threads(1); }
};

TEST_P(Mlp3d, EqualsTheSerialModelAfterTenSteps) {
  const Grid3d g = GetParam();
  const auto parallel = train_grid(g.world(), testing::mlp_3d_config(g));
  EXPECT_LE(relative_difference(serial_mlp(), parallel), 1e-5) << describe(g);
}

std::vector<Grid3d> mlp_grids() {
  std::vector<Grid3d> grids;
  for (int n : {1, 2, 4, 8})
    for (int p = 1; p <= n; p *= 2)
      for (int v : {1, 2})
        if (p * v <= 8) grids.push_back({p, 1, n / p, v == 1 ? "1f1b" : "interleaved", v, false});
  return grids;
}

INSTANTIATE_TEST_SUITE_P(Grids, Mlp3d, ::testing::ValuesIn(mlp_grids()), case_name);

// ---- the run files ---------------------------------------------------------

class RunFiles3d : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("psar_3d_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // A CSV of the run as rows of named fields.
  std::vector<std::map<std::string, std::string>> csv(const std::string& file) const {
    return testing::read_csv_rows(dir_ / file);
  }
  static int64_t num(const std::map<std::string, std::string>& row, const std::string& key) {
    return std::stoll(row.at(key));
  }
  std::filesystem::path dir_;
};

// The GPT of gpt_3d_config: L = 8 blocks, d = 32, H = 8, T = 8, V = 16, B = 16.
constexpr int64_t kL = 8, kD = 32, kH = 8, kT = 8, kV = 16, kB = 16;

// Parameters of one block on one TP rank: two layer norms and the two
// row-parallel biases whole (6d), the rest — Q|K|V weight and bias, output
// weight, MLP weights and first bias — cut t ways ((12d² + 7d)/t).
int64_t block_params(int64_t t) { return 6 * kD + (12 * kD * kD + 7 * kD) / t; }

TEST_F(RunFiles3d, PerAxisFloatsEqualTheirClosedForms) {
  for (bool sg : {false, true}) {
    const Grid3d g{2, 2, 2, "1f1b", 1, sg};
    train_grid(8, testing::gpt_3d_config(g), dir_.string());
    const int64_t m = g.m(), b = kB / (g.d * m), bsh = b * kT * kD, n = kL / g.p;
    const auto rows = csv("axes.csv");
    ASSERT_EQ(rows.size(), 8u * 10);
    for (const auto& r : rows) {
      const int stage = static_cast<int>(num(r, "pp"));
      // TP: 4 all-reduces of b·T·d per block per micro-batch (forward and backward).
      EXPECT_EQ(num(r, "tp_allreduces"), 4 * n * m);
      EXPECT_EQ(num(r, "tp_floats"), 4 * n * m * bsh);
      EXPECT_EQ(num(r, "tp_floats_formula"), 4 * n * m * bsh);
      // ring over t = 2: each rank sends half of every all-reduce twice.
      EXPECT_EQ(num(r, "tp_bytes_sent"), 4 * n * m * bsh * 4);
      // PP: b·T·d per boundary per micro-batch one way (stage 0: activations,
      // stage 1: gradients); 1/t of it with scatter/gather.
      const int64_t pp = m * bsh / (sg ? g.t : 1);
      EXPECT_EQ(num(r, "pp_floats_sent"), pp);
      EXPECT_EQ(num(r, "pp_floats_formula"), pp);
      EXPECT_EQ(num(r, "pp_bytes_sent"), pp * 4);
      // The all-gathers that put the slices together (ring, t = 2: half of each).
      EXPECT_EQ(num(r, "pp_gather_bytes_sent"), sg ? m * bsh / 2 * 4 : 0);
      // DP: the stage's parameter count: the embeddings on stage 0, LN_f and
      // the tied head's copy of wte on stage 1, and its n blocks.
      const int64_t params =
          n * block_params(g.t) + (stage == 0 ? kV * kD + kT * kD : 2 * kD + kV * kD);
      EXPECT_EQ(num(r, "dp_floats"), params);
      EXPECT_EQ(num(r, "dp_floats_formula"), params);
      // ring over d = 2: 2(d−1)/d of the gradient.
      EXPECT_EQ(num(r, "dp_bytes_sent"), params * 4);
    }
    // tp.csv: the TP columns alone, one row per step and rank.
    EXPECT_EQ(csv("tp.csv").size(), 8u * 10);
    std::filesystem::remove_all(dir_);
  }
}

TEST_F(RunFiles3d, ScatterGatherCutsThePipelinesBytesExactlyTTimes) {
  for (int t : {2, 4}) {
    int64_t bytes[2] = {0, 0};
    for (bool sg : {false, true}) {
      train_grid(2 * t, testing::gpt_3d_config({2, t, 1, "1f1b", 1, sg}), dir_.string());
      for (const auto& r : csv("axes.csv")) bytes[sg] += num(r, "pp_bytes_sent");
      std::filesystem::remove_all(dir_);
    }
    EXPECT_GT(bytes[0], 0);
    EXPECT_EQ(bytes[0], t * bytes[1]) << "t = " << t;
  }
}

// Floats of one micro-batch's activations on a chunk of n blocks of the GPT
// above, b sequences, TP degree t, counted from the layer shapes (N = b·T):
// the residual stream into each block and out of the chunk and its gradient
// ((n + 2)·N·d); per block the layer norms' inputs, outputs and gradients
// (7·N·d) and statistics (4·N), attention's Q|K|V and its gradient
// (2·3·N·d/t), probabilities (b·H/t·T²), context and its gradient (2·N·d/t)
// and output gradient (N·d), the MLP's hidden pre-activation, activation and
// their gradients (4·N·4d/t) and output gradient (N·d); the back's LN_f
// output and gradient, statistics, logits and their gradient.
int64_t gpt_chunk_floats(int64_t n, int64_t b, int64_t t, bool back) {
  const int64_t N = b * kT;
  const int64_t attention = 6 * N * kD / t + b * (kH / t) * kT * kT + 2 * N * kD / t + N * kD;
  const int64_t mlp = 4 * N * 4 * kD / t + N * kD;
  int64_t floats = (n + 2) * N * kD + n * (7 * N * kD + 4 * N + attention + mlp);
  if (back) floats += 2 * N * kD + 2 * N + 2 * N * kV;
  return floats;
}

TEST_F(RunFiles3d, PeakActivationBytesPerStageEqualTheSimulatorsPrediction) {
  const Grid3d g{2, 2, 1, "1f1b", 1, false};
  train_grid(4, testing::gpt_3d_config(g), dir_.string());
  const pp::Schedule s = pp::make_schedule("1f1b", {g.p, g.m(), 1, 0});
  const std::vector<int> in_flight = pp::peak_activations(s);
  const int64_t b = kB / (g.d * g.m());
  int checked = 0;
  for (const auto& r : csv("pipeline.csv")) {
    if (r.at("stage") == "all") continue;
    const int stage = std::stoi(r.at("stage"));
    const int64_t want = in_flight[static_cast<size_t>(stage)] *
                         gpt_chunk_floats(kL / g.p, b, g.t, stage == g.p - 1) * 4;
    EXPECT_EQ(std::stoll(r.at("peak_bytes")), want) << "stage " << stage << ", measured";
    EXPECT_EQ(std::stoll(r.at("peak_bytes_sim")), want) << "stage " << stage << ", predicted";
    ++checked;
  }
  EXPECT_EQ(checked, g.p);
}

// ---- bad grids ---------------------------------------------------------------

TEST(Bad3dGrids, EachIsAConfigErrorNamingTheKeysAndValues) {
  const Grid3d ok{2, 2, 1};
  EXPECT_THAT(testing::train_config_error(4, testing::gpt_3d_config({1, 4, 1}, {"model.heads=6", "model.d_model=36"})),
              HasSubstr("model.heads = 6 attention heads cannot be split over parallel.tp = 4"));
  EXPECT_THAT(testing::train_config_error(4, testing::gpt_3d_config({1, 4, 1}, {"model.heads=2", "model.d_model=6"})),
              HasSubstr("model.d_model = 6 cannot be split over parallel.tp = 4"));
  EXPECT_THAT(testing::train_config_error(8, testing::gpt_3d_config({4, 2, 1, "interleaved", 4})),
              HasSubstr("more virtual stages (p·v = 16) than model layers (8)"));
  EXPECT_THAT(testing::train_config_error(6, testing::gpt_3d_config(ok)),
              HasSubstr("world size 6 is not divisible by parallel.tp × parallel.pp = 2 × 2"));
  try {  // the schema knows the orders: rejected as the config loads
    testing::gpt_3d_config(ok, {"parallel.order=pp-dp-tp"});
    ADD_FAILURE() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr("parallel.order: 'pp-dp-tp' is not one of tp-dp-pp"));
  }
  EXPECT_THAT(testing::train_config_error(4, testing::gpt_3d_config(ok, {"sync.backend=ps"})),
              HasSubstr("sync.backend ps runs data parallelism only"));
}

}  // namespace
}  // namespace psar
