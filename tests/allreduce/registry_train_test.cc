// The allreduce registry seen from the configuration: an algorithm
// registered from a test binary is a choice of sync.backend and
// parallel.tp_allreduce, and trains like the built-in ones.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "comm/inproc_comm.h"
#include "core/errors.h"
#include "tests/allreduce/star_algorithm.h"
#include "trainer/schema.h"
#include "trainer/trainer.h"

namespace psar {
namespace {

using ::testing::Contains;
using psar::testing::kStar;

TEST(AllreduceRegistry, AnAlgorithmRegisteredInATestIsAConfigChoiceAndTrains) {
  const auto config = [](const std::string& backend) {
    return Config::load_string(
        "model: {type: mlp, hidden: [16]}\n"
        "data: {dataset: synthetic, synthetic_samples: 240, synthetic_features: 8, "
        "synthetic_classes: 3, test_limit: 30}\n"
        "train: {steps: 5, batch_size: 24, log_every: 100}\n"
        "sync: {backend: " + backend + ", timeout: 20s}\n",
        config_schema());
  };
  EXPECT_THROW(config("star_for_test"), ConfigError) << "not a choice before it is registered";
  const AllreducerRegistration star(kStar);
  EXPECT_THAT(config_schema().find("sync.backend")->allowed(), Contains("star_for_test"));
  EXPECT_THAT(config_schema().find("parallel.tp_allreduce")->allowed(), Contains("star_for_test"));
  std::vector<std::vector<float>> params(2);
  for (const char* backend : {"ring", "star_for_test"})
    run_inproc(3, [&](Comm& comm) {
      const TrainResult r = train(comm, config(backend));
      if (comm.rank() == 0) params[std::string(backend) == "ring" ? 0 : 1] = r.params;
    });
  ASSERT_EQ(params[0].size(), params[1].size());
  for (size_t i = 0; i < params[0].size(); ++i) EXPECT_NEAR(params[1][i], params[0][i], 1e-5);
}

}  // namespace
}  // namespace psar
