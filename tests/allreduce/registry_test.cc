// The allreduce registry as the one list: an algorithm registered from a test
// binary, touching no other file, is what the benchmark runs by default,
// what the registry-driven tests sweep and a choice of the config's
// sync.backend and parallel.tp_allreduce; every entry states its cost form.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <vector>

#include "allreduce/allreducer.h"
#include "comm/inproc_comm.h"
#include "core/errors.h"
#include "trainer/cli.h"
#include "trainer/schema.h"
#include "trainer/trainer.h"

namespace psar {
namespace {

using ::testing::Contains;
using ::testing::Not;

// A throwaway algorithm, written as a program: every rank sends its vector to
// rank 0, which adds them in rank order and sends the sum back.
Program star_program(const ProgramShape& shape) {
  Program p("star allreduce", shape.ranks, shape.count);
  for (int r = 1; r < shape.ranks; ++r) p.transfer(0, r, 0, 0, shape.count, true);
  for (int r = 1; r < shape.ranks; ++r) p.transfer(1, 0, r, 0, shape.count, false);
  p.finish();
  return p;
}

// N-1 sequential messages in and out of rank 0.
CostTerms star_cost(int ranks, int64_t bytes, const AllreduceOptions&) {
  const double n = static_cast<double>(bytes);
  return {2.0 * (ranks - 1), 2.0 * (ranks - 1) * n, (ranks - 1) * n};
}
int64_t star_sent_bytes(int rank, int ranks, int64_t count) {
  if (ranks == 1 || count == 0) return 0;
  return 4 * count * (rank == 0 ? ranks - 1 : 1);
}

const AllreducerEntry kStar{
    .name = "star_for_test",
    .summary = "gather to rank 0, add, send back (a test's own algorithm)",
    .program = &star_program,
    .cost = &star_cost};

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
