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

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <mutex>
#include <regex>
#include <sstream>
#include <unistd.h>

#include "allreduce/allreducer.h"
#include "comm/inproc_comm.h"
#include "core/errors.h"
#include "core/ops.h"
#include "tests/trainer/cnn_fixture.h"
#include "tests/trainer/three_d_fixture.h"
#include "tests/trainer/train_fixture.h"
#include "sync/buckets.h"
#include "trainer/trainer.h"
#include "workloads/model.h"

namespace psar {
namespace {

using ::testing::ElementsAre;
using testing::relative_difference;
using testing::train_result;

// ---- the gradient sink's promise ------------------------------------------------

// The parameter server pulls a layer's new parameters into the arena as soon
// as every worker pushed its gradient (docs/overlap.md), possibly while this
// rank's backward goes on: so once a backward reports a layer's gradients
// final, it must read that layer's parameters no more. A sink that
// overwrites each reported range's parameters with NaN at once — a pull
// landing at the worst moment, every time — leaves every gradient bitwise
// that of the backward without a sink, fused and split, for every model.
class ClobberingSink final : public pp::GradientSink {
 public:
  explicit ClobberingSink(ParamStore& store) : store_(store) {}
  void ready(int, int64_t begin, int64_t end) override {
    const auto p = store_.params().subspan(static_cast<size_t>(begin),
                                           static_cast<size_t>(end - begin));
    std::fill(p.begin(), p.end(), std::numeric_limits<float>::quiet_NaN());
    reported += end - begin;
  }
  int64_t reported = 0;

