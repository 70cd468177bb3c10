// Sequence parallelism and activation recomputation in the GPT, in-process.
//
// Trained 10 steps through the real trainer on (t, p, d) ∈ {(2,1,1),
// (2,2,1), (2,2,2), (4,1,2)} with dropout 0.1: parallel.sequence_parallel
// ends within 1e-5 relative of the same grid without it, and
// train.recompute selective and full end bitwise where none ends (with and
// without sequence parallelism). The measured peak of the activations per
// stage (pipeline.csv) equals the in-flight count times one micro-batch's
// floats counted here from the layer shapes for every mode, and every
// steps.csv row names its mode. On one TP group,
// the work recomputation adds (block forwards, attention-core passes, the
// forward GEMMs' FLOPs) and the collectives sequence parallelism runs are
// counted against closed forms.

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "allreduce/allreducer.h"
#include "core/errors.h"
#include "core/ops.h"
#include "modelpar/pp/generators.h"
#include "modelpar/pp/simulate.h"
#include "tests/tp/gpt_fixture.h"
#include "tests/tp/tp_test_util.h"
#include "tests/trainer/three_d_fixture.h"
#include "tests/trainer/train_fixture.h"

namespace psar {
namespace {

using ::testing::HasSubstr;
using testing::Grid3d;
using testing::relative_difference;
using testing::train_grid;

struct Mode {
  bool sp = false;
  std::string recompute = "none";
};

Config config(const Grid3d& g, const Mode& mode, float dropout = 0.1f) {
  return testing::gpt_3d_config(
      g, {"parallel.sequence_parallel=" + std::string(mode.sp ? "true" : "false"),
          "train.recompute=" + mode.recompute, "model.dropout=" + std::to_string(dropout)});
}

std::string grid_name(const Grid3d& g) {
  return "t" + std::to_string(g.t) + "_p" + std::to_string(g.p) + "_d" + std::to_string(g.d);
}

// (t, p, d) = (2,1,1), (2,2,1), (2,2,2), (4,1,2) as Grid3d{p, t, d}.
std::vector<Grid3d> grids() { return {{1, 2, 1}, {2, 2, 1}, {2, 2, 2}, {1, 4, 2}}; }

class SeqPar : public ::testing::TestWithParam<Grid3d> {
 protected:
  static void SetUpTestSuite() { ops::set_blas_threads(1); }
};

TEST_P(SeqPar, SequenceParallelEqualsTheRunWithoutIt) {
  const Grid3d g = GetParam();
  const auto plain = train_grid(g.world(), config(g, {}));
  const auto sp = train_grid(g.world(), config(g, {true}));
  ASSERT_EQ(plain.size(), sp.size());
  EXPECT_LE(relative_difference(plain, sp), 1e-5) << describe(g);
  // The comparison can fail: training moved the parameters far more than that.
  const auto start =
      train_grid(g.world(), testing::gpt_3d_config(g, {"train.steps=1", "optimizer.lr=0"}));
  EXPECT_GT(relative_difference(plain, start), 1e-3);
}

TEST_P(SeqPar, SelectiveAndFullRecomputationAreBitwiseThePlainRun) {
  const Grid3d g = GetParam();
  for (bool sp : {false, true}) {
    const auto none = train_grid(g.world(), config(g, {sp, "none"}));
    for (const char* mode : {"selective", "full"})
      EXPECT_EQ(train_grid(g.world(), config(g, {sp, mode})), none)
          << describe(g) << " " << mode << (sp ? " sequence-parallel" : "");
  }
}

INSTANTIATE_TEST_SUITE_P(Grids, SeqPar, ::testing::ValuesIn(grids()),
                         [](const auto& info) { return grid_name(info.param); });

// ---- measured activation bytes ----------------------------------------------

// The GPT of gpt_3d_config: d = 32, H = 8, T = 8, V = 16, L = 8, B = 16.
constexpr int64_t kL = 8, kD = 32, kH = 8, kT = 8, kV = 16, kB = 16;

// Floats one micro-batch keeps between its forward and its backward on a
// chunk of L blocks (b sequences, N = b·T rows, n = N/t with sequence
// parallelism, else N), from the layer shapes:
//   chunk  the residual stream into each block and out of the last and its
//          gradient: (L + 2)·n·d
//   block  (not with full recomputation) LN1, attention output, the middle
//          residual, LN2, MLP output and the two LN gradients (7·n·d) and
//          the LN statistics (4·n); attention: Q|K|V and its gradient
//          (6·N·d/t), the probabilities b·(H/t)·T² and their dropped copy
//          (not with selective), context and its gradient (2·N·d/t), the
//          output gradient (n·d); MLP: pre-activation, activation and their
//          gradients (4·N·4d/t), the output gradient (n·d)
//   back   LN_f output and gradient (2·N·d), statistics (2·N), logits and
//          gradient (2·N·V); sequence-parallel: the gathered output (N·d)
//   front  sequence-parallel: the gathered input gradient (N·d)
int64_t chunk_floats(int64_t b, int64_t t, const Mode& m, bool front, bool back) {
  const int64_t N = b * kT, n = m.sp ? N / t : N, L = kL / 2;  // two stages
  int64_t f = (L + 2) * n * kD;
  if (m.recompute != "full") {
    const int64_t probs = m.recompute == "selective" ? 0 : 2 * b * (kH / t) * kT * kT;
    const int64_t attention = 6 * N * kD / t + probs + 2 * N * kD / t + n * kD;
    const int64_t mlp = 4 * N * 4 * kD / t + n * kD;
    f += L * (7 * n * kD + 4 * n + attention + mlp);
  }
  if (back) f += 2 * N * kD + 2 * N + 2 * N * kV + (m.sp ? N * kD : 0);
  if (front && m.sp) f += N * kD;
  return f;
}

class ActivationBytes : public ::testing::TestWithParam<std::tuple<int, Mode>> {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("psar_seqpar_" + std::to_string(::getpid()));
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::filesystem::path dir_;
};

TEST_P(ActivationBytes, PeakPerStageEqualsTheFormFromTheLayerShapes) {
  const auto [t, mode] = GetParam();
  const Grid3d g{2, t, 1};
  train_grid(g.world(), config(g, mode), dir_.string());
  const std::vector<int> in_flight =
      pp::peak_activations(pp::make_schedule("1f1b", {g.p, g.m(), 1, 0}));
  const int64_t b = kB / (g.d * g.m());
  int checked = 0;
  for (const auto& r : testing::read_csv_rows(dir_ / "pipeline.csv")) {
    if (r.at("stage") == "all") continue;
    const int stage = std::stoi(r.at("stage"));
    const int64_t want = in_flight[static_cast<size_t>(stage)] * 4 *
                         chunk_floats(b, t, mode, stage == 0, stage == g.p - 1);
    EXPECT_EQ(std::stoll(r.at("peak_bytes")), want) << "stage " << stage;
    EXPECT_EQ(std::stoll(r.at("peak_bytes_sim")), want) << "stage " << stage;
    ++checked;
  }
  EXPECT_EQ(checked, g.p);
  // Every steps.csv row names the mode that produced it.
  const auto steps = testing::read_csv_rows(dir_ / "steps.csv");
  ASSERT_FALSE(steps.empty());
  for (const auto& r : steps) {
    EXPECT_EQ(r.at("sequence_parallel"), mode.sp ? "1" : "0");
    EXPECT_EQ(r.at("recompute"), mode.recompute);
  }
}

std::vector<std::tuple<int, Mode>> byte_cases() {
  std::vector<std::tuple<int, Mode>> c;
  for (int t : {2, 4})
    for (bool sp : {false, true})
      for (const char* r : {"none", "selective", "full"}) c.push_back({t, Mode{sp, r}});
  return c;
}

INSTANTIATE_TEST_SUITE_P(Modes, ActivationBytes, ::testing::ValuesIn(byte_cases()),
                         [](const auto& info) {
                           const Mode& m = std::get<1>(info.param);
                           return "t" + std::to_string(std::get<0>(info.param)) +
                                  (m.sp ? "_sp_" : "_") + m.recompute;
                         });

// Sequence parallelism cuts every [N, d] tensor of the residual stream t
// times: with full recomputation the stash is (L + 2)·N·d/t per chunk.
TEST(ActivationBytesForms, SequenceParallelCutsTheFullRecomputationStashTTimes) {
  for (int t : {2, 4})
    EXPECT_EQ(chunk_floats(2, t, {false, "full"}, false, false),
              t * chunk_floats(2, t, {true, "full"}, false, false));
}

// ---- counted work and collectives on one TP group ----------------------------

// The tiny GPT of tests/tp: L = 2, d = 16, H = 4, T = 6; B = 3 sequences.
TEST(RecomputeWork, ExtraForwardsAndCorePassesAreCountedPerMode) {
  constexpr int64_t B = 3;
  for (int t : {1, 2})
    for (Recompute r : {Recompute::kNone, Recompute::kSelective, Recompute::kFull}) {
      GptOptions o = tp_testing::tiny(MlpSplit::kColumnRow, 0.1f);
      o.recompute = r;
      const int64_t L = o.layers, H = o.heads;
      const Batch batch = tp_testing::batch_of(B, o, 1);
      tp_testing::run_group(t, "ring", [&](TpGroup&, Comm& comm) {
        auto algo = make_allreducer("ring");
        auto mine = tp_testing::build(o, &comm, algo.get());
        forward_backward(*mine->model, batch);
        const GptComputeCounts c = mine->model->compute_counts();
        // none: one forward per block, B·H/t core passes per block;
        // full: every block and its cores again; selective: the cores again.
        EXPECT_EQ(c.block_forwards, (r == Recompute::kFull ? 2 : 1) * L) << recompute_name(r);
        EXPECT_EQ(c.core_passes, (r == Recompute::kNone ? 1 : 2) * L * B * H / t)
            << recompute_name(r);
        // Forward GEMM FLOPs from the shapes (N = B·T rows, per rank):
        // per block QKV 6·N·d²/t, projection 2·N·d²/t, MLP 16·N·d²/t, and
        // Q·Kᵀ and P·V 2·N·T·d/t each; the head 2·N·d·V. Recomputation
        // adds Q·Kᵀ per block (selective) or the whole block (full).
        const int64_t N = B * o.seq_len, d = o.d_model, T = o.seq_len;
        const int64_t linears = 24 * N * d * d / t, qk = 2 * N * T * d / t, pv = qk;
        const int64_t block = linears + qk + pv, head = 2 * N * d * o.vocab;
        const int64_t extra = r == Recompute::kFull ? L * block
                              : r == Recompute::kSelective ? L * qk
                                                           : 0;
        EXPECT_EQ(c.forward_flops, L * block + head + extra) << recompute_name(r);
      });
    }
}

// Per block and micro-batch, N = B·T rows of d: reduce-scatters 4 (two
// row-parallel outputs forward, two column-parallel input gradients), 6
// with full recomputation; all-gathers 8 (two inputs forward, and in the
// backward the two row-parallel output gradients twice and the two
// column-parallel inputs once), 10 with full recomputation; per chunk one
// more for its output and one for its input gradient; one all-reduce of the
// layer norms' 4·d gradients. The ring sends (t−1)/t of each.
TEST(SequenceParallelCollectives, ReduceScattersAndAllGathersReplaceTheAllReduces) {
  constexpr int64_t B = 4;
  for (int t : {2, 4})
    for (Recompute r : {Recompute::kNone, Recompute::kFull}) {
      GptOptions o = tp_testing::tiny();
      o.seq_len = 8;
      o.sequence_parallel = true;
      o.recompute = r;
      const int64_t L = o.layers, Nd = B * o.seq_len * o.d_model;
      const int64_t rs = (r == Recompute::kFull ? 6 : 4) * L;
      const int64_t ag = (r == Recompute::kFull ? 10 : 8) * L + 2;
      const Batch batch = tp_testing::batch_of(B, o, 1);
      tp_testing::run_group(t, "ring", [&](TpGroup&, Comm& comm) {
        auto algo = make_allreducer("ring");
        auto mine = tp_testing::build(o, &comm, algo.get());
        forward_backward(*mine->model, batch);
        const TpCounters& k = mine->model->tp().counters;
        EXPECT_EQ(k.reduce_scatters, rs);
        EXPECT_EQ(k.reduce_scatter_floats, rs * Nd);
        EXPECT_EQ(k.all_gathers, ag);
        EXPECT_EQ(k.all_gather_floats, ag * Nd);
        EXPECT_EQ(k.allreduces, L);
        EXPECT_EQ(k.allreduce_floats, L * 4 * o.d_model);
        EXPECT_EQ(mine->model->tp_reduce_scatter_floats(0), rs * Nd);
        EXPECT_EQ(mine->model->tp_all_gather_floats(0), ag * Nd);
        EXPECT_EQ(mine->model->tp_allreduce_floats(0), L * 4 * o.d_model);
      });
    }
}

// ---- bad configurations -----------------------------------------------------------

TEST(SeqParConfig, EachIsAConfigErrorNamingTheKeys) {
  EXPECT_THAT(testing::train_config_error(1, config({1, 1, 1}, {true})),
              HasSubstr("parallel.sequence_parallel needs parallel.tp > 1"));
  EXPECT_THAT(
      testing::train_config_error(2, testing::gpt_3d_config({1, 2, 1},
                                                            {"parallel.sequence_parallel=true",
                                                             "parallel.tp_split=row_column"})),
      HasSubstr("parallel.sequence_parallel needs parallel.tp_split column_row"));
  EXPECT_THAT(testing::train_config_error(
                  4, testing::gpt_3d_config({1, 4, 1}, {"parallel.sequence_parallel=true",
                                                        "model.seq_len=6"})),
              HasSubstr("splits model.seq_len = 6 over parallel.tp = 4"));
  EXPECT_THROW(testing::gpt_3d_config({}, {"train.recompute=some"}), ConfigError);
}

}  // namespace
}  // namespace psar
