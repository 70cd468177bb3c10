// What goes wrong must end in an error that names the collective and the
// peer, never in a hang or in silently wrong sums: sizes that disagree across
// ranks, and a rank that dies in the middle of a collective.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <mutex>

#include "allreduce/allreducer.h"
#include "allreduce/collectives.h"
#include "comm/inproc_comm.h"
#include "core/errors.h"
#include "tests/allreduce/allreduce_test_util.h"
#include "tests/allreduce/forwarding_comm.h"

namespace psar {
namespace {

using ::testing::HasSubstr;
using ::testing::MatchesRegex;
using ::testing::Not;
using testing::count_wrong;
using testing::inproc_algorithms;
using testing::make_input;

// A rank that crashes after posting `limit` messages: it marks itself failed
// (as the launcher would see a dead process) and throws. Until then every
// call is forwarded to the real communicator.
class DyingComm final : public testing::ForwardingComm {
 public:
  DyingComm(Comm& inner, int limit) : ForwardingComm(inner), limit_(limit) {}

 protected:
  void on_post(Post, int) override {
    if (posted_++ < limit_) return;
    inproc_fail(inner(), rank(), "injected crash");
    throw CommError("injected crash after " + std::to_string(limit_) + " messages");
  }

 private:
  int limit_, posted_ = 0;
};

struct FailureCase {
  std::string algorithm;
  int ranks;
  int limit;  // messages the victim posts before it dies
};

class APeerDies : public ::testing::TestWithParam<FailureCase> {};

TEST_P(APeerDies, SurvivorsGetACommErrorNamingTheOperationNotATimeout) {
  const FailureCase& c = GetParam();
  constexpr int64_t kCount = 20000;
  const int victim = c.ranks / 2;
  InProcOptions options;
  options.timeout_s = 60;  // a survivor that only notices through its deadline fails the test
  std::mutex mu;
  std::vector<std::string> errors;  // survivors'
  int completed = 0;
  EXPECT_THROW(
      run_inproc(c.ranks,
                 [&](Comm& comm) {
                   AllreduceOptions ao;
                   ao.segment_bytes = 4096;  // many messages, so the crash lands mid-stream
                   auto algo = make_allreducer(c.algorithm, ao);
                   auto data = make_input(3, comm.rank(), kCount);
                   if (comm.rank() == victim) {
                     DyingComm dying(comm, c.limit);
                     algo->allreduce(dying, data);
                     ADD_FAILURE() << "the victim finished before its crash";
                     return;
                   }
                   try {
                     algo->allreduce(comm, data);
                   } catch (const TimeoutError& e) {
                     std::lock_guard<std::mutex> lock(mu);
                     errors.push_back(std::string("TIMEOUT ") + e.what());
                     throw;
                   } catch (const CommError& e) {
                     std::lock_guard<std::mutex> lock(mu);
                     errors.push_back(e.what());
                     throw;
                   }
                   // Whoever finishes got every contribution intact.
                   EXPECT_EQ(count_wrong(data, 3, c.ranks), 0) << "rank " << comm.rank();
                   std::lock_guard<std::mutex> lock(mu);
                   ++completed;
                 },
                 options),
      CommError);
  EXPECT_FALSE(errors.empty()) << "no survivor noticed the crash";
  EXPECT_EQ(static_cast<int>(errors.size()) + completed, c.ranks - 1);
  for (const auto& e : errors) {
    EXPECT_THAT(e, Not(HasSubstr("TIMEOUT"))) << e;
    EXPECT_THAT(e, HasSubstr("allreduce")) << e;
    EXPECT_THAT(e, HasSubstr("failed")) << e;
    EXPECT_THAT(e, MatchesRegex(".*(recv from|send to) rank [0-9]+.*")) << e;
  }
}

std::vector<FailureCase> failure_cases() {
  std::vector<FailureCase> cases;
  for (const auto& algo : inproc_algorithms())
    for (int n : {3, 4, 8})
      for (int limit : {0, 1}) cases.push_back({algo, n, limit});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Allreduce, APeerDies, ::testing::ValuesIn(failure_cases()),
                         [](const auto& info) {
                           return info.param.algorithm + "_" + std::to_string(info.param.ranks) +
                                  "ranks_after" + std::to_string(info.param.limit) + "messages";
                         });

struct MismatchCase {
  std::string algorithm;
  int ranks;
  int64_t count, odd_count;  // the last rank passes odd_count, the rest count
};

class SizesDisagree : public ::testing::TestWithParam<MismatchCase> {};

TEST_P(SizesDisagree, EndInACommErrorNamingTheOperationAndAPeer) {
  const MismatchCase& c = GetParam();
  InProcOptions options;
  // A rank whose count is 0 returns at once and leaves the others waiting:
  // they give up at the deadline, kept short here.
  options.timeout_s = 0.3;
  try {
    run_inproc(c.ranks,
               [&](Comm& comm) {
                 const int64_t count = comm.rank() == c.ranks - 1 ? c.odd_count : c.count;
                 auto data = make_input(1, comm.rank(), count);
                 make_allreducer(c.algorithm)->allreduce(comm, data);
               },
               options);
    FAIL() << "no error";
  } catch (const CommError& e) {
    EXPECT_THAT(e.what(), HasSubstr("allreduce")) << e.what();
    EXPECT_THAT(e.what(), MatchesRegex(".*(recv from|send to) rank [0-9]+.*")) << e.what();
  }
}

std::vector<MismatchCase> mismatch_cases() {
  std::vector<MismatchCase> cases;
  for (const auto& algo : inproc_algorithms())
    for (int n : {2, 3, 4, 5})
      for (auto [a, b] : {std::pair<int64_t, int64_t>{1000, 1001}, {1000, 999}, {1000, 0},
                          {7, 70000}})
        cases.push_back({algo, n, a, b});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Allreduce, SizesDisagree, ::testing::ValuesIn(mismatch_cases()),
                         [](const auto& info) {
                           return info.param.algorithm + "_" + std::to_string(info.param.ranks) +
                                  "ranks_" + std::to_string(info.param.count) + "vs" +
                                  std::to_string(info.param.odd_count);
                         });

TEST(SizesDisagree, InReduceScatterTheErrorNamesReduceScatter) {
  InProcOptions options;
  options.timeout_s = 1.0;
  try {
    run_inproc(3,
               [](Comm& comm) {
                 std::vector<float> data(comm.rank() == 2 ? 301 : 300, 1.0f);
                 RingReduceScatter().reduce_scatter(comm, data);
               },
               options);
    FAIL() << "no error";
  } catch (const CommError& e) {
    EXPECT_THAT(e.what(), HasSubstr("ring reduce-scatter: recv from rank")) << e.what();
  }
}

}  // namespace
}  // namespace psar
