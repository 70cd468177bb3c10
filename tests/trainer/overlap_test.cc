// Overlapping the gradient sync with the backward, in-process: the bucket
// plan is exactly as specified for given tensor sizes; with sync.overlap on,
// for every point-to-point allreduce and both priorities, the parameters
// after 20 steps equal the non-overlapped run within 1e-6 relative and are
// bitwise identical on every rank — data parallelism over 4 ranks for the
// MLP and the GPT, and a (2, 2, 2) 3D run with its tied embedding; a backend
// that cannot overlap is a ConfigError. (mpi and the MPI transport:
// overlap_mpi_test.cc.)

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <mutex>

#include "allreduce/allreducer.h"
#include "comm/inproc_comm.h"
#include "core/errors.h"
#include "core/ops.h"
#include "tests/trainer/three_d_fixture.h"
#include "tests/trainer/train_fixture.h"
#include "trainer/buckets.h"
#include "trainer/trainer.h"

namespace psar {
namespace {

using ::testing::ElementsAre;
using testing::relative_difference;

// ---- the bucket plan ------------------------------------------------------------

// Tensors of sizes `sizes` laid out in this order in the arena (forward
// order), offered in backward order (the last first).
std::vector<BucketTensor> backward_order(const std::vector<int64_t>& sizes,
                                         const std::vector<int>& skip = {}) {
  std::vector<BucketTensor> out;
  int64_t end = 0;
  std::vector<ArenaRange> ranges;
  for (int64_t n : sizes) ranges.push_back({end, end += n});
  for (size_t k = ranges.size(); k-- > 0;)
    out.push_back({ranges[k], std::find(skip.begin(), skip.end(), static_cast<int>(k)) != skip.end()});
  return out;
}

TEST(BucketPlan, FillsInBackwardOrderAndNeverSplitsATensorThatFits) {
  // arena: a[0,3) b[3,7) c[7,9) d[9,10); backward: d c b a; capacity 6
  EXPECT_THAT(plan_buckets(backward_order({3, 4, 2, 1}), 6),
              ElementsAre(ArenaRange{7, 10}, ArenaRange{3, 7}, ArenaRange{0, 3}));
  // capacity 7: d c (3) + b (4) = 7 fits exactly; a opens the next bucket
  EXPECT_THAT(plan_buckets(backward_order({3, 4, 2, 1}), 7),
              ElementsAre(ArenaRange{3, 10}, ArenaRange{0, 3}));
  // one bucket for everything
  EXPECT_THAT(plan_buckets(backward_order({3, 4, 2, 1}), 100), ElementsAre(ArenaRange{0, 10}));
}

TEST(BucketPlan, SplitsOnlyATensorLargerThanABucketIntoCapacityPiecesFromItsEnd) {
  // arena: a[0,2) big[2,12) c[12,13); capacity 4: c | big in [8,12) [4,8) [2,4) | a
  EXPECT_THAT(plan_buckets(backward_order({2, 10, 1}), 4),
              ElementsAre(ArenaRange{12, 13}, ArenaRange{8, 12}, ArenaRange{4, 8},
                          ArenaRange{2, 4}, ArenaRange{0, 2}));
}

TEST(BucketPlan, ASkippedTensorClosesTheBucketSoEachIsContiguous) {
  // arena: a[0,1) tied[1,3) b[3,4) c[4,5); skip tied: c b | a
  EXPECT_THAT(plan_buckets(backward_order({1, 2, 1, 1}, {1}), 100),
              ElementsAre(ArenaRange{3, 5}, ArenaRange{0, 1}));
}

TEST(BucketPlan, ChunksCutEachBucketKeepingTheOrder) {
  EXPECT_THAT(cut_chunks({{5, 10}, {0, 5}}, 2),
              ElementsAre(ArenaRange{5, 7}, ArenaRange{7, 9}, ArenaRange{9, 10}, ArenaRange{0, 2},
                          ArenaRange{2, 4}, ArenaRange{4, 5}));
}

// ---- training -------------------------------------------------------------------

std::vector<float> train_ranks(int ranks, const Config& cfg) {
  std::vector<float> first;
  std::mutex mu;
  run_inproc(ranks, [&](Comm& c) {
    TrainResult r = train(c, cfg);
    std::lock_guard<std::mutex> lock(mu);
    if (first.empty()) first = r.params;
    else EXPECT_EQ(r.params, first) << "rank " << c.rank() << ": not bitwise identical";
  });
  return first;
}

struct OverlapCase {
  std::string backend, priority;
};

class Overlap : public ::testing::TestWithParam<OverlapCase> {
 protected:
  static void SetUpTestSuite() { ops::set_blas_threads(1); }
};

std::vector<std::string> overlap_sets(const OverlapCase& c, const std::string& bucket) {
  return {"sync.backend=" + c.backend, "sync.overlap=true", "sync.priority=" + c.priority,
          "sync.bucket_bytes=" + bucket, "sync.priority_chunk_bytes=1K"};
}

void expect_equal_to_plain(int ranks, const Config& plain, const Config& overlapped) {
  const auto want = train_ranks(ranks, plain);
  const auto got = train_ranks(ranks, overlapped);
  ASSERT_EQ(got.size(), want.size());
  EXPECT_LE(relative_difference(want, got), 1e-6);
}

TEST_P(Overlap, MlpOverFourRanksEqualsTheNonOverlappedRun) {
  const OverlapCase c = GetParam();
  expect_equal_to_plain(4, testing::overlap_mlp_config({"sync.backend=" + c.backend}),
                        testing::overlap_mlp_config(overlap_sets(c, "4K")));
}

TEST_P(Overlap, GptOverFourRanksEqualsTheNonOverlappedRun) {
  const OverlapCase c = GetParam();
  const testing::Grid3d dp{1, 1, 4};
  expect_equal_to_plain(4, testing::gpt_3d_config(dp, {"sync.backend=" + c.backend, "train.steps=20"}),
                        [&] {
                          auto sets = overlap_sets(c, "16K");
                          sets.push_back("train.steps=20");
                          return testing::gpt_3d_config(dp, sets);
                        }());
}

std::vector<OverlapCase> overlap_cases() {
  std::vector<OverlapCase> cases;
  for (const auto& e : allreducer_registry())
    if (!e.device && !e.needs_mpi)
      for (const char* priority : {"fifo", "front_first"}) cases.push_back({e.name, priority});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Backends, Overlap, ::testing::ValuesIn(overlap_cases()),
                         [](const auto& info) {
                           return info.param.backend + "_" + info.param.priority;
                         });

TEST(Overlap3d, A222RunWithItsTiedEmbeddingEqualsTheNonOverlappedRun) {
  ops::set_blas_threads(1);
  for (const char* priority : {"fifo", "front_first"}) {
    const testing::Grid3d g{2, 2, 2, "1f1b", 1, true};
    expect_equal_to_plain(8, testing::gpt_3d_config(g, {"train.steps=20"}),
                          testing::gpt_3d_config(g, {"train.steps=20", "sync.overlap=true",
                                                     std::string("sync.priority=") + priority,
                                                     "sync.bucket_bytes=16K",
                                                     "sync.priority_chunk_bytes=2K"}));
  }
}

// The parameter server in-process: a shard co-located in each of the 4
// ranks, chunks of 1 KiB so that a bucket's chunks go out while the backward
// computes the next bucket, and ranges that cut chunks (priority chunks of 1 KiB
// against buckets of 4 KiB and shards that do not start on a chunk boundary).
TEST(OverlapPs, CoLocatedShardsEqualTheNonOverlappedRunForBothPriorities) {
  ops::set_blas_threads(1);
  const std::vector<std::string> ps = {"sync.backend=ps", "ps.colocated=true", "ps.servers=3",
                                       "ps.chunk_bytes=1K", "ps.timeout=20s"};
  for (const char* priority : {"fifo", "front_first"}) {
    auto sets = ps;
    for (const auto& s : overlap_sets({"ps", priority}, "4K")) sets.push_back(s);
    expect_equal_to_plain(4, testing::overlap_mlp_config(ps), testing::overlap_mlp_config(sets));
  }
}

TEST(OverlapPs, ShardChunksAndABucketPerTensorEqualTheNonOverlappedRun) {
  ops::set_blas_threads(1);
  const std::vector<std::string> ps = {"sync.backend=ps", "ps.colocated=true", "ps.servers=2",
                                       "ps.shard_chunks=4", "ps.timeout=20s"};
  auto sets = ps;
  for (const auto& s : overlap_sets({"ps", "fifo"}, "1K")) sets.push_back(s);
  expect_equal_to_plain(2, testing::overlap_mlp_config(ps), testing::overlap_mlp_config(sets));
}

}  // namespace
}  // namespace psar
