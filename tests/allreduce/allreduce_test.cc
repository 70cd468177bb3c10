// Every allreduce of the registry, on the in-process transport, over world
// sizes 1..8 (powers of two and not) and counts at the edges (0, 1, N-1, N+1,
// a large prime, 2^20), with each element type on the wire (fp32 at every
// count; bf16 and fp16 up to the prime): the result equals a double-precision
// reference within the element type's tolerance and is bitwise identical on
// every rank.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "allreduce/allreducer.h"
#include "comm/inproc_comm.h"
#include "core/errors.h"
#include "tests/allreduce/allreduce_test_util.h"
#include <gtest/gtest-spi.h>

namespace psar {
namespace {

using testing::count_wrong;
using testing::inproc_algorithms;
using testing::make_input;
using testing::same_bits;

struct Case {
  std::string algorithm;
  int ranks;
  int64_t count;
  ElementType dtype = ElementType::kFp32;
};

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  return info.param.algorithm + "_" + std::to_string(info.param.ranks) + "ranks_" +
         std::to_string(info.param.count) + "floats_" + element_type_name(info.param.dtype);
}

constexpr int64_t kLargePrime = 100003;
constexpr int64_t kMillion = int64_t{1} << 20;

std::vector<Case> all_cases() {
  std::vector<Case> cases;
  for (const auto& algo : inproc_algorithms())
    for (int n : {1, 2, 3, 4, 5, 7, 8}) {
      std::set<int64_t> counts = {0, 1, n - 1, n + 1, kLargePrime, kMillion};
      for (int64_t c : counts) {
        cases.push_back({algo, n, c});
        if (c < kMillion && algo != "nccl")
          for (ElementType t : {ElementType::kBf16, ElementType::kFp16}) cases.push_back({algo, n, c, t});
      }
    }
  return cases;
}

class EveryAllreduce : public ::testing::TestWithParam<Case> {};

TEST_P(EveryAllreduce, SumsLikeTheDoubleReferenceWithIdenticalBitsOnEveryRank) {
  const Case& c = GetParam();
  // Small segments, so that large vectors stream in many pipelined segments.
  AllreduceOptions options;
  options.segment_bytes = 16 * 1024;
  options.dtype = c.dtype;
  std::vector<std::vector<float>> results(static_cast<size_t>(c.ranks));
  constexpr uint64_t kSeed = 11;
  run_inproc(c.ranks, [&](Comm& comm) {
    auto algo = make_allreducer(c.algorithm, options);
    auto data = make_input(kSeed, comm.rank(), c.count);
    algo->allreduce(comm, data);
    results[static_cast<size_t>(comm.rank())] = std::move(data);
  });
  EXPECT_EQ(count_wrong(results[0], kSeed, c.ranks, 0, testing::tolerance(c.dtype, c.ranks)), 0);
  for (int r = 1; r < c.ranks; ++r)
    EXPECT_TRUE(same_bits(results[static_cast<size_t>(r)], results[0]))
        << "rank " << r << " differs from rank 0";
  // Every value is one of the element type's (rounding changes nothing).
  std::vector<float> rounded = results[0];
  round_to(c.dtype, rounded.data(), static_cast<int64_t>(rounded.size()));
  EXPECT_TRUE(same_bits(rounded, results[0])) << "a value is not a " << element_type_name(c.dtype);
}

// The tolerance is not loose enough to hide a lost term: every algorithm with
// bf16 on the wire, one rank's vector left out of the reference, fails it.
TEST(EveryAllreduceControl, ALostTermIsOutsideTheBf16Tolerance) {
  constexpr int kRanks = 4;
  constexpr int64_t kCount = 4096;
  for (const auto& algo : inproc_algorithms()) {
    AllreduceOptions options;
    options.dtype = ElementType::kBf16;
    std::vector<float> rank0;
    run_inproc(kRanks, [&](Comm& comm) {
      auto data = make_input(3, comm.rank(), kCount);
      make_allreducer(algo, options)->allreduce(comm, data);
      if (comm.rank() == 0) rank0 = std::move(data);
    });
    ::testing::TestPartResultArray failures;
    int64_t wrong = 0;
    {
      ::testing::ScopedFakeTestPartResultReporter quiet(
          ::testing::ScopedFakeTestPartResultReporter::INTERCEPT_ONLY_CURRENT_THREAD, &failures);
      wrong = count_wrong(rank0, 3, kRanks - 1, 0, testing::tolerance(ElementType::kBf16, kRanks));
    }
    EXPECT_GT(wrong, kCount / 2) << algo;
  }
}

// With the sum in the element type (sync.accumulate: dtype) every partial sum
// is rounded too: still within bf16's tolerance and identical on every rank.
// Where a rank adds two or more received values before it sends or keeps the
// sum (tree: two children; naive: N-1 vectors) the result differs from the
// float32 accumulation somewhere — the option takes effect. (Ring,
// halving-doubling and butterfly put every partial sum on the wire right
// after one addition, and a rank keeps what it sends: the two modes agree.)
TEST(EveryAllreduceControl, SummingInTheElementTypeRoundsThePartialSums) {
  constexpr int kRanks = 5;
  constexpr int64_t kCount = 20011;
  for (const auto& algo : inproc_algorithms()) {
    std::vector<std::vector<float>> by_mode;
    for (bool in_dtype : {false, true}) {
      AllreduceOptions options;
      options.dtype = ElementType::kBf16;
      options.accumulate_in_dtype = in_dtype;
      std::vector<std::vector<float>> results(kRanks);
      run_inproc(kRanks, [&](Comm& comm) {
        auto data = make_input(9, comm.rank(), kCount);
        make_allreducer(algo, options)->allreduce(comm, data);
        results[static_cast<size_t>(comm.rank())] = std::move(data);
      });
      EXPECT_EQ(count_wrong(results[0], 9, kRanks, 0, testing::tolerance(ElementType::kBf16, kRanks)), 0) << algo;
      for (int r = 1; r < kRanks; ++r) EXPECT_TRUE(same_bits(results[static_cast<size_t>(r)], results[0])) << algo;
      by_mode.push_back(results[0]);
    }
    if (algo == "tree" || algo == "naive") {
      EXPECT_FALSE(same_bits(by_mode[0], by_mode[1])) << algo;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Allreduce, EveryAllreduce, ::testing::ValuesIn(all_cases()), case_name);

class EachAlgorithm : public ::testing::TestWithParam<std::string> {};

// A plan made for one size must not leak into the next call; a plan reused
// for the same size must give the same answer again.
TEST_P(EachAlgorithm, RepeatedCallsOfChangingSizeReuseAndRedoThePlan) {
  constexpr int kRanks = 5;
  std::vector<std::vector<std::vector<float>>> results(kRanks);
  const std::vector<int64_t> counts = {1000, 1000, 17, 4099, 1000};
  run_inproc(kRanks, [&](Comm& comm) {
    AllreduceOptions options;
    options.segment_bytes = 1024;
    auto algo = make_allreducer(GetParam(), options);
    for (size_t k = 0; k < counts.size(); ++k) {
      auto data = make_input(100 + k, comm.rank(), counts[k]);
      algo->allreduce(comm, data);
      results[static_cast<size_t>(comm.rank())].push_back(std::move(data));
    }
  });
  for (size_t k = 0; k < counts.size(); ++k) {
    EXPECT_EQ(count_wrong(results[0][k], 100 + k, kRanks), 0) << "call " << k;
    for (int r = 1; r < kRanks; ++r)
      EXPECT_TRUE(same_bits(results[static_cast<size_t>(r)][k], results[0][k])) << "call " << k;
  }
}

// Segmenting only changes how bytes travel, never which rank adds what in
// which order: the bits must not depend on the segment size.
TEST_P(EachAlgorithm, BitsDoNotDependOnTheSegmentSize) {
  constexpr int kRanks = 4;
  constexpr int64_t kCount = 50021;
  std::vector<std::vector<float>> by_segment;
  for (int64_t segment : {int64_t{1000}, int64_t{4096}, int64_t{256 * 1024}, int64_t{1} << 30}) {
    std::vector<float> rank0;
    run_inproc(kRanks, [&](Comm& comm) {
      AllreduceOptions options;
      options.segment_bytes = segment;
      auto data = make_input(5, comm.rank(), kCount);
      make_allreducer(GetParam(), options)->allreduce(comm, data);
      if (comm.rank() == 0) rank0 = std::move(data);
    });
    by_segment.push_back(std::move(rank0));
  }
  for (size_t k = 1; k < by_segment.size(); ++k)
    EXPECT_TRUE(same_bits(by_segment[k], by_segment[0])) << "segment choice " << k;
}

INSTANTIATE_TEST_SUITE_P(Allreduce, EachAlgorithm, ::testing::ValuesIn(inproc_algorithms()),
                         [](const auto& info) { return info.param; });

// Different algorithms back to back on one communicator, with no barrier in
// between: fast ranks run ahead into the next collective, whose messages must
// not be confused with the one still finishing elsewhere.
TEST(Allreduce, DifferentAlgorithmsBackToBackDoNotMixTheirMessages) {
  constexpr int kRanks = 6;
  const auto names = inproc_algorithms();
  std::vector<std::vector<std::vector<float>>> results(kRanks);
  run_inproc(kRanks, [&](Comm& comm) {
    std::vector<std::unique_ptr<Allreducer>> algos;
    for (const auto& n : names) algos.push_back(make_allreducer(n));
    for (int round = 0; round < 3; ++round)
      for (size_t a = 0; a < algos.size(); ++a) {
        auto data = make_input(round * 10 + a, comm.rank(), 3001 + static_cast<int64_t>(a));
        algos[a]->allreduce(comm, data);
        results[static_cast<size_t>(comm.rank())].push_back(std::move(data));
      }
  });
  size_t k = 0;
  for (int round = 0; round < 3; ++round)
    for (size_t a = 0; a < names.size(); ++a, ++k) {
      EXPECT_EQ(count_wrong(results[0][k], round * 10 + a, kRanks), 0) << names[a];
      for (int r = 1; r < kRanks; ++r)
        EXPECT_TRUE(same_bits(results[static_cast<size_t>(r)][k], results[0][k])) << names[a];
    }
}

TEST(AllreduceRegistry, UnknownNameIsAConfigErrorListingTheKnownOnes) {
  try {
    make_allreducer("rign");
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("rign"));
    for (const auto& name : allreducer_names()) EXPECT_THAT(e.what(), ::testing::HasSubstr(name));
  }
}

TEST(AllreduceRegistry, NonPositiveSegmentSizeIsAConfigError) {
  AllreduceOptions options;
  options.segment_bytes = 0;
  EXPECT_THROW(make_allreducer("ring", options), ConfigError);
  EXPECT_THROW(make_allreducer("tree", options), ConfigError);
}

TEST(AllreduceRegistry, MpiBackendOnTheInProcessTransportIsAConfigError) {
  EXPECT_THROW(run_inproc(2,
                          [](Comm& comm) {
                            std::vector<float> v(4, 1.0f);
                            make_allreducer("mpi")->allreduce(comm, v);
                          }),
               ConfigError);
}

}  // namespace
}  // namespace psar
