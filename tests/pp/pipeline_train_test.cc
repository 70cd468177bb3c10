// Pipeline-parallel training against the serial model, in-process: for every
// schedule, p ∈ {2, 4}, m ∈ {p, 2p, 3p}, v ∈ {1, 2} where the schedule runs
// chunks (interleaved), the parameters after 10 steps of `psar train` with
// parallel.pp = p equal those of one rank training the same MLP on the same
// global batches (‖Δθ‖/‖θ‖ ≤ 1e-5), and every stage returns the same whole
// model. Also with data parallelism beside (d = 2), Adam, an explicit uneven
// layer split; the run files (pipeline.csv: measured peaks equal to the
// simulator's; trace.json: the span kinds); and each invalid combination
// rejected with a message naming it. The same for the GPT cut into stages
// (embeddings first, tied head and loss last) against the serial GPT.

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>

#include "comm/inproc_comm.h"
#include "core/errors.h"
#include "core/ops.h"
#include "tests/pp/pipeline_fixture.h"
#include "tests/trainer/train_fixture.h"
#include "trainer/trainer.h"

namespace psar {
namespace {

using ::testing::HasSubstr;
using testing::PipelineCase;
using testing::pipeline_mlp_config;
using testing::relative_difference;
using testing::train_result;

std::vector<float> train_inproc(int ranks, const Config& cfg, const std::string& out = "") {
  return train_result(ranks, cfg, out).params;
}

// The serial model's parameters after the same steps, per optimizer.
const std::vector<float>& serial(const std::vector<std::string>& overrides = {}) {
  static std::map<std::vector<std::string>, std::vector<float>> cache;
  auto it = cache.find(overrides);
  if (it == cache.end())
    it = cache.emplace(overrides, train_inproc(1, pipeline_mlp_config({"", 1, 1, 1}, overrides)))
             .first;
  return it->second;
}

class PipelineTraining : public ::testing::TestWithParam<PipelineCase> {
 protected:
  static void SetUpTestSuite() { ops::set_blas_threads(1); }
};

TEST_P(PipelineTraining, EqualsTheSerialModelAfterTenSteps) {
  const PipelineCase c = GetParam();
  const auto parallel = train_inproc(c.p * c.d, pipeline_mlp_config(c));
  ASSERT_EQ(parallel.size(), serial().size());
  EXPECT_LE(relative_difference(serial(), parallel), 1e-5) << testing::describe(c);
}

// Test names of a sweep: schedule, p, m, v, d.
std::string case_name(const ::testing::TestParamInfo<PipelineCase>& info) {
  const PipelineCase& c = info.param;
  return c.schedule + "_p" + std::to_string(c.p) + "_m" + std::to_string(c.m) + "_v" +
         std::to_string(c.v) + "_d" + std::to_string(c.d);
}

std::vector<PipelineCase> sweep() {
  std::vector<PipelineCase> cases;
  for (const char* kind : {"gpipe", "1f1b", "interleaved", "zb_h1"})
    for (int p : {2, 4})
      for (int m : {p, 2 * p, 3 * p})
        for (int v : {1, 2})
          if (v == 1 || std::string(kind) == "interleaved") cases.push_back({kind, p, m, v, 1});
  // Data parallelism beside the pipeline: 2 replicas of 2 stages.
  for (const char* kind : {"gpipe", "1f1b", "zb_h1"}) cases.push_back({kind, 2, 4, 1, 2});
  cases.push_back({"interleaved", 2, 4, 2, 2});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Schedules, PipelineTraining, ::testing::ValuesIn(sweep()),
                         case_name);

TEST(PipelineTraining, TheCheckCanFailTrainingMovedTheParameters) {
  const auto start = train_inproc(1, pipeline_mlp_config({"", 1, 1, 1}, {"train.steps=1", "optimizer.lr=0"}));
  EXPECT_GT(relative_difference(serial(), start), 1e-2);
}

TEST(PipelineTraining, AdamAndAnUnevenLayerSplitToo) {
  const std::vector<std::string> adam{"optimizer.type=adam", "optimizer.lr=0.01"};
  std::vector<std::string> uneven = adam;
  uneven.push_back("parallel.stage_layers=[1, 3, 2, 2]");
  const auto parallel = train_inproc(4, pipeline_mlp_config({"zb_h1", 4, 8, 1}, uneven));
  EXPECT_LE(relative_difference(serial(adam), parallel), 1e-5);
}

// The evaluation pushes the test set through the stages: the serial model's
// test loss and accuracy, with the replicas splitting the test set.
TEST(PipelineTraining, EvaluatesLikeTheSerialModel) {
  const TrainResult one = train_result(1, pipeline_mlp_config({"", 1, 1, 1}));
  const TrainResult pipe = train_result(4, pipeline_mlp_config({"interleaved", 2, 4, 2, 2}));
  ASSERT_GE(one.test_accuracy, 0);
  EXPECT_NEAR(pipe.test_loss, one.test_loss, 1e-5 * one.test_loss);
  EXPECT_EQ(pipe.test_accuracy, one.test_accuracy);
  EXPECT_NEAR(pipe.final_loss, one.final_loss, 1e-5 * one.final_loss);  // mean over the replicas
  // Without replicas every stage reports the loss of the whole batch, step by step.
  const TrainResult alone = train_result(4, pipeline_mlp_config({"1f1b", 4, 4, 1}));
  ASSERT_EQ(alone.losses.size(), one.losses.size());
  for (size_t k = 0; k < one.losses.size(); ++k)
    EXPECT_NEAR(alone.losses[k], one.losses[k], 1e-5 * one.losses[k]) << "step " << k + 1;
}

std::string read(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

class RunFilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("psar_pp_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  // pipeline.csv of the run: its header line, and each row's fields.
  std::vector<std::vector<std::string>> pipeline_rows(std::string& header) const {
    std::istringstream csv(read(dir_ / "pipeline.csv"));
    std::getline(csv, header);
    std::vector<std::vector<std::string>> rows;
    for (std::string line; std::getline(csv, line);) {
      std::stringstream ls(line);
      rows.emplace_back();
      for (std::string x; std::getline(ls, x, ',');) rows.back().push_back(x);
    }
    return rows;
  }
  std::filesystem::path dir_;
};

// pipeline.csv: one row per stage and one for the pipeline, the measured
// peaks (stash count and bytes) equal to the simulator's.
TEST_F(RunFilesTest, PipelineCsvHoldsMeasuredPeaksEqualToThePrediction) {
  train_inproc(4, pipeline_mlp_config({"interleaved", 2, 4, 2, 2}), dir_.string());
  std::string line;
  const auto rows = pipeline_rows(line);
  ASSERT_EQ(line.rfind("schedule,p,m,v,dp,stage,layers,compute_s,idle_s,makespan_s,bubble,", 0), 0u);
  for (const auto& f : rows) {
    const std::string row = ::testing::PrintToString(f);
    ASSERT_EQ(f.size(), 24u) << row;
    EXPECT_EQ(f[0], "interleaved");
    EXPECT_EQ(f[15], f[16]) << "peak activations, measured vs simulated: " << row;
    EXPECT_EQ(f[17], f[18]) << "peak bytes, measured vs predicted: " << row;
    EXPECT_GT(std::stod(f[7]), 0) << "compute_s";
    EXPECT_GE(std::stod(f[8]), 0) << "idle_s";
    EXPECT_EQ(std::stod(f[14]), 1.0 / 8) << "closed form (p-1)/(v·m)";
  }
  EXPECT_EQ(rows.size(), 2u * 3);  // 2 replicas × (2 stages + the pipeline)
  // steps.csv: every rank's 10 rows, the replica's loss on each.
  std::istringstream steps(read(dir_ / "steps.csv"));
  int step_rows = -1;
  while (std::getline(steps, line)) ++step_rows;
  EXPECT_EQ(step_rows, 4 * 10);
  EXPECT_TRUE(std::filesystem::exists(dir_ / "summary.csv"));
  EXPECT_THAT(read(dir_ / "eval.csv"), HasSubstr("10,"));  // evaluated after the last step
}

TEST_F(RunFilesTest, TraceHasEverySpanKind) {
  train_inproc(2, pipeline_mlp_config({"zb_h1", 2, 4, 1}, {"train.trace=true", "train.steps=2"}),
               dir_.string());
  const std::string trace = read(dir_ / "trace.json");
  for (const char* cat : {"forward", "backward_input", "backward_weight", "send", "recv", "sync"})
    EXPECT_THAT(trace, HasSubstr(std::string("\"cat\":\"") + cat + "\"")) << cat;
  EXPECT_THAT(trace, HasSubstr("\"name\":\"W3\""));
  // A run of its own (psar refuses to write a second run into the first's directory).
  const auto second = dir_ / "1f1b";
  train_inproc(2, pipeline_mlp_config({"1f1b", 2, 2, 1}, {"train.trace=true", "train.steps=1"}),
               second.string());
  EXPECT_THAT(read(second / "trace.json"), HasSubstr("\"cat\":\"backward\""));
}

// ---- the GPT cut into stages ------------------------------------------------
// Embeddings on the first stage, blocks split over p·v chunks, LN_f + the
// tied head + loss on the last, with a copy of wte there whose gradient is
// summed with the embedding's before every step: after 6 steps the gathered
// parameters equal the serial GPT's (‖Δθ‖/‖θ‖ ≤ 1e-5) for every schedule,
// p ∈ {2, 4}, m ∈ {p, 2p}.

const std::vector<float>& serial_gpt(const std::vector<std::string>& overrides = {}) {
  static std::map<std::vector<std::string>, std::vector<float>> cache;
  auto it = cache.find(overrides);
  if (it == cache.end())
    it = cache.emplace(overrides, train_inproc(1, testing::pipeline_gpt_config({"", 1, 1, 1},
                                                                               overrides)))
             .first;
  return it->second;
}

// Trains case `c` with `overrides` on its p·d ranks and compares the gathered
// parameters with the serial GPT trained with `serial_overrides`.
void expect_serial_gpt(const PipelineCase& c, const std::vector<std::string>& overrides = {},
                       const std::vector<std::string>& serial_overrides = {}) {
  const auto parallel = train_inproc(c.p * c.d, testing::pipeline_gpt_config(c, overrides));
  ASSERT_EQ(parallel.size(), serial_gpt(serial_overrides).size());
  EXPECT_LE(relative_difference(serial_gpt(serial_overrides), parallel), 1e-5)
      << testing::describe(c);
}

class GptPipelineTraining : public ::testing::TestWithParam<PipelineCase> {
 protected:
  static void SetUpTestSuite() { ops::set_blas_threads(1); }
};

TEST_P(GptPipelineTraining, EqualsTheSerialGpt) { expect_serial_gpt(GetParam()); }

std::vector<PipelineCase> gpt_sweep() {
  std::vector<PipelineCase> cases;
  for (const char* kind : {"gpipe", "1f1b", "interleaved", "zb_h1"})
    for (int p : {2, 4})
      for (int m : {p, 2 * p})
        cases.push_back({kind, p, m, std::string(kind) == "interleaved" ? 2 : 1, 1});
  cases.push_back({"zb_h1", 2, 4, 1, 2});  // replicas beside: the sync after the tied sum
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Schedules, GptPipelineTraining, ::testing::ValuesIn(gpt_sweep()),
                         case_name);

// Three replicas: the ring adds them in an order that depends on where a
// value sits in the arena, which differs between wte and its copy on the last
// stage; the run fails if the two copies end up with different bits
// (check_tied_params in trainer/model_parts.cc).
TEST(GptPipelineTraining, ThreeReplicasKeepTheTiedCopiesBitIdentical) {
  const std::vector<std::string> batch24{"train.batch_size=24"};
  expect_serial_gpt({"1f1b", 2, 4, 1, 3}, batch24, batch24);
}

// Embedding and head counted as layers in the even split (8 blocks over 4
// stages: 2 3 2 1): the same model, the blocks placed differently.
TEST(GptPipelineTraining, EndsCountedAsLayersInTheSplit) {
  expect_serial_gpt({"1f1b", 4, 4, 1},
                    {"parallel.account_embedding=true", "parallel.account_head=true"});
}

// The tolerance tells the trained model from one step short of it.
TEST(GptPipelineTraining, TheCheckCanFail) {
  const auto short_run =
      train_inproc(2, testing::pipeline_gpt_config({"1f1b", 2, 4, 1}, {"train.steps=5"}));
  EXPECT_GT(relative_difference(serial_gpt(), short_run), 1e-3);
}

// Adam (whose per-element steps would amplify any drift between the two wte
// copies) with an uneven split: embeddings and head on stages with fewer
// blocks. eps = 1e-6: the attention's key bias has an exactly zero gradient
// (softmax ignores a shift common to a row's scores), so what reaches it is
// float noise of ~1e-10 that Adam at eps = 1e-8 turns into steps of ~lr/100
// of arbitrary sign, in the serial model as much as in the pipeline.
TEST(GptPipelineTraining, AdamAndAnUnevenSplit) {
  const std::vector<std::string> adam{"optimizer.type=adam", "optimizer.lr=0.01",
                                      "optimizer.eps=1e-6"};
  std::vector<std::string> uneven = adam;
  uneven.push_back("parallel.stage_layers=[1, 3, 3, 1]");
  expect_serial_gpt({"1f1b", 4, 8, 1}, uneven, adam);
}

// Loss per step and the test evaluation through the stages match the serial GPT.
TEST(GptPipelineTraining, LossAndEvaluationLikeTheSerialGpt) {
  const TrainResult one = train_result(1, testing::pipeline_gpt_config({"", 1, 1, 1}));
  const TrainResult pipe = train_result(4, testing::pipeline_gpt_config({"interleaved", 2, 4, 2, 2}));
  ASSERT_GE(one.test_accuracy, 0);
  EXPECT_NEAR(pipe.test_loss, one.test_loss, 1e-5 * one.test_loss);
  EXPECT_EQ(pipe.test_accuracy, one.test_accuracy);
  const TrainResult alone = train_result(4, testing::pipeline_gpt_config({"zb_h1", 4, 4, 1}));
  ASSERT_EQ(alone.losses.size(), one.losses.size());
  for (size_t k = 0; k < one.losses.size(); ++k)
    EXPECT_NEAR(alone.losses[k], one.losses[k], 1e-5 * one.losses[k]) << "step " << k + 1;
}

// pipeline.csv for the GPT: the counted stash peaks equal the simulator's.
TEST_F(RunFilesTest, GptPipelineCsvPeaksEqualThePrediction) {
  train_inproc(2, testing::pipeline_gpt_config({"zb_h1", 2, 4, 1}, {"train.steps=2"}),
               dir_.string());
  std::string header;
  const auto rows = pipeline_rows(header);
  for (const auto& f : rows) {
    const std::string row = ::testing::PrintToString(f);
    ASSERT_EQ(f.size(), 24u) << row;
    EXPECT_EQ(f[15], f[16]) << "peak activations, measured vs simulated: " << row;
    EXPECT_EQ(f[17], f[18]) << "peak bytes, counted vs predicted: " << row;
  }
  EXPECT_EQ(rows.size(), 3u);
}

// ---- invalid combinations -----------------------------------------------------

void expect_config_error(int ranks, const Config& cfg, const std::string& message) {
  try {
    run_inproc(ranks, [&](Comm& c) { train(c, cfg); });
    ADD_FAILURE() << "no error; expected: " << message;
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr(message));
  }
}

TEST(PipelineErrors, FewerMicroBatchesThanStages) {
  expect_config_error(4, pipeline_mlp_config({"1f1b", 4, 2, 1}),
                      "needs at least as many micro-batches as stages (m=2 < p=4)");
  expect_config_error(4, pipeline_mlp_config({"zb_h1", 4, 3, 1}), "(m=3 < p=4)");
}

TEST(PipelineErrors, InterleavedNeedsAMultipleOfTheStages) {
  expect_config_error(2, pipeline_mlp_config({"interleaved", 2, 3, 2}),
                      "must be a multiple of the number of stages (3 % 2 = 1)");
}

TEST(PipelineErrors, MoreVirtualStagesThanLayers) {
  expect_config_error(4, pipeline_mlp_config({"interleaved", 4, 4, 4}),
                      "more virtual stages (p·v = 16) than model layers (8)");
}

TEST(PipelineErrors, GptMoreVirtualStagesThanBlocks) {
  expect_config_error(4, testing::pipeline_gpt_config({"interleaved", 4, 4, 4}),
                      "more virtual stages (p·v = 16) than model layers (8)");
}

TEST(PipelineErrors, OnlyInterleavedRunsChunks) {
  expect_config_error(2, pipeline_mlp_config({"1f1b", 2, 2, 2}), "use 'interleaved' for v > 1");
}

TEST(PipelineErrors, StagesThatDoNotDivideTheWorld) {
  expect_config_error(3, pipeline_mlp_config({"1f1b", 2, 2, 1}),
                      "world size 3 is not divisible by parallel.tp × parallel.pp = 1 × 2");
}

TEST(PipelineErrors, BatchNotDivisibleByReplicasTimesMicroBatches) {
  expect_config_error(2, pipeline_mlp_config({"gpipe", 2, 5, 1}),
                      "train.batch_size 48 is not divisible by d·m = 1·5 = 5");
  expect_config_error(4, pipeline_mlp_config({"gpipe", 2, 16, 1}), "d·m = 2·16 = 32");
}

TEST(PipelineErrors, TensorParallelismForAModelWithoutTensorParallelLayers) {
  expect_config_error(4, pipeline_mlp_config({"1f1b", 2, 2, 1}, {"parallel.tp=2"}),
                      "model.type mlp has no tensor-parallel layers (parallel.tp = 2)");
}

TEST(PipelineErrors, AStageLayerListOfTheWrongLength) {
  expect_config_error(2, pipeline_mlp_config({"1f1b", 2, 2, 1}, {"parallel.stage_layers=[4, 2, 2]"}),
                      "parallel.stage_layers has 3 entries; needs one per virtual stage (p·v = 2)");
}

}  // namespace
}  // namespace psar
