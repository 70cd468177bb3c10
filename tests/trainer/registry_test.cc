// The registries as the only lists: a pipeline schedule registered from a
// test binary, touching no other file, is a choice of parallel.schedule (and
// listed by `psar keys`), trains like the generator it reuses, and is gone
// with its registration; every model.type the schema accepts is a model of
// the registry; every choice of the keys whose lists live in their owners'
// tables (data.dataset, optimizer.*, parallel.order, ps.consistency,
// sync.dtype, hetero.delay.distribution) is one its parser takes, and a name
// outside them is refused by the schema.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <mutex>

#include "comm/inproc_comm.h"
#include "core/errors.h"
#include "allreduce/allreducer.h"
#include "allreduce/element_type.h"
#include "core/optim.h"
#include "modelpar/grid.h"
#include "modelpar/pp/generators.h"
#include "ps/shard_state.h"
#include "trainer/hetero.h"
#include "tests/trainer/three_d_fixture.h"
#include "trainer/schema.h"
#include "trainer/trainer.h"
#include "workloads/model.h"

namespace psar {
namespace {

using ::testing::Contains;
using ::testing::ElementsAreArray;
using ::testing::Not;

// A throwaway schedule: GPipe under another name.
const pp::ScheduleEntry kGpipeAgain{"gpipe_for_test", &pp::gpipe, &pp::gpipe_bubble,
                                    &pp::gpipe_peak, "(p-1)/m", "GPipe, registered by a test"};

std::vector<float> train_params(const Config& cfg) {
  std::vector<float> out;
  std::mutex mu;
  run_inproc(2, [&](Comm& c) {
    const TrainResult r = train(c, cfg);
    std::lock_guard<std::mutex> lock(mu);
    if (c.rank() == 0) out = r.params;
  });
  return out;
}

TEST(ScheduleRegistry, AScheduleRegisteredInATestIsAChoiceAndTrainsUntilItGoes) {
  const auto cfg = [](const std::string& kind) {
    return testing::mlp_3d_config({2, 1, 1, kind});
  };
  EXPECT_THROW(cfg("gpipe_for_test"), ConfigError);
  {
    const pp::ScheduleRegistration again(kGpipeAgain);
    EXPECT_THAT(config_schema().find("parallel.schedule")->allowed(), Contains("gpipe_for_test"));
    // Same generator, same numbers, bit for bit.
    EXPECT_EQ(train_params(cfg("gpipe_for_test")), train_params(cfg("gpipe")));
    EXPECT_THROW({ const pp::ScheduleRegistration taken(kGpipeAgain); }, ConfigError)
        << "a taken name";
  }
  EXPECT_THAT(config_schema().find("parallel.schedule")->allowed(), Not(Contains("gpipe_for_test")));
  EXPECT_THROW(cfg("gpipe_for_test"), ConfigError);
}

TEST(ModelRegistry, TheSchemasModelTypesAreTheRegistrysModels) {
  EXPECT_THAT(config_schema().find("model.type")->allowed(), ElementsAreArray(model_names()));
  EXPECT_THAT(model_names(), Contains("gpt"));
}

std::vector<std::string> choices(const std::string& key) {
  return config_schema().find(key)->allowed();
}

TEST(ChoiceRegistries, EveryChoiceOfTheSchemaIsOneItsParserTakes) {
  for (const std::string& name : choices("parallel.order"))
    EXPECT_EQ(grid_order_name(parse_grid_order(name)), name);
  for (const std::string& name : choices("ps.consistency"))
    EXPECT_EQ(ps::to_string(ps::parse_consistency(name)), name);
  for (const std::string& name : choices("sync.dtype"))
    EXPECT_EQ(element_type_name(parse_element_type(name)), name);
  for (const std::string& name : choices("optimizer.type")) {
    OptimizerOptions o;
    o.type = name;
    EXPECT_NE(make_optimizer(o, 4), nullptr) << name;
  }
  for (const std::string& name : choices("optimizer.schedule")) {
    OptimizerOptions o;
    o.schedule = name;
    EXPECT_NO_THROW(make_optimizer(o, 4)) << name;
  }
  // Those whose parser needs files or a world: the schema reads their table.
  EXPECT_THAT(choices("data.dataset"), ElementsAreArray(dataset_names()));
  EXPECT_THAT(choices("data.dataset"), Contains("synthetic_tokens"));
  EXPECT_THAT(choices("hetero.delay.distribution"),
              ElementsAreArray(delay_distribution_names()));
  EXPECT_THAT(choices("parallel.order"), ElementsAreArray(grid_order_names()));
  EXPECT_EQ(choices("parallel.order").size(), 4u);
  EXPECT_EQ(choices("sync.dtype").size(), 3u);
}

TEST(AllreduceOptions, OnePlaceReadsTheSyncKeysForGradientsAndActivations) {
  const Config c = Config::load_string(
      "{}", config_schema(),
      {"sync.segment_bytes=64K", "sync.dtype=bf16", "sync.accumulate=dtype",
       "sync.nccl_algo=tree", "sync.nccl_proto=LL"},
      "--set");
  const AllreduceOptions grads = allreduce_options(c);
  EXPECT_EQ(grads.segment_bytes, 64 * 1024);
  EXPECT_EQ(grads.dtype, ElementType::kBf16);
  EXPECT_TRUE(grads.accumulate_in_dtype);
  EXPECT_EQ(grads.nccl_algo, "tree");
  EXPECT_EQ(grads.nccl_proto, "LL");
  // A tensor-parallel all-reduce: the same segments and NCCL settings (it
  // ignored sync.segment_bytes before), activations in float32.
  const AllreduceOptions acts = activation_allreduce_options(grads);
  EXPECT_EQ(acts.segment_bytes, 64 * 1024);
  EXPECT_EQ(acts.dtype, ElementType::kFp32);
  EXPECT_FALSE(acts.accumulate_in_dtype);
  EXPECT_EQ(acts.nccl_algo, "tree");
  EXPECT_EQ(acts.nccl_proto, "LL");
  EXPECT_THROW(allreduce_options(Config::load_string("{}", config_schema(),
                                                     {"sync.segment_bytes=0"}, "--set")),
               ConfigError);
}

TEST(ChoiceRegistries, ANameOutsideARegistryIsRefusedByTheSchema) {
  for (const char* key : {"data.dataset", "optimizer.type", "optimizer.schedule",
                          "parallel.order", "ps.consistency", "sync.dtype",
                          "hetero.delay.distribution"})
    EXPECT_THROW(Config::load_string("{}", config_schema(), {std::string(key) + "=nonesuch"},
                                     "--set"),
                 ConfigError)
        << key;
}

}  // namespace
}  // namespace psar
