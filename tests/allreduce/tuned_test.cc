// `auto` (allreduce/tuned.h): the tuning table's predictions — the measured
// time at a measured size, log-log interpolation between sizes, α + β·n
// beyond them — the choice of the lowest prediction (a unit test on a given
// table), the errors naming the file, and the chosen algorithms running on
// in-process ranks with the double reference's result.

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <mutex>

#include "allreduce/tuned.h"
#include "comm/inproc_comm.h"
#include "core/errors.h"

namespace psar {
namespace {

using ::testing::HasSubstr;

// ring: 10 us + 1 ns/byte; tree: 2 us + 4 ns/byte (faster below 8/3 KiB... at 2.7 KB)
TuningTable table() {
  TuningTable t;
  for (int64_t n : {1024, 4096, 65536, 1 << 20}) {
    t.add(4, "ring", n, 10e-6 + 1e-9 * static_cast<double>(n));
    t.add(4, "tree", n, 2e-6 + 4e-9 * static_cast<double>(n));
  }
  t.add(8, "ring", 1024, 1e-5);  // one size: not a candidate at 8 ranks
  return t;
}

TEST(TuningTable, PredictsMeasuredInterpolatedAndExtendedTimes) {
  const TuningTable t = table();
  EXPECT_DOUBLE_EQ(t.predict("ring", 4, 4096), 10e-6 + 4096e-9);
  // Between 4096 and 65536 (log-midpoint 16384): the geometric mean of the ends.
  EXPECT_NEAR(t.predict("ring", 4, 16384),
              std::sqrt((10e-6 + 4096e-9) * (10e-6 + 65536e-9)), 1e-12);
  // Beyond the largest size: the line through the last two points (exact for α + β·n).
  EXPECT_NEAR(t.predict("tree", 4, 4 << 20), 2e-6 + 4e-9 * (4 << 20), 1e-12);
  EXPECT_NEAR(t.predict("ring", 4, 16), 10e-6 + 16e-9, 1e-12);
}

TEST(TuningTable, PicksTheLowestPrediction) {
  const TuningTable t = table();
  for (int64_t n : {16, 1024, 2048, 4096, 16384, 1 << 20, 1 << 24}) {
    const std::string want =
        t.predict("ring", 4, n) < t.predict("tree", 4, n) ? "ring" : "tree";
    EXPECT_EQ(t.best(4, n), want) << n << " bytes";
  }
  EXPECT_EQ(t.best(4, 1024), "tree");
  EXPECT_EQ(t.best(4, 1 << 20), "ring");
  EXPECT_THAT(t.algos(4), ::testing::ElementsAre("ring", "tree"));
}

TEST(TuningTable, AWorldSizeNotTunedIsAConfigErrorSayingWhatToRun) {
  try {
    table().best(8, 4096);
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr("has no 8-rank rows"));
    EXPECT_THAT(e.what(), HasSubstr("run psar tune with 8 ranks"));
  }
}

TEST(TuningTable, AMissingOrMalformedFileIsNamed) {
  const auto dir = std::filesystem::temp_directory_path() / ("psar_tune_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  EXPECT_THAT([&] {
    try { TuningTable::load((dir / "none.csv").string()); } catch (const ConfigError& e) { return std::string(e.what()); }
    return std::string();
  }(), HasSubstr("cannot open the tuning table"));
  {
    std::ofstream(dir / "bad.csv") << "ranks,algo,bytes,time_us\n4,ring,x,3\n";
  }
  EXPECT_THAT([&] {
    try { TuningTable::load((dir / "bad.csv").string()); } catch (const ConfigError& e) { return std::string(e.what()); }
    return std::string();
  }(), HasSubstr("line 2: '4,ring,x,3'"));
  std::filesystem::remove_all(dir);
}

TEST(TunedAllreducer, RunsTheChosenAlgorithmPerSizeWithTheReferenceResult) {
  std::mutex mu;
  std::map<std::string, int64_t> choices;
  run_inproc(4, [&](Comm& comm) {
    TunedAllreducer algo(table(), {});
    for (int64_t count : {100, 200000}) {  // 400 B: tree; 800 KB: ring
      std::vector<float> data(static_cast<size_t>(count));
      for (int64_t i = 0; i < count; ++i) data[i] = static_cast<float>((i % 7) + comm.rank());
      algo.allreduce(comm, data);
      for (int64_t i = 0; i < count; ++i)
        ASSERT_EQ(data[i], static_cast<float>(4 * (i % 7) + 6)) << i;
    }
    std::lock_guard<std::mutex> lock(mu);
    choices = algo.choices();
  });
  EXPECT_EQ(choices["tree"], 1);
  EXPECT_EQ(choices["ring"], 1);
}

}  // namespace
}  // namespace psar
