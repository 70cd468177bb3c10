// The tensor-parallel building blocks against the serial model:
//  - shard layouts against hand-written slices, and shard initialization
//    against slices of the serial tensor;
//  - f and g against a double-precision sum, the column gather against
//    concatenation;
//  - ParallelMLP (both splits) and ParallelSelfAttention for t ∈ {1, 2, 4},
//    with and without dropout: output, input gradient and every weight
//    gradient equal the serial model's within 1e-5 relative, and the
//    collectives are exactly the ones the notes give (counted by f/g and by
//    the communicator's byte counters);
//  - the t = 1 blocks against a double-precision reference and central
//    differences;
//  - sizes the group cannot split are ConfigErrors that say so.

#include <gtest/gtest.h>

#include <numeric>

#include "core/errors.h"
#include "core/ops.h"
#include "modelpar/tp/conjugate.h"
#include "modelpar/tp/parallel_attention.h"
#include "modelpar/tp/parallel_mlp.h"
#include "reference.h"
#include "tp_test_util.h"

namespace psar {
namespace {

using namespace tp_testing;

// ---- shard layouts -------------------------------------------------------------

TEST(Shard, ColumnGroupsGiveEachRankItsSliceOfEveryBlock) {
  // [2, 6] = two rows of three blocks (Q | K | V) of 2 columns; t = 2, rank 1
  std::vector<float> full(12);
  std::iota(full.begin(), full.end(), 0.0f);
  std::vector<float> mine(6);
  copy_shard(full, {2, 6}, ShardSpec::columns(3), 1, 2, mine);
  EXPECT_EQ(mine, (std::vector<float>{1, 3, 5, 7, 9, 11}));
  EXPECT_EQ(shard_shape({2, 6}, ShardSpec::columns(3), 2), (Shape{2, 3}));
  std::vector<float> bias(3);
  copy_shard(std::span<const float>(full).first(6), {6}, ShardSpec::columns(3), 0, 2, bias);
  EXPECT_EQ(bias, (std::vector<float>{0, 2, 4}));
}

TEST(Shard, RowsAreOneContiguousSlice) {
  std::vector<float> full(12);
  std::iota(full.begin(), full.end(), 0.0f);
  std::vector<float> mine(6);
  copy_shard(full, {4, 3}, ShardSpec::rows(), 1, 2, mine);
  EXPECT_EQ(mine, (std::vector<float>{6, 7, 8, 9, 10, 11}));
  EXPECT_EQ(shard_shape({4, 3}, ShardSpec::rows(), 2), (Shape{2, 3}));
}

class ShardInit : public ::testing::TestWithParam<int> {};

TEST_P(ShardInit, EveryRanksShardIsTheSliceOfTheSerialTensor) {
  const int t = GetParam();
  ParamStore serial;
  serial.add("w", {12, 36}, Init::normal(0.5f));
  serial.add("b", {36}, Init::uniform(-1, 1));
  serial.add("r", {12, 5}, Init::normal(1.0f));
  serial.finalize(99);
  for (int rank = 0; rank < t; ++rank) {
    ShardedParams shards(rank, t);
    ParamStore store;
    shards.add(store, "w", {12, 36}, Init::normal(0.5f), ShardSpec::columns(3));
    shards.add(store, "b", {36}, Init::uniform(-1, 1), ShardSpec::columns(3));
    shards.add(store, "r", {12, 5}, Init::normal(1.0f), ShardSpec::rows());
    store.finalize(99);
    shards.initialize(store, 99);
    for (const auto& e : shards.entries()) {
      const auto want = serial_slice(serial.param(e.full.name).span(), e, rank, t);
      const Tensor got = store.param(e.id);
      EXPECT_TRUE(std::equal(want.begin(), want.end(), got.data()))
          << e.full.name << " rank " << rank << " of " << t;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Ranks, ShardInit, ::testing::Values(1, 2, 3, 4));

// ---- conjugate operators ---------------------------------------------------------

class Conjugate : public ::testing::TestWithParam<int> {};

TEST_P(Conjugate, GSumsInForwardAndFSumsInBackward) {
  const int t = GetParam();
  constexpr int64_t n = 37;
  run_group(t, "ring", [&](TpGroup& tp, Comm&) {
    std::vector<double> sum(n, 0.0);
    for (int r = 0; r < t; ++r) {
      const auto part = randn(n, 10 + r);
      for (int64_t i = 0; i < n; ++i) sum[i] += part[i];
    }
    auto y = randn(n, 10 + tp.rank());
    g_forward(tp, y);
    auto dx = randn(n, 10 + tp.rank());
    f_backward(tp, dx);
    for (int64_t i = 0; i < n; ++i) {
      EXPECT_NEAR(y[i], sum[i], 1e-5);
      EXPECT_EQ(dx[i], y[i]);
    }
    EXPECT_EQ(tp.counters.g_forward, 1);
    EXPECT_EQ(tp.counters.f_backward, 1);
    EXPECT_EQ(tp.counters.allreduces, t > 1 ? 2 : 0);
  });
}

TEST_P(Conjugate, GatherColumnsConcatenatesTheRanksBlocks) {
  const int t = GetParam();
  constexpr int64_t N = 3, C = 24;  // divisible by 1, 2, 3, 4
  const auto full = randn(N * C, 20);
  run_group(t, "ring", [&](TpGroup& tp, Comm&) {
    std::vector<float> mine(N * C / t), back(N * C), scratch;
    take_columns(mine.data(), full.data(), N, C, tp.rank(), t);
    gather_columns(tp, back.data(), mine.data(), N, C, scratch);
    EXPECT_EQ(back, full);
    EXPECT_EQ(tp.counters.all_gathers, t > 1 ? 1 : 0);
  });
}

INSTANTIATE_TEST_SUITE_P(Ranks, Conjugate, ::testing::Values(1, 2, 3, 4));

// ---- running a block ---------------------------------------------------------------

struct BlockRun {
  std::vector<float> y, dx;
};

// Forward, then backward of L = Σ dy ⊙ y: both halves. `count` is N for the
// MLP and B for attention.
template <typename Layer>
BlockRun run_block(Harness<Layer>& h, const std::vector<float>& x, const std::vector<float>& dy,
                   int64_t count, const DropoutContext& drop) {
  BlockRun r{std::vector<float>(dy.size()), std::vector<float>(x.size())};
  h.store.zero_grads();
  typename Layer::Activations a;
  h.layer.forward(a, r.y.data(), x.data(), count, drop);
  h.layer.backward_input(a, r.dx.data(), dy.data(), count);
  h.layer.backward_weight(a, x.data(), count);
  return r;
}

template <typename Layer, typename Options>
void expect_block_equals_serial(int t, const Options& options, int64_t rows, int64_t count,
                                float dropout, const std::string& allreduce = "ring") {
  const int64_t d = options.d_model;
  const auto x = randn(rows * d, 1), dy = randn(rows * d, 2);
  const DropoutContext drop{dropout, 5, 3};
  run_group(t, allreduce, [&](TpGroup& tp, Comm&) {
    TpGroup serial_group;
    Harness<Layer> serial(serial_group, options, 11), mine(tp, options, 11);
    const BlockRun want = run_block(serial, x, dy, count, drop);
    const BlockRun got = run_block(mine, x, dy, count, drop);
    EXPECT_TRUE(close(got.y, want.y)) << "output, rank " << tp.rank() << " of " << t;
    EXPECT_TRUE(close(got.dx, want.dx)) << "input gradient, rank " << tp.rank() << " of " << t;
    expect_shards_match(mine.store, mine.shards, serial.store, /*params=*/true, 0.0);
    expect_shards_match(mine.store, mine.shards, serial.store, /*params=*/false);
  });
}

// The serial (t = 1) block's output against `reference` (double precision),
// and its input and weight gradients against central differences of
// L = Σ dy ⊙ reference(x).
template <typename Layer, typename Reference>
void expect_matches_reference(Harness<Layer>& h, int64_t count, int64_t numel,
                              const Reference& reference) {
  const auto x = randn(numel, 1), dy = randn(numel, 2);
  const BlockRun r = run_block(h, x, dy, count, {});
  ref::Weights w = ref::weights_of(h.store);
  ref::Vec xd = ref::to_double(x);
  const ref::Vec y = reference(w, xd);
  EXPECT_TRUE(close(r.y, std::vector<float>(y.begin(), y.end())));
  auto loss = [&] {
    const ref::Vec z = reference(w, xd);
    double s = 0;
    for (size_t i = 0; i < z.size(); ++i) s += z[i] * dy[i];
    return s;
  };
  ref::expect_gradient(xd, r.dx, loss, "input");
  for (auto& [name, v] : w) ref::expect_gradient(v, h.store.grad(name).span(), loss, name);
}

// ---- ParallelMLP ---------------------------------------------------------------------

struct MlpCase {
  int t;
  MlpSplit split;
  float dropout;
};

class Mlp : public ::testing::TestWithParam<MlpCase> {
 protected:
  static ParallelMlpOptions options(MlpSplit split) {
    return {.name = "mlp",
            .d_model = 8,
            .hidden = 32,
            .split = split,
            .init_std = 0.3f,
            .proj_init_std = 0.2f};
  }
  static constexpr int64_t kRows = 10;
};

TEST_P(Mlp, OutputAndEveryGradientEqualTheSerialModel) {
  const auto c = GetParam();
  expect_block_equals_serial<ParallelMLP>(c.t, options(c.split), kRows, kRows, c.dropout);
}

TEST_P(Mlp, CommunicatesExactlyWhatItsSplitNeeds) {
  const auto c = GetParam();
  const int t = c.t;
  const int64_t N = kRows, d = 8, hidden = 32;
  const auto x = randn(N * d, 1), dy = randn(N * d, 2);
  std::vector<int64_t> sent(t);
  run_group(t, "ring", [&](TpGroup& tp, Comm& comm) {
    Harness<ParallelMLP> h(tp, options(c.split), 11);
    run_block(h, x, dy, N, {c.dropout, 5, 3});
    const TpCounters& k = tp.counters;
    sent[tp.rank()] = comm.counters().bytes_sent;
    if (c.split == MlpSplit::kColumnRow) {
      // one g (forward) and one f (backward), each all-reducing [N, d]; nothing before GeLU
      EXPECT_EQ(k.g_forward, 1);
      EXPECT_EQ(k.f_backward, 1);
      EXPECT_EQ(k.allreduces, t > 1 ? 2 : 0);
      EXPECT_EQ(k.allreduce_min_floats, t > 1 ? N * d : INT64_MAX);
      EXPECT_EQ(k.allreduce_max_floats, t > 1 ? N * d : 0);
      EXPECT_EQ(k.all_gathers, 0);
    } else {
      // g all-reduces X·A = [N, hidden] BEFORE GeLU, f its gradient; plus two gathers of [N, d]
      EXPECT_EQ(k.allreduces, t > 1 ? 2 : 0);
      EXPECT_EQ(k.allreduce_max_floats, t > 1 ? N * hidden : 0);
      EXPECT_EQ(k.all_gathers, t > 1 ? 2 : 0);
      EXPECT_EQ(k.all_gather_floats, t > 1 ? 2 * N * d : 0);
    }
  });
  const int64_t total = std::accumulate(sent.begin(), sent.end(), int64_t{0});
  if (c.split == MlpSplit::kColumnRow)
    EXPECT_EQ(total, 2 * ring_allreduce_bytes(t, N * d));
  else
    EXPECT_EQ(total, 2 * ring_allreduce_bytes(t, N * hidden) + 2 * ring_all_gather_bytes(t, N * d));
}

std::vector<MlpCase> mlp_cases() {
  std::vector<MlpCase> cases;
  for (int t : {1, 2, 4})
    for (MlpSplit s : {MlpSplit::kColumnRow, MlpSplit::kRowColumn})
      for (float p : {0.0f, 0.25f}) cases.push_back({t, s, p});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Splits, Mlp, ::testing::ValuesIn(mlp_cases()), [](const auto& info) {
  const auto& c = info.param;
  return "t" + std::to_string(c.t) +
         (c.split == MlpSplit::kColumnRow ? "_column_row" : "_row_column") +
         (c.dropout > 0 ? "_dropout" : "");
});

TEST(SerialMlp, MatchesTheDoubleReferenceAndItsFiniteDifferences) {
  const int64_t N = 6, d = 8, hidden = 32;
  TpGroup serial;
  Harness<ParallelMLP> h(
      serial,
      ParallelMlpOptions{
          .name = "mlp", .d_model = d, .hidden = hidden, .init_std = 0.3f, .proj_init_std = 0.2f},
      11);
  expect_matches_reference(h, N, N * d, [&](const ref::Weights& w, const ref::Vec& x) {
    return ref::mlp(w, "mlp", x, N, d, hidden);
  });
}

// ---- ParallelSelfAttention -------------------------------------------------------------

struct AttentionCase {
  int t;
  float dropout;
};

class Attention : public ::testing::TestWithParam<AttentionCase> {
 protected:
  static ParallelAttentionOptions options() {
    return {.name = "attn",
            .d_model = 16,
            .heads = 4,
            .seq_len = 5,
            .init_std = 0.3f,
            .proj_init_std = 0.2f};
  }
  static constexpr int64_t kB = 2;
};

TEST_P(Attention, OutputAndEveryGradientEqualTheSerialModel) {
  const auto c = GetParam();
  expect_block_equals_serial<ParallelSelfAttention>(c.t, options(), kB * 5, kB, c.dropout);
}

TEST_P(Attention, OneAllReduceForwardAndOneBackwardOfTheActivation) {
  const auto c = GetParam();
  const int t = c.t;
  const int64_t N = kB * 5, d = 16;
  const auto x = randn(N * d, 1), dy = randn(N * d, 2);
  std::vector<int64_t> sent(t);
  run_group(t, "ring", [&](TpGroup& tp, Comm& comm) {
    Harness<ParallelSelfAttention> h(tp, options(), 11);
    run_block(h, x, dy, kB, {c.dropout, 5, 3});
    EXPECT_EQ(tp.counters.g_forward, 1);
    EXPECT_EQ(tp.counters.f_backward, 1);
    EXPECT_EQ(tp.counters.allreduces, t > 1 ? 2 : 0);
    EXPECT_EQ(tp.counters.allreduce_floats, t > 1 ? 2 * N * d : 0);
    sent[tp.rank()] = comm.counters().bytes_sent;
  });
  EXPECT_EQ(std::accumulate(sent.begin(), sent.end(), int64_t{0}),
            2 * ring_allreduce_bytes(t, N * d));
}

INSTANTIATE_TEST_SUITE_P(Heads, Attention,
                         ::testing::Values(AttentionCase{1, 0}, AttentionCase{2, 0},
                                           AttentionCase{4, 0}, AttentionCase{1, 0.3f},
                                           AttentionCase{2, 0.3f}, AttentionCase{4, 0.3f}),
                         [](const auto& info) {
                           return "t" + std::to_string(info.param.t) +
                                  (info.param.dropout > 0 ? "_dropout" : "");
                         });

TEST(SerialAttention, MatchesTheDoubleReferenceAndItsFiniteDifferences) {
  const int64_t B = 2, T = 5, d = 16, H = 4;
  TpGroup serial;
  Harness<ParallelSelfAttention> h(serial,
                                   ParallelAttentionOptions{.name = "attn",
                                                            .d_model = d,
                                                            .heads = H,
                                                            .seq_len = T,
                                                            .init_std = 0.3f,
                                                            .proj_init_std = 0.2f},
                                   11);
  expect_matches_reference(h, B, B * T * d, [&](const ref::Weights& w, const ref::Vec& x) {
    return ref::attention(w, "attn", x, B, T, d, H);
  });
}

// ---- sizes the group cannot split ---------------------------------------------------------

template <typename F>
std::string config_error_of(F make) {
  try {
    make();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(Errors, HeadsNotDivisibleByTAreRejectedNamingBothNumbers) {
  run_group(4, "ring", [](TpGroup& tp, Comm&) {
    const std::string msg = config_error_of([&] {
      ParallelSelfAttention a(tp, {.name = "h0.attn", .d_model = 24, .heads = 6, .seq_len = 4});
    });
    EXPECT_NE(msg.find("model.heads = 6"), std::string::npos) << msg;
    EXPECT_NE(msg.find("parallel.tp = 4"), std::string::npos) << msg;
  });
}

TEST(Errors, HiddenOrDModelNotDivisibleByTAreRejected) {
  run_group(4, "ring", [](TpGroup& tp, Comm&) {
    const std::string hidden =
        config_error_of([&] { ParallelMLP m(tp, {.name = "h0.mlp", .d_model = 8, .hidden = 10}); });
    EXPECT_NE(hidden.find("hidden size 10"), std::string::npos) << hidden;
    const std::string dmodel =
        config_error_of([&] { ParallelMLP m(tp, {.name = "h0.mlp", .d_model = 6, .hidden = 24}); });
    EXPECT_NE(dmodel.find("d_model 6"), std::string::npos) << dmodel;
    EXPECT_NE(dmodel.find("parallel.tp = 4"), std::string::npos) << dmodel;
  });
}

TEST(Errors, UnknownSplitNameIsAConfigError) {
  EXPECT_THROW(parse_mlp_split("rows"), ConfigError);
  EXPECT_EQ(parse_mlp_split("row_column"), MlpSplit::kRowColumn);
}

}  // namespace
}  // namespace psar
