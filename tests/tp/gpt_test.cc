// The whole GPT, tensor-parallel over t ∈ {1, 2, 4} in-process ranks, against
// the serial model (t = 1, itself checked against a double-precision
// reference and central differences): the loss and every parameter
// gradient within 1e-5 relative (each rank's shards against slices of the
// serial gradient), with dropout and with both MLP splits; and exactly 4
// all-reduces per layer per forward+backward, each of B·T·d_model floats, as
// counted by f/g and by the communicator's byte counters, and as the model's
// own count (tp_allreduce_floats) predicts.

#include <gtest/gtest.h>

#include <fstream>
#include <numeric>
#include <sstream>

#include "core/csv.h"
#include "core/errors.h"
#include "gpt_fixture.h"
#include "reference.h"
#include "tp_test_util.h"
#include "trainer/schema.h"
#include "workloads/gpt.h"
#include "workloads/text_data.h"

namespace psar {
namespace {

using namespace tp_testing;

TEST(SerialGpt, LossMatchesTheDoubleReferenceAndGradientsItsFiniteDifferences) {
  const GptOptions o = tiny();
  auto serial = build(o);
  const Batch batch = batch_of(2, o, 1);
  const double loss = forward_backward(*serial->model, batch);
  ref::Weights w = ref::weights_of(serial->store);
  const ref::GptShape shape{o.vocab, o.seq_len, o.layers, o.d_model, o.heads};
  auto f = [&] { return ref::gpt_loss(w, shape, batch.tokens, batch.targets, batch.size); };
  EXPECT_NEAR(loss, f(), 1e-5 * f());
  for (auto& [name, v] : w) ref::expect_gradient(v, serial->store.grad(name).span(), f, name, 4);
}

struct GptCase {
  int t;
  MlpSplit split;
  float dropout;
};

class GptEquivalence : public ::testing::TestWithParam<GptCase> {};

TEST_P(GptEquivalence, LogitsLossAndEveryGradientEqualTheSerialModel) {
  const auto c = GetParam();
  const GptOptions o = tiny(c.split, c.dropout);
  const Batch b1 = batch_of(3, o, 1), b2 = batch_of(3, o, 2);
  auto serial = build(o);
  // Two batches, gradients accumulating: the second draws fresh dropout masks.
  const double want1 = forward_backward(*serial->model, b1);
  const double want2 = forward_backward(*serial->model, b2);
  run_group(c.t, "ring", [&](TpGroup&, Comm& comm) {
    auto algo = make_allreducer("ring");
    auto mine = build(o, &comm, algo.get());
    const double got1 = forward_backward(*mine->model, b1);
    const double got2 = forward_backward(*mine->model, b2);
    EXPECT_NEAR(got1, want1, 1e-5 * want1);
    EXPECT_NEAR(got2, want2, 1e-5 * want2);
    expect_shards_match(mine->store, *mine->model->sharded_params(), serial->store, true, 0.0);
    expect_shards_match(mine->store, *mine->model->sharded_params(), serial->store, false);
  });
}

TEST_P(GptEquivalence, FourAllReducesPerLayerPerForwardAndBackward) {
  // column_row: 4 per layer of B·T·d floats each. row_column: the MLP's two
  // all-reduce [B·T, 4d] (before GeLU and its gradient) and it adds two
  // all-gathers of [B·T, d].
  const auto c = GetParam();
  const bool megatron = c.split == MlpSplit::kColumnRow;
  const GptOptions o = tiny(c.split, c.dropout);
  const int64_t B = 3, L = o.layers, BTd = B * o.seq_len * o.d_model;
  const int64_t floats_per_layer = megatron ? 4 * BTd : 2 * BTd + 2 * 4 * BTd;
  const int64_t bytes_per_layer = megatron ? 4 * ring_allreduce_bytes(c.t, BTd)
                                           : 2 * ring_allreduce_bytes(c.t, BTd) +
                                                 2 * ring_allreduce_bytes(c.t, 4 * BTd) +
                                                 2 * ring_all_gather_bytes(c.t, BTd);
  const Batch batch = batch_of(B, o, 1);
  std::vector<int64_t> sent(c.t);
  run_group(c.t, "ring", [&](TpGroup&, Comm& comm) {
    auto algo = make_allreducer("ring");
    auto mine = build(o, &comm, algo.get());
    forward_backward(*mine->model, batch);
    const TpCounters& k = mine->model->tp().counters;
    EXPECT_EQ(k.g_forward, 2 * L);   // attention and MLP outputs, forward
    EXPECT_EQ(k.f_backward, 2 * L);  // attention and MLP inputs, backward
    EXPECT_EQ(k.allreduces, c.t > 1 ? 4 * L : 0);
    EXPECT_EQ(k.allreduce_floats, c.t > 1 ? L * floats_per_layer : 0);
    EXPECT_EQ(k.allreduce_min_floats, c.t > 1 ? BTd : INT64_MAX);
    EXPECT_EQ(k.allreduce_max_floats, c.t > 1 ? (megatron ? BTd : 4 * BTd) : 0);
    EXPECT_EQ(k.all_gathers, c.t > 1 && !megatron ? 2 * L : 0);
    sent[comm.rank()] = comm.counters().bytes_sent;
    EXPECT_EQ(mine->model->tp_allreduce_floats(0), c.t > 1 ? L * floats_per_layer : 0);
    // Evaluation is forward only: one g per attention and per MLP.
    mine->model->eval_forward(0, batch, {}, {});
    EXPECT_EQ(k.g_forward, 4 * L);
    EXPECT_EQ(k.f_backward, 2 * L);
  });
  EXPECT_EQ(std::accumulate(sent.begin(), sent.end(), int64_t{0}), L * bytes_per_layer);
}

std::vector<GptCase> gpt_cases() {
  std::vector<GptCase> cases;
  for (int t : {1, 2, 4})
    for (MlpSplit s : {MlpSplit::kColumnRow, MlpSplit::kRowColumn})
      for (float p : {0.0f, 0.1f}) cases.push_back({t, s, p});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Groups, GptEquivalence, ::testing::ValuesIn(gpt_cases()),
                         [](const auto& info) {
                           const auto& c = info.param;
                           return "t" + std::to_string(c.t) +
                                  (c.split == MlpSplit::kColumnRow ? "_column_row"
                                                                   : "_row_column") +
                                  (c.dropout > 0 ? "_dropout" : "");
                         });

class GptAllreduce : public ::testing::TestWithParam<std::string> {};

TEST_P(GptAllreduce, EveryAlgorithmGivesTheSerialGradientsOnFourRanks) {
  const GptOptions o = tiny();
  const Batch batch = batch_of(2, o, 1);
  auto serial = build(o);
  forward_backward(*serial->model, batch);
  run_group(4, GetParam(), [&](TpGroup&, Comm& comm) {
    auto algo = make_allreducer(GetParam());
    auto mine = build(o, &comm, algo.get());
    forward_backward(*mine->model, batch);
    expect_shards_match(mine->store, *mine->model->sharded_params(), serial->store, false);
  });
}

std::vector<std::string> point_to_point_algorithms() {
  std::vector<std::string> names;
  for (const auto& n : allreducer_names())
    if (n != "mpi") names.push_back(n);
  return names;
}

INSTANTIATE_TEST_SUITE_P(Algorithms, GptAllreduce, ::testing::ValuesIn(point_to_point_algorithms()),
                         [](const auto& info) { return info.param; });

// ---- configuration errors and the run file -------------------------------------------

std::string make_error(int t, const std::string& model) {
  const Config cfg = Config::load_string("model: {type: gpt, " + model + "}\n", config_schema());
  const DatasetPair data = make_synthetic_tokens(16, 4, 8, 1);
  std::string msg;
  run_group(t, "ring", [&](TpGroup& group, Comm& comm) {
    try {
      make_model(workload_options(cfg), *data.train, {&group, {}});
    } catch (const ConfigError& e) {
      if (comm.rank() == 0) msg = e.what();
    }
  });
  return msg;
}

TEST(GptConfig, HeadsOrDModelNotDivisibleByTAreConfigErrors) {
  const std::string heads = make_error(4, "d_model: 24, heads: 6, seq_len: 4");
  EXPECT_NE(heads.find("heads"), std::string::npos) << heads;
  EXPECT_NE(heads.find("parallel.tp = 4"), std::string::npos) << heads;
  const std::string dmodel = make_error(4, "d_model: 6, heads: 2, seq_len: 4");
  EXPECT_NE(dmodel.find("model.d_model = 6"), std::string::npos) << dmodel;
  EXPECT_EQ(make_error(2, "d_model: 24, heads: 6, seq_len: 4"), "");
}

TEST(GptConfig, AClassifierDatasetIsAConfigError) {
  const Config cfg = Config::load_string("model: {type: gpt}\n", config_schema());
  const DatasetPair data = make_synthetic(16, 4, 3, 1);
  try {
    make_model(workload_options(cfg), *data.train, {});
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("needs a token dataset"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace psar