 private:
  ParamStore& store_;
};

struct SinkCase {
  std::string name;
  Config config;
};
void PrintTo(const SinkCase& c, std::ostream* os) { *os << c.name; }

class GradientSinkPromise : public ::testing::TestWithParam<SinkCase> {};

TEST_P(GradientSinkPromise, NoParameterIsReadAfterItsGradientIsReportedFinal) {
  const Config& cfg = GetParam().config;
  const DatasetPair data = load_dataset(workload_options(cfg));
  const int64_t rows = 4;
  Batch batch;
  const std::vector<int64_t> indices = {0, 1, 2, 3};
  data.train->gather(indices, batch);
  const ModelContext context{nullptr, StageLayout::serial(model_layers(workload_options(cfg), *data.train), rows)};
  auto gradients = [&](bool clobber, bool split) {
    auto model = make_model(workload_options(cfg), *data.train, context);
    ParamStore store;
    build_params(*model, store, 1, 7);
    ClobberingSink sink(store);
    if (clobber) model->set_gradient_sink(&sink);
    model->set_batch(batch);
    const auto stash = model->make_activations(0);
    model->forward(0, 0, *stash, {}, {});
    if (split) {
      model->backward_input(0, 0, *stash, {}, {});
      model->backward_weight(0, 0, *stash);
    } else {
      model->backward(0, 0, *stash, {}, {});
    }
    if (clobber) {
      EXPECT_EQ(sink.reported, store.size()) << "every gradient reported once";
    }
    const auto g = store.grads();
    return std::vector<float>(g.begin(), g.end());
  };
  for (const bool split : {false, true}) {
    const std::vector<float> want = gradients(false, split), got = gradients(true, split);
    ASSERT_EQ(got.size(), want.size());
    size_t differ = 0;
    for (size_t i = 0; i < got.size(); ++i)
      differ += std::memcmp(&got[i], &want[i], sizeof(float)) != 0;
    EXPECT_EQ(differ, 0u) << (split ? "split" : "fused") << " backward: " << differ << " of "
                          << got.size() << " gradients read a parameter reported final";
  }
}

INSTANTIATE_TEST_SUITE_P(
    Models, GradientSinkPromise,
    ::testing::Values(SinkCase{"mlp", testing::overlap_mlp_config()},
                      SinkCase{"gpt", testing::gpt_3d_config({})},
                      SinkCase{"cnn", testing::cnn_config(false)}),
    [](const auto& info) { return info.param.name; });

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
  // whole_tensors (ZeRO stage 2's layers): big a bucket of its own, uncut
  EXPECT_THAT(plan_buckets(backward_order({2, 10, 1}), 4, /*whole_tensors=*/true),
              ElementsAre(ArenaRange{12, 13}, ArenaRange{2, 12}, ArenaRange{0, 2}));
  EXPECT_THAT(plan_buckets(backward_order({1, 2, 10, 1}), 4, true),
              ElementsAre(ArenaRange{13, 14}, ArenaRange{3, 13}, ArenaRange{0, 3}));
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
  return train_result(ranks, cfg).params;
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
// Under BSP the servers apply the same sums whenever the chunks arrive, so the
// overlapped run — with front_first, the layer-wise start of each forward —
// is bitwise identical to the plain one; so is a test evaluation between steps.
TEST(OverlapPs, CoLocatedShardsEqualTheNonOverlappedRunForBothPriorities) {
  ops::set_blas_threads(1);
  const std::vector<std::string> ps = {"sync.backend=ps", "ps.colocated=true", "ps.servers=3",
                                       "ps.chunk_bytes=1K", "ps.timeout=20s",
                                       "train.eval_every=7"};
  const TrainResult want = train_result(4, testing::overlap_mlp_config(ps));
  for (const char* priority : {"fifo", "front_first"}) {
    auto sets = ps;
    for (const auto& s : overlap_sets({"ps", priority}, "4K")) sets.push_back(s);
    const TrainResult got = train_result(4, testing::overlap_mlp_config(sets));
    EXPECT_EQ(got.params, want.params) << priority;
    EXPECT_EQ(got.test_loss, want.test_loss) << priority;
    EXPECT_GE(got.test_loss, 0) << "evaluated";
  }
}

// The layer-wise start on the GPT: the embedding, each block and the head
// each wait for their own parameters.
TEST(OverlapPs, GptLayerWiseStartIsBitwiseTheNonOverlappedRun) {
  ops::set_blas_threads(1);
  const testing::Grid3d dp{1, 1, 2};
  const std::vector<std::string> ps = {"sync.backend=ps", "ps.colocated=true", "ps.servers=2",
                                       "ps.chunk_bytes=4K", "ps.timeout=20s", "train.steps=8"};
  auto sets = ps;
  for (const auto& s : overlap_sets({"ps", "front_first"}, "16K")) sets.push_back(s);
  EXPECT_EQ(train_ranks(2, testing::gpt_3d_config(dp, sets)),
            train_ranks(2, testing::gpt_3d_config(dp, ps)));
}

TEST(OverlapPs, ShardChunksAndABucketPerTensorEqualTheNonOverlappedRun) {
  ops::set_blas_threads(1);
  const std::vector<std::string> ps = {"sync.backend=ps", "ps.colocated=true", "ps.servers=2",
                                       "ps.shard_chunks=4", "ps.timeout=20s"};
  auto sets = ps;
  for (const auto& s : overlap_sets({"ps", "fifo"}, "1K")) sets.push_back(s);
  expect_equal_to_plain(2, testing::overlap_mlp_config(ps), testing::overlap_mlp_config(sets));
}

// ---- the layer-wise start, in the trace -----------------------------------------

struct TraceSpan {
  std::string name;
  int tid = 0;
  double start = 0, end = 0;  // µs
  int64_t begin = -1;         // args.begin: the first arena float
};

// Rank 0's complete events of a trace.json written by the trainer (one event a line).
std::vector<TraceSpan> rank0_spans(const std::filesystem::path& file) {
  std::ifstream in(file);
  const std::regex event(R"re("name":"([^"]+)","cat":"[^"]+","pid":0,"tid":(\d+),"ts":([-0-9.]+),"dur":([0-9.]+)(.*))re");
  const std::regex begin(R"re("begin":(\d+))re");
  std::vector<TraceSpan> out;
  std::smatch m, b;
  for (std::string line; std::getline(in, line);) {
    if (!std::regex_search(line, m, event)) continue;
    TraceSpan t{m[1], std::stoi(m[2]), std::stod(m[3]), std::stod(m[3]) + std::stod(m[4])};
    const std::string rest = m[5];
    if (std::regex_search(rest, b, begin)) t.begin = std::stoll(b[1]);
    out.push_back(t);
  }
  return out;
}

// A last layer much larger than the first, on an emulated network slow
// enough that its chunks are still on the wire when the backward has reached
// layer 0: front_first sends layer 0's chunk between them, and the next
// forward of layer 0 starts once that chunk is back, while the last layer's
// parameters are still coming.
TEST(OverlapPs, TraceShowsTheFrontLayerPulledFirstAndTheNextForwardStartingBeforeTheLast) {
  ops::set_blas_threads(1);
  const auto dir = std::filesystem::temp_directory_path() /
                   ("psar_overlap_trace_" + std::to_string(::getpid()));
  const Config cfg = testing::overlap_mlp_config(
      {"model.hidden=[8, 256]", "data.synthetic_classes=200", "train.steps=4",
       "train.trace=true", "sync.backend=ps", "ps.colocated=true", "ps.servers=2",
       "ps.chunk_bytes=16K", "ps.timeout=20s", "sync.overlap=true", "sync.priority=front_first",
       "sync.bucket_bytes=64K", "sync.priority_chunk_bytes=16K", "net.bandwidth=20Mbit",
       "net.latency=50us"});
  train_result(2, cfg, dir.string());
  const std::vector<TraceSpan> spans = rank0_spans(dir / "trace.json");
  std::filesystem::remove_all(dir);

  // The pulls of one step: one span per unit on track 2, the steps one after another.
  std::vector<TraceSpan> pulls, waits;
  for (const TraceSpan& t : spans) {
    if (t.name == "pull" && t.tid == 2) pulls.push_back(t);
    if (t.name == "params" && t.tid == 0) waits.push_back(t);
  }
  std::sort(pulls.begin(), pulls.end(), [](auto& a, auto& b) { return a.start < b.start; });
  std::sort(waits.begin(), waits.end(), [](auto& a, auto& b) { return a.start < b.start; });
  ASSERT_FALSE(pulls.empty());
  ASSERT_EQ(pulls.size() % 4, 0u) << "4 steps, the same units in each";
  const size_t units = pulls.size() / 4;
  ASSERT_GE(units, 4u);
  for (size_t step = 0; step < 3; ++step) {  // the last step has no next forward
    const auto first = pulls.begin() + static_cast<std::ptrdiff_t>(step * units);
    const auto front = std::min_element(first, first + static_cast<std::ptrdiff_t>(units),
                                        [](auto& a, auto& b) { return a.begin < b.begin; });
    const auto back = std::max_element(first, first + static_cast<std::ptrdiff_t>(units),
                                       [](auto& a, auto& b) { return a.begin < b.begin; });
    ASSERT_EQ(front->begin, 0) << "layer 0's weights start the arena";
    EXPECT_LT(front->end, back->end) << "step " << step + 1
                                     << ": layer 0's pull completes before the last layer's";
    // The next forward's layer 0: its wait for floats from 0 that ends after this step's pushes.
    const auto next = std::find_if(waits.begin(), waits.end(), [&](const TraceSpan& w) {
      return w.begin == 0 && w.end > first->start;
    });
    ASSERT_NE(next, waits.end()) << "step " << step + 2 << ": no forward of layer 0 in the trace";
    EXPECT_GE(next->end, front->end) << "layer 0's forward waited for its parameters";
    EXPECT_LT(next->end, back->end)
        << "step " << step + 2 << ": layer 0's forward started before the last layer's pull ended";
  }
}

}  // namespace
}  // namespace psar
