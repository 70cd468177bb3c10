// The allreduce registry as the one list: an algorithm registered from a test
// binary, touching no other file, is what the benchmark runs by default and
// what the registry-driven tests sweep (a choice of the config too:
// registry_train_test.cc); every entry states its cost form.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <vector>

#include "allreduce/allreducer.h"
#include "comm/inproc_comm.h"
#include "core/errors.h"
#include "tests/allreduce/star_algorithm.h"

namespace psar {
namespace {

using ::testing::Contains;
using ::testing::Not;
using psar::testing::kStar;
using psar::testing::star_program;
using psar::testing::star_sent_bytes;

TEST(AllreduceRegistry, AnAlgorithmRegisteredInATestIsInTheBenchmarkDefaultsUntilItGoes) {
  ASSERT_THAT(bench_allreduce_default_algos(), Not(Contains("star_for_test")));
  {
    const AllreducerRegistration star(kStar);
    EXPECT_THAT(bench_allreduce_default_algos(), Contains("star_for_test"));
    EXPECT_THAT(allreducer_names(), Contains("star_for_test"));
    // It runs like the built-in ones, and its counters match its formula.
    const int ranks = 3;
    const int64_t count = 1001;
    std::vector<int64_t> sent(ranks);
    std::vector<std::vector<float>> result(ranks);
    run_inproc(ranks, [&](Comm& comm) {
      auto algo = make_allreducer("star_for_test");
      std::vector<float> data(count, static_cast<float>(comm.rank() + 1));
      comm.reset_counters();
      algo->allreduce(comm, data);
      sent[comm.rank()] = comm.counters().bytes_sent;
      result[comm.rank()] = data;
    });
    for (int r = 0; r < ranks; ++r) {
      EXPECT_EQ(sent[r], star_sent_bytes(r, ranks, count)) << r;
      EXPECT_EQ(result[r], std::vector<float>(count, 6.0f)) << r;
    }
  }
  EXPECT_THAT(bench_allreduce_default_algos(), Not(Contains("star_for_test")));
  EXPECT_THROW(find_allreducer("star_for_test"), ConfigError);
}

// The registry before and after a refused registration: the same names, and
// "ring" still the ring's program, not the star's.
TEST(AllreduceRegistry, RegisteringATakenNameIsAConfigErrorAndChangesNothing) {
  const std::vector<std::string> before = allreducer_names(true);
  AllreducerEntry ring_again = kStar;
  ring_again.name = "ring";
  EXPECT_THROW(AllreducerRegistration{ring_again}, ConfigError);
  EXPECT_EQ(allreducer_names(true), before);
  EXPECT_NE(find_allreducer("ring").program, &star_program);
  EXPECT_EQ(find_allreducer("ring").program_for(3, 10, {}).name, "ring allreduce");
}

TEST(AllreduceRegistry, TheBenchmarkDefaultsAreTheHostAlgorithmsInRegistryOrder) {
  std::vector<std::string> host;
  for (const auto& e : allreducer_registry())
    if (!e.device) host.push_back(e.name);
  EXPECT_EQ(bench_allreduce_default_algos(), host);
  EXPECT_FALSE(host.empty());
}

// Every entry has a cost form; one rank moves nothing and costs nothing.
TEST(AllreduceRegistry, EveryAlgorithmStatesACostFormThatIsZeroOnOneRank) {
  for (const auto& e : allreducer_registry()) {
    ASSERT_NE(e.cost, nullptr) << e.name;
    const CostTerms one = e.cost(1, 1 << 20, AllreduceOptions{});
    EXPECT_EQ(one.time(1, 1, 1), 0.0) << e.name;
    const CostTerms two = e.cost(2, 1 << 20, AllreduceOptions{});
    EXPECT_GT(two.alpha, 0) << e.name;
    EXPECT_GT(two.beta, 0) << e.name;
  }
}

}  // namespace
}  // namespace psar
