// Overlapping the gradient sync with the backward under mpirun -np 4, with
// MPI_THREAD_MULTIPLE (the communication thread calls MPI beside the main
// thread): ring, Open MPI's own allreduce and the parameter server (one
// dedicated server rank, three workers, over TCP), both priorities — the
// parameters after 20 steps equal the non-overlapped run within 1e-6
// relative and are bitwise identical on every rank that trains; and --sync
// auto (a tuning table's choice per bucket) trains like mpi.

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>

#include "comm/mpi_comm.h"
#include "tests/common/mpi_world.h"
#include "tests/trainer/train_fixture.h"
#include "trainer/schema.h"
#include "trainer/trainer.h"

namespace psar {
namespace {

MpiComm& world() { return testing::mpi_world(); }

struct Case {
  std::string backend, priority;
};

class MpiOverlap : public ::testing::TestWithParam<Case> {};

TEST_P(MpiOverlap, EqualsTheNonOverlappedRunBitwiseOnEveryRank) {
  const Case c = GetParam();
  // The parameter server: one dedicated server (rank 0), chunks of 1 KiB.
  const std::vector<std::string> ps = {"ps.servers=1", "ps.chunk_bytes=1K", "ps.timeout=20s"};
  auto sets = [&](std::vector<std::string> more) {
    more.push_back("sync.backend=" + c.backend);
    if (c.backend == "ps") more.insert(more.end(), ps.begin(), ps.end());
    return testing::overlap_mlp_config(more);
  };
  const TrainResult plain = train(world(), sets({}));
  const TrainResult overlapped =
      train(world(), sets({"sync.overlap=true", "sync.priority=" + c.priority,
                           "sync.bucket_bytes=4K", "sync.priority_chunk_bytes=1K"}));
  ASSERT_EQ(plain.server, overlapped.server);
  if (!overlapped.server)
    EXPECT_LE(testing::relative_difference(plain.params, overlapped.params), 1e-6);
  // Every rank that trains holds the same bytes (a server rank sends none).
  const auto all = world().allgather_bytes(std::as_bytes(
      std::span<const float>(overlapped.server ? std::vector<float>{} : overlapped.params)));
  std::vector<size_t> trained;
  for (size_t r = 0; r < all.size(); ++r)
    if (!all[r].empty()) trained.push_back(r);
  ASSERT_GE(trained.size(), 3u);
  for (const size_t r : trained)
    EXPECT_EQ(std::memcmp(all[r].data(), all[trained[0]].data(), all[trained[0]].size()), 0)
        << "rank " << r;
}

INSTANTIATE_TEST_SUITE_P(Backends, MpiOverlap,
                         ::testing::Values(Case{"ring", "fifo"}, Case{"ring", "front_first"},
                                           Case{"mpi", "fifo"}, Case{"mpi", "front_first"},
                                           Case{"ps", "fifo"}, Case{"ps", "front_first"}),
                         [](const auto& info) {
                           return info.param.backend + "_" + info.param.priority;
                         });

// --sync auto: a tuning table that makes it pick tree for small buckets and
// mpi for large ones trains like mpi (within 1e-5), overlapped or not.
TEST(MpiAuto, TrainingWithAutoEqualsMpi) {
  const std::string table = ::testing::TempDir() + "/psar_auto_tuning.csv";
  if (world().rank() == 0) {
    std::ofstream out(table);
    out << "ranks,algo,bytes,time_us\n";
    for (long n : {1024L, 4096L, 65536L, 1048576L}) {
      out << world().size() << ",tree," << n << "," << 1.0 + 4e-3 * static_cast<double>(n) << "\n";
      out << world().size() << ",mpi," << n << "," << 10.0 + 1e-3 * static_cast<double>(n) << "\n";
    }
  }
  world().barrier();
  const TrainResult mpi = train(world(), testing::overlap_mlp_config({"sync.backend=mpi"}));
  for (const char* overlap : {"false", "true"}) {
    const TrainResult autotuned =
        train(world(), testing::overlap_mlp_config({"sync.backend=auto", "sync.tuning=" + table,
                            std::string("sync.overlap=") + overlap, "sync.bucket_bytes=4K"}));
    EXPECT_LE(testing::relative_difference(mpi.params, autotuned.params), 1e-5) << overlap;
  }
}

}  // namespace
}  // namespace psar
