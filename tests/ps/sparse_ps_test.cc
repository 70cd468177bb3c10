// The sparse parameter server (ps/sparse_rows.h, docs/sparse.md): a model
// whose head is 150 rows of 4 floats and whose tail is dense, over 2 shards
// cut mid-row into chunks that cut rows too. Each worker's gradient is zero
// outside the rows it touched. Checked: the parameters after 10 steps equal
// the dense parameter server's and a double-precision reference; the bytes
// on the wire equal the exact count of the touched rows (keys + values) per
// chunk; under ssp and asp the workers' replicas, kept up by the changed rows
// alone, end equal to the servers' parameters; Adam steps only the touched
// rows (lazy), as a double-precision lazy Adam does, and its pulls stay sparse.

#include <barrier>
#include <set>

#include "ps_test_util.h"
#include "ps/shard_state.h"
#include "ps/sparse_rows.h"

namespace psar::ps {
namespace {

using testing::LocalJob;
using testing::grad_value;
using testing::initial_params;
using testing::relative_error;
using testing::run_workers;

constexpr int64_t kRows = 150, kDim = 4, kHead = kRows * kDim, kSize = kHead + 77;
constexpr int kWorkers = 3, kShards = 2, kSteps = 10;
constexpr int64_t kChunk = 100;  // floats: chunks and shards cut rows
const RowSpace kSpace{kHead, kDim};

// The rows worker w touches at step t: about a tenth, row 84 (cut by the
// shard boundary 338) always.
std::vector<int64_t> touched(int w, int64_t t) {
  std::vector<int64_t> rows;
  for (int64_t r = 0; r < kRows; ++r)
    if (r == 84 || Philox::uniform(11, (static_cast<uint64_t>(w) << 32) | t, r) < 0.1f)
      rows.push_back(r);
  return rows;
}

// Worker w's gradient of step t: grad_value on its touched rows and the dense tail, zero elsewhere.
std::vector<float> sparse_grad(int w, int64_t t) {
  std::vector<float> g(kSize, 0.0f);
  for (int64_t r : touched(w, t))
    for (int64_t k = r * kDim; k < (r + 1) * kDim; ++k) g[k] = grad_value(w, t, k);
  for (int64_t k = kHead; k < kSize; ++k) g[k] = grad_value(w, t, k);
  return g;
}

// Every chunk of the job: the shards of plan_shards cut into kChunk floats.
std::vector<KeyRange> all_chunks() {
  std::vector<KeyRange> out;
  for (const KeyRange& shard : plan_shards(kSize, kShards))
    for (int64_t b = shard.begin; b < shard.end; b += kChunk)
      out.push_back({b, std::min(b + kChunk, shard.end)});
  return out;
}

// Payload bytes of one push_pull direction carrying `rows`: per chunk that
// begins among the rows 8 bytes of key plus 4 per float of each row inside
// it, and its floats past the rows whole; the other chunks whole.
int64_t exact_bytes(const std::set<int64_t>& rows) {
  int64_t bytes = 0;
  for (const KeyRange& c : all_chunks()) {
    if (c.begin >= kHead) {
      bytes += c.size() * 4;
      continue;
    }
    if (c.end > kHead) bytes += (c.end - kHead) * 4;
    for (int64_t r : rows) {
      const int64_t overlap = std::min(c.end, (r + 1) * kDim) - std::max(c.begin, r * kDim);
      if (overlap > 0) bytes += 8 + 4 * overlap;
    }
  }
  return bytes;
}

OptimizerOptions plain_sgd() { return testing::sgd(0.05f, 0.0f); }

OptimizerOptions lazy_adam() {
  OptimizerOptions o = testing::adam();
  o.lr = 0.01f;
  return o;
}

ServerOptions options(Consistency consistency, bool sparse, const OptimizerOptions& optimizer) {
  ServerOptions o = testing::server_options();
  o.optimizer = optimizer;
  o.chunk_floats = kChunk;
  o.consistency = consistency;
  o.staleness = 1;
  if (sparse) o.rows = kSpace;
  return o;
}

struct Outcome {
  std::vector<std::vector<float>> replicas;  // by worker
  std::vector<PsCounters> counters;          // by worker
  std::vector<float> served;                 // the shards' parameters at the end
};

// kSteps push_pulls per worker; with `probe`, then a barrier and one more
// push_pull of a zero gradient touching nothing (it changes nothing under
// plain SGD, and brings every row changed since the worker last looked).
Outcome run(Consistency consistency, bool sparse, bool probe,
            const OptimizerOptions& optimizer = plain_sgd()) {
  LocalJob job(initial_params(kSize), kShards, kWorkers, options(consistency, sparse, optimizer));
  Outcome out;
  out.replicas.assign(kWorkers, initial_params(kSize));
  out.counters.resize(kWorkers);
  std::barrier sync(kWorkers);
  run_workers(kWorkers, [&](int w) {
    ClientOptions o = job.client(w);
    if (sparse) o.rows = kSpace;
    Client client(o);
    auto& params = out.replicas[static_cast<size_t>(w)];
    for (int64_t t = 0; t < kSteps; ++t) {
      const auto rows = touched(w, t);
      client.set_touched_rows(rows);
      client.push_pull(sparse_grad(w, t), params);
    }
    sync.arrive_and_wait();
    if (probe) {
      client.set_touched_rows({});
      client.push_pull(std::vector<float>(kSize, 0.0f), params);
    }
    out.counters[static_cast<size_t>(w)] = client.counters();
    client.close();
  });
  job.join();
  out.served = job.params();
  return out;
}

// kSteps SGD steps on the double-precision average of the workers' gradients.
std::vector<float> reference() {
  std::vector<float> p = initial_params(kSize);
  for (int64_t t = 0; t < kSteps; ++t) {
    std::vector<double> sum(kSize, 0.0);
    for (int w = 0; w < kWorkers; ++w) {
      const auto g = sparse_grad(w, t);
      for (int64_t k = 0; k < kSize; ++k) sum[k] += g[k];
    }
    for (int64_t k = 0; k < kSize; ++k)
      p[k] = static_cast<float>(p[k] - 0.05 * static_cast<float>(sum[k] / kWorkers));
  }
  return p;
}

// kSteps lazy Adam steps in double precision: each step moves (and updates
// m and v of) only the floats of the rows some worker touched and the dense
// tail; the bias correction counts every step.
std::vector<float> lazy_adam_reference() {
  const OptimizerOptions o = lazy_adam();
  std::vector<double> p(kSize), m(kSize, 0.0), v(kSize, 0.0);
  const auto start = initial_params(kSize);
  for (int64_t k = 0; k < kSize; ++k) p[k] = start[k];
  for (int64_t t = 0; t < kSteps; ++t) {
    std::vector<double> sum(kSize, 0.0);
    std::vector<char> touched_now(kSize, 0);
    for (int w = 0; w < kWorkers; ++w) {
      const auto g = sparse_grad(w, t);
      for (int64_t k = 0; k < kSize; ++k) sum[k] += g[k];
      for (int64_t r : touched(w, t))
        for (int64_t k = r * kDim; k < (r + 1) * kDim; ++k) touched_now[k] = 1;
    }
    const double c1 = 1.0 - std::pow(static_cast<double>(o.beta1), static_cast<double>(t + 1));
    const double c2 = 1.0 - std::pow(static_cast<double>(o.beta2), static_cast<double>(t + 1));
    for (int64_t k = 0; k < kSize; ++k) {
      if (k < kHead && !touched_now[k]) continue;
      const double g = sum[k] / kWorkers;
      m[k] = o.beta1 * m[k] + (1.0 - o.beta1) * g;
      v[k] = o.beta2 * v[k] + (1.0 - o.beta2) * g * g;
      p[k] -= o.lr * ((m[k] / c1) / (std::sqrt(v[k] / c2) + o.eps));
    }
  }
  return std::vector<float>(p.begin(), p.end());
}

TEST(SparsePs, AdamStepsOnlyTheTouchedRowsAsALazyReferenceDoes) {
  const Outcome sparse = run(Consistency::kBsp, true, false, lazy_adam());
  const auto ref = lazy_adam_reference();
  EXPECT_LE(relative_error(sparse.served, ref), 1e-6);
  // Untouched rows never move, so the replicas, kept up by the touched rows
  // alone, are the servers' parameters, and the pulls carry the union of
  // the touched rows exactly, as under plain SGD.
  for (int w = 0; w < kWorkers; ++w) EXPECT_EQ(sparse.replicas[w], sparse.served) << w;
  int64_t pulled = 0;
  for (int64_t t = 0; t < kSteps; ++t) {
    std::set<int64_t> any;
    for (int w = 0; w < kWorkers; ++w)
      for (int64_t r : touched(w, t)) any.insert(r);
    pulled += exact_bytes(any);
  }
  EXPECT_EQ(sparse.counters[0].payload_bytes_in, pulled);
  // The check can fail: the dense server's Adam keeps moving rows touched
  // once (their m stays non-zero), away from the lazy reference.
  const Outcome dense = run(Consistency::kBsp, false, false, lazy_adam());
  EXPECT_GT(relative_error(dense.served, ref), 1e-4);
}

TEST(SparsePs, BspEqualsTheDensePsAndTheReference) {
  const Outcome sparse = run(Consistency::kBsp, true, false);
  const Outcome dense = run(Consistency::kBsp, false, false);
  const auto ref = reference();
  for (int w = 0; w < kWorkers; ++w) {
    EXPECT_LE(relative_error(sparse.replicas[w], dense.replicas[w]), 1e-6) << "worker " << w;
    EXPECT_LE(relative_error(sparse.replicas[w], ref), 1e-6) << "worker " << w;
  }
  EXPECT_LE(relative_error(sparse.served, ref), 1e-6);
  // The check can fail: untouched rows kept their start, touched ones moved.
  EXPECT_GT(relative_error(ref, initial_params(kSize)), 1e-3);
}

TEST(SparsePs, BytesOnTheWireAreTheTouchedRowsExactly) {
  const Outcome sparse = run(Consistency::kBsp, true, false);
  int64_t pulled = 0;
  for (int64_t t = 0; t < kSteps; ++t) {
    std::set<int64_t> any;  // every row some worker touched: the rows step t changed
    for (int w = 0; w < kWorkers; ++w)
      for (int64_t r : touched(w, t)) any.insert(r);
    pulled += exact_bytes(any);
  }
  for (int w = 0; w < kWorkers; ++w) {
    int64_t pushed = 0;
    for (int64_t t = 0; t < kSteps; ++t) {
      const auto rows = touched(w, t);
      pushed += exact_bytes(std::set<int64_t>(rows.begin(), rows.end()));
    }
    EXPECT_EQ(sparse.counters[w].payload_bytes_out, pushed) << "worker " << w;
    EXPECT_EQ(sparse.counters[w].payload_bytes_in, pulled) << "worker " << w;
  }
  // Against the dense server: every float both ways, every step.
  const Outcome dense = run(Consistency::kBsp, false, false);
  EXPECT_EQ(dense.counters[0].payload_bytes_out, kSteps * kSize * 4);
  EXPECT_LT(sparse.counters[0].payload_bytes_out, dense.counters[0].payload_bytes_out / 2);
}

// A 10^7-row table (1 float per row) and a dense tail of 5 floats, Adam,
// 2 workers: the shard's optimizer state and row index follow the rows
// touched so far, exactly — 2 buffers (m, v) of 4 bytes per touched float
// and the tail's, plus 24 bytes of index (row, state offset, version) per
// touched row — and their buffers stay within twice that, where the dense
// state would take 80 MB. A shard restored from saved() goes on with the
// same bits as the one that saved it.
TEST(SparsePs, ServerStateIsAllocatedForTheTouchedRowsOnly) {
  constexpr int64_t kBig = 10'000'000, kTail = 5;
  const RowSpace space{kBig, 1};
  const ShardStateOptions o{{0, kBig + kTail}, 2, Consistency::kBsp, 0, lazy_adam()};
  const std::vector<float> start(kBig + kTail, 0.5f);
  ShardState state(o, start, space);
  const auto exact = [&](int64_t rows) { return 2 * 4 * (kTail + rows) + 24 * rows; };
  EXPECT_EQ(state.state_bytes().held, exact(0));
  std::set<int64_t> ever;
  struct Push {  // its rows and floats, alive while the shard holds it
    std::vector<int64_t> rows;
    std::vector<float> grad;
  };
  const auto push_clock = [&](ShardState& s, int64_t t) {
    for (int w = 0; w < 2; ++w) {
      auto p = std::make_shared<Push>();
      for (int64_t k = 0; k < 1000; ++k)  // spread over the table, a third shared by both workers
        p->rows.push_back(k * 9973 + (k % 3 == 0 ? 0 : w * 17 + t * 31));
      std::sort(p->rows.begin(), p->rows.end());
      p->rows.erase(std::unique(p->rows.begin(), p->rows.end()), p->rows.end());
      ever.insert(p->rows.begin(), p->rows.end());
      p->grad.resize(p->rows.size() + kTail);
      for (size_t i = 0; i < p->grad.size(); ++i) p->grad[i] = grad_value(w, t, static_cast<int64_t>(i));
      s.push_rows(w, t, p->rows, Gradient{p->grad, p});
    }
  };
  for (int64_t t = 0; t < 3; ++t) {
    push_clock(state, t);
    ASSERT_EQ(state.applied(), t + 1);
    const ShardState::StateBytes b = state.state_bytes();
    EXPECT_EQ(b.held, exact(static_cast<int64_t>(ever.size()))) << "clock " << t;
    EXPECT_LE(b.allocated, 2 * b.held + 64) << "clock " << t;
  }
  EXPECT_LT(state.state_bytes().allocated, 2 * 4 * kBig / 100);  // under 1 % of the dense state
  // Saved and restored into a fresh shard: the same state, and one more
  // clock gives both the same parameters and versions.
  const ShardState::Saved saved = state.saved();
  EXPECT_EQ(saved.rows, std::vector<int64_t>(ever.begin(), ever.end()));
  ShardState resumed(o, state.params().view(), space);
  std::vector<std::span<const float>> buffers(saved.optimizer_state.begin(),
                                              saved.optimizer_state.end());
  resumed.restore(3, state.params().view(), saved.optimizer_steps, buffers, saved.rows,
                  saved.versions);
  EXPECT_EQ(resumed.state_bytes().held, state.state_bytes().held);
  push_clock(state, 3);
  push_clock(resumed, 3);
  EXPECT_TRUE(std::equal(state.params().view().begin(), state.params().view().end(),
                         resumed.params().view().begin()));
  EXPECT_EQ(resumed.saved().optimizer_state, state.saved().optimizer_state);
  EXPECT_EQ(resumed.saved().versions, state.saved().versions);
  EXPECT_EQ(state.version(*ever.begin()), 4);
  EXPECT_EQ(state.version(1), 0);  // never touched
}

class SparseConsistency : public ::testing::TestWithParam<Consistency> {};

TEST_P(SparseConsistency, ReplicasFollowTheServersByChangedRowsAlone) {
  const Outcome sparse = run(GetParam(), true, true);
  for (int w = 0; w < kWorkers; ++w)
    EXPECT_EQ(sparse.replicas[w], sparse.served) << "worker " << w;
  EXPECT_GT(relative_error(sparse.served, initial_params(kSize)), 1e-3);
}

INSTANTIATE_TEST_SUITE_P(Models, SparseConsistency,
                         ::testing::Values(Consistency::kBsp, Consistency::kSsp, Consistency::kAsp),
                         [](const auto& info) { return std::string(to_string(info.param)); });

TEST(SparsePs, ABadFrameIsRejectedBeforeTheStateIsTouched) {
  // Keys out of order, a row outside the chunk, a length that disagrees.
  const KeyRange chunk{0, kChunk};
  std::vector<char> frame(2 * 8 + 8 * 4);
  const int64_t keys[2] = {3, 2};
  std::memcpy(frame.data(), keys, sizeof keys);
  EXPECT_NE(check_rows(kSpace, chunk, frame.data(), frame.size(), 2, 8), "");
  const int64_t outside[2] = {2, 25};
  std::memcpy(frame.data(), outside, sizeof outside);
  EXPECT_NE(check_rows(kSpace, chunk, frame.data(), frame.size(), 2, 8), "");
  const int64_t good[2] = {2, 3};
  std::memcpy(frame.data(), good, sizeof good);
  EXPECT_EQ(check_rows(kSpace, chunk, frame.data(), frame.size(), 2, 8), "");
  EXPECT_NE(check_rows(kSpace, chunk, frame.data(), frame.size(), 2, 7), "");
  EXPECT_NE(check_rows(kSpace, {kHead, kHead + 10}, frame.data(), frame.size(), 2, 8), "");
  // A chunk reaching past the rows carries its tail too: 2 rows + 10 floats.
  std::vector<char> mixed(2 * 8 + 18 * 4);
  const int64_t last[2] = {kRows - 2, kRows - 1};
  std::memcpy(mixed.data(), last, sizeof last);
  const KeyRange across{kHead - 8, kHead + 10};
  EXPECT_EQ(check_rows(kSpace, across, mixed.data(), mixed.size(), 2, 18), "");
  EXPECT_NE(check_rows(kSpace, across, mixed.data(), mixed.size() - 40, 2, 8), "");
}

}  // namespace
}  // namespace psar::ps
