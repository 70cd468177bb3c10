// The registries as the only lists: a pipeline schedule registered from a
// test binary, touching no other file, is a choice of parallel.schedule (and
// listed by `psar keys`), trains like the generator it reuses, and is gone
// with its registration; every model.type the schema accepts is a model of
// the registry.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <mutex>

#include "comm/inproc_comm.h"
#include "core/errors.h"
#include "modelpar/pp/generators.h"
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

}  // namespace
}  // namespace psar
