// Shard plans: balanced plans tile [0, M) with sizes within one float of each
// other; aligned plans put every boundary on a tensor boundary.

#include <gtest/gtest.h>

#include <set>

#include "core/errors.h"
#include "ps/sharding.h"

namespace psar::ps {
namespace {

struct PlanCase {
  int64_t size;
  int shards;
};

class BalancedPlan : public ::testing::TestWithParam<PlanCase> {};

TEST_P(BalancedPlan, TilesTheVectorWithSizesWithinOneFloat) {
  const auto [size, shards] = GetParam();
  const auto plan = plan_shards(size, shards);
  ASSERT_EQ(plan.size(), static_cast<size_t>(shards));
  int64_t next = 0, smallest = size, largest = 0;
  for (const auto& r : plan) {
    EXPECT_EQ(r.begin, next);
    EXPECT_LE(r.begin, r.end);
    next = r.end;
    smallest = std::min(smallest, r.size());
    largest = std::max(largest, r.size());
  }
  EXPECT_EQ(next, size);
  EXPECT_LE(largest - smallest, 1);
}

INSTANTIATE_TEST_SUITE_P(Sizes, BalancedPlan,
                         ::testing::Values(PlanCase{0, 1}, PlanCase{0, 3}, PlanCase{1, 1},
                                           PlanCase{1, 4}, PlanCase{5, 2}, PlanCase{7, 7},
                                           PlanCase{1000, 3}, PlanCase{1001, 4},
                                           PlanCase{4194304, 4}));

std::vector<ParamInfo> tensors(const std::vector<int64_t>& sizes) {
  std::vector<ParamInfo> infos;
  int64_t offset = 0;
  for (int64_t n : sizes) {
    ParamInfo info;
    info.offset = offset;
    info.numel = n;
    infos.push_back(info);
    offset += n;
  }
  return infos;
}

TEST(AlignedPlan, PutsEveryBoundaryOnATensorBoundaryNearestTheBalancedOne) {
  // Tensors [0,100) [100,110) [110,400) [400,1000); balanced boundaries of 3
  // shards are 333 and 666: the nearest tensor boundaries are 400 and 400.
  const auto infos = tensors({100, 10, 290, 600});
  const auto plan = plan_shards(1000, 3, infos);
  ASSERT_EQ(plan.size(), 3u);
  EXPECT_EQ(plan[0], (KeyRange{0, 400}));
  EXPECT_EQ(plan[1], (KeyRange{400, 400}));  // empty: no boundary between 400 and 1000
  EXPECT_EQ(plan[2], (KeyRange{400, 1000}));
  // Two shards: the balanced boundary 500 is 100 from 400 and 500 from 1000.
  const auto two = plan_shards(1000, 2, infos);
  EXPECT_EQ(two[0], (KeyRange{0, 400}));
  EXPECT_EQ(two[1], (KeyRange{400, 1000}));
}

TEST(AlignedPlan, SplitsNoTensorForAnyShardCount) {
  const auto infos = tensors({37, 1, 512, 3, 3, 200, 64, 1});
  std::set<int64_t> starts;
  for (const auto& info : infos) starts.insert(info.offset);
  starts.insert(821);
  for (int shards = 1; shards <= 12; ++shards) {
    const auto plan = plan_shards(821, shards, infos);
    int64_t next = 0;
    for (const auto& r : plan) {
      EXPECT_EQ(r.begin, next);
      EXPECT_TRUE(starts.count(r.begin)) << "shard starts inside a tensor at " << r.begin;
      next = r.end;
    }
    EXPECT_EQ(next, 821);
  }
}

TEST(Plan, RejectsZeroShards) { EXPECT_THROW(plan_shards(10, 0), ConfigError); }

TEST(ChunkSize, ASmallerShardStreamsInShardChunksPiecesButNoneBelowTheFloor) {
  constexpr int64_t kMiB = (1 << 20) / 4;  // floats
  constexpr int64_t kFloor = kMinChunkBytes / 4;
  EXPECT_EQ(chunk_floats_for(1 << 20, 64 * kMiB, 4), kMiB);        // large: ps.chunk_bytes
  EXPECT_EQ(chunk_floats_for(1 << 20, kMiB, 4), kMiB / 4);         // 1 MiB: four of 256 KiB
  EXPECT_EQ(chunk_floats_for(1 << 20, kMiB + 1, 4), kMiB / 4 + 1); // rounds up, still four
  EXPECT_EQ(chunk_floats_for(1 << 20, kMiB / 16, 4), kFloor);      // 64 KiB: one chunk
  EXPECT_EQ(chunk_floats_for(1 << 20, 0, 4), kFloor);
  EXPECT_EQ(chunk_floats_for(1 << 20, kMiB, 1), kMiB);             // 1: off
  EXPECT_EQ(chunk_floats_for(1024, kMiB, 4), 256);                 // never above ps.chunk_bytes
  EXPECT_THROW(chunk_floats_for(1 << 20, kMiB, -1), ConfigError);
}

// The automatic count for one worker minimises t(k) = c·B/k + k·o, i.e.
// x/k + k with x = B / B0 (docs/theory.md, "PS chunking"): checked against
// a search over every k in double precision. More workers: one chunk.
TEST(ChunkSize, AutomaticCountMinimisesTheCostModel) {
  for (int64_t bytes = 0; bytes <= (int64_t{256} << 20);
       bytes += bytes < (1 << 20) ? 4096 : 262144) {
    const double c_per_byte = 1.0, o = static_cast<double>(kMinChunkBytes);
    auto t = [&](int64_t k) { return c_per_byte * bytes / k + k * o; };
    int64_t best = 1;
    for (int64_t k = 2; k <= 1000; ++k)
      if (t(k) < t(best) * (1 - 1e-12)) best = k;
    EXPECT_EQ(auto_shard_chunks(bytes / 4), best) << bytes << " bytes";
    for (const int workers : {2, 4, 16}) EXPECT_EQ(auto_shard_chunks(bytes / 4, workers), 1);
  }
  EXPECT_THROW(auto_shard_chunks(1024, 0), Error);
}

TEST(ChunkSize, AutomaticPlanOfAShard) {
  constexpr int64_t kMiB = (1 << 20) / 4;  // floats
  constexpr int64_t kAuto = kAutoShardChunks;
  EXPECT_EQ(chunk_floats_for(1 << 20, kMiB / 16, kAuto), kMinChunkBytes / 4);  // 64 KiB: one
  EXPECT_EQ(chunk_floats_for(1 << 20, kMiB / 8, kAuto), kMiB / 8);    // 128 KiB: one (a tie)
  EXPECT_EQ(chunk_floats_for(1 << 20, kMiB / 4, kAuto), kMiB / 8);    // 256 KiB: two
  EXPECT_EQ(chunk_floats_for(1 << 20, kMiB / 2, kAuto), (kMiB / 2 + 2) / 3);  // 512 KiB: three
  EXPECT_EQ(chunk_floats_for(1 << 20, kMiB, kAuto), kMiB / 4);        // 1 MiB: four
  EXPECT_EQ(chunk_floats_for(1 << 20, 4 * kMiB, kAuto), kMiB / 2);    // 4 MiB: eight
  EXPECT_EQ(chunk_floats_for(1 << 20, 16 * kMiB, kAuto), kMiB);       // 16 MiB: sixteen
  EXPECT_EQ(chunk_floats_for(1 << 20, 64 * kMiB, kAuto), kMiB);       // capped at ps.chunk_bytes
  EXPECT_EQ(chunk_floats_for(256 << 10, kMiB, kAuto), kMiB / 4);      // smaller ps.chunk_bytes wins
  // Every chunk but the last is full, and the count is the automatic one.
  for (const int64_t floats : {kMiB / 4, 3 * kMiB / 4 + 5, kMiB, 6 * kMiB + 1}) {
    const ShardLayout layout{0, {0, floats}, chunk_floats_for(1 << 20, floats, kAuto)};
    EXPECT_EQ(layout.chunks(), auto_shard_chunks(floats)) << floats << " floats";
  }
  // A job's plan follows its largest shard: 4 MiB over 4 servers, 1 MiB each.
  const std::vector<KeyRange> plan = plan_shards(4 * kMiB, 4);
  EXPECT_EQ(plan_chunk_floats(1 << 20, kAuto, plan), kMiB / 4);
  // More workers: one message per shard below ps.chunk_bytes, then ps.chunk_bytes.
  EXPECT_EQ(plan_chunk_floats(1 << 20, kAuto, plan, 4), kMiB);
  EXPECT_EQ(chunk_floats_for(1 << 20, kMiB / 4, kAuto, 2), kMiB / 4);
  EXPECT_EQ(chunk_floats_for(1 << 20, 4 * kMiB, kAuto, 4), kMiB);     // 4 MiB: four of 1 MiB
  EXPECT_EQ(chunk_floats_for(1 << 20, kMiB, 4, 4), kMiB / 4);  // an explicit K ignores N
}

TEST(ChunkSize, OneSizeForTheJobFromItsLargestShard) {
  const std::vector<KeyRange> plan{{0, 1000}, {1000, 300000}, {300000, 300001}};
  EXPECT_EQ(plan_chunk_floats(1 << 20, 4, plan), 299000 / 4);
}

}  // namespace
}  // namespace psar::ps
