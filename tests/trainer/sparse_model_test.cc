// The sparse workload (docs/sparse.md): the Zipf generator against its
// closed form, the DLRM model's gradients (zero outside the touched rows,
// the rest against central differences in double), and `psar train` on it
// under every way to sync it — dense allreduce, the dense and the sparse
// parameter server, hybrid — ending at the same parameters after 10 steps.
// Bad sparse configurations are ConfigErrors naming their keys.

#include <map>
#include <mutex>
#include <set>

#include <gmock/gmock.h>

#include "allreduce/allreducer.h"
#include "comm/inproc_comm.h"
#include "sync/allreduce_sync.h"
#include "core/ops.h"
#include "core/rng.h"
#include "train_fixture.h"
#include "workloads/dlrm.h"
#include "workloads/sparse_data.h"

namespace psar {
namespace {

using testing::relative_difference;

TEST(Zipf, FrequenciesFollowTheClosedForm) {
  for (const double s : {0.0, 0.8, 1.0, 1.3}) {
    const int64_t n = 40;
    ZipfSampler z(n, s);
    std::vector<int64_t> count(n + 1, 0);
    const int64_t draws = 200000;
    for (int64_t i = 0; i < draws; ++i)
      ++count[z.sample([&](int a) {
        return static_cast<double>(Philox::block(5, 9, static_cast<uint64_t>(i) * 64 + a)[0]) *
               0x1.0p-32;
      })];
    for (int64_t k = 1; k <= n; ++k) {
      const double p = z.probability(k);
      const double sd = std::sqrt(p * (1 - p) / draws);
      EXPECT_NEAR(static_cast<double>(count[k]) / draws, p, 5 * sd + 1e-4)
          << "s " << s << " rank " << k;
    }
  }
}

TEST(Zipf, IdsStayInTheirTablesAndAreSeeded) {
  const auto a = make_zipf_data(500, 3, 4, {10000000, 7}, 1.05, 1);
  const auto b = make_zipf_data(500, 3, 4, {10000000, 7}, 1.05, 1);
  Batch x, y;
  std::vector<int64_t> idx(500);
  for (int64_t i = 0; i < 500; ++i) idx[i] = i;
  a.train->gather(idx, x);
  b.train->gather(idx, y);
  EXPECT_EQ(x.tokens, y.tokens);
  std::map<int32_t, int> hot;
  for (int64_t i = 0; i < 500; ++i) {
    EXPECT_GE(x.tokens[i * 2], 0);
    EXPECT_LT(x.tokens[i * 2], 10000000);
    EXPECT_LT(x.tokens[i * 2 + 1], 7);
    ++hot[x.tokens[i * 2]];
  }
  // Skewed: the hottest of 10^7 ids is drawn about P(rank 1) ≈ 6 % of the time.
  int most = 0;
  for (const auto& [id, n] : hot) most = std::max(most, n);
  EXPECT_GT(most, 10);
}

Config dlrm_config(const std::string& sync, int steps = 10,
                   const std::vector<std::string>& overrides = {}) {
  return Config::load_string(
      "model: {type: dlrm, tables: [300, 50], embedding_dim: 4, hidden: [16]}\n"
      "data: {dataset: zipf, zipf_skew: 1.1, synthetic_samples: 480, synthetic_features: 6, "
      "synthetic_classes: 3, test_limit: 60}\n"
      "optimizer: {type: sgd, lr: 0.2, momentum: 0}\n"
      "train: {steps: " + std::to_string(steps) + ", batch_size: 24, seed: 2, log_every: 1000, "
      "eval_every: 0}\n"
      "sync: {backend: " + sync + ", timeout: 30s}\n"
      "ps: {timeout: 30s, chunk_bytes: 1K}\n",
      config_schema(), overrides);
}

TEST(Dlrm, GradientsAreZeroOutsideTheTouchedRowsAndMatchDifferences) {
  const Config cfg = dlrm_config("ring");
  DatasetPair data = load_dataset(workload_options(cfg));
  auto model = make_model(workload_options(cfg), *data.train, {});
  ParamStore store;
  build_params(*model, store, 1, 2);
  Batch batch;
  const std::vector<int64_t> idx = {0, 1, 2, 3, 4, 5};
  data.train->gather(idx, batch);
  store.zero_grads();
  forward_backward(*model, batch);
  const auto tables = model->sparse_tables();
  ASSERT_EQ(tables.size(), 2u);
  const auto grads = store.grads();
  for (size_t t = 0; t < tables.size(); ++t) {
    const auto rows = model->touched_rows(static_cast<int>(t));
    std::set<int64_t> hit(rows.begin(), rows.end());
    for (int64_t r = 0; r < tables[t].rows; ++r)
      for (int64_t k = 0; k < tables[t].dim; ++k) {
        const float g = grads[tables[t].offset + r * tables[t].dim + k];
        if (!hit.count(r)) {
          EXPECT_EQ(g, 0.0f) << "table " << t << " row " << r;
        }
      }
  }
  // Central differences on every float of the first touched row of each
  // table and on a few MLP weights.
  auto loss = [&] {
    model->set_batch(batch);
    const auto stash = model->make_activations(0);
    model->forward(0, 0, *stash, {}, {});
    return model->batch_loss();
  };
  std::vector<int64_t> probe;
  for (size_t t = 0; t < tables.size(); ++t)
    for (int64_t k = 0; k < tables[t].dim; ++k)
      probe.push_back(tables[t].offset + model->touched_rows(static_cast<int>(t))[0] * tables[t].dim + k);
  probe.push_back(tables[1].offset + tables[1].rows * tables[1].dim + 3);
  const std::vector<float> g(grads.begin(), grads.end());
  for (int64_t i : probe) {
    float& p = store.params()[i];
    const float keep = p, h = 1e-2f;
    p = keep + h;
    const double up = loss();
    p = keep - h;
    const double down = loss();
    p = keep;
    EXPECT_NEAR(g[i], (up - down) / (2 * h), 2e-3 + 0.02 * std::fabs(g[i])) << "float " << i;
  }
}

std::vector<float> train_params(int ranks, const Config& cfg) {
  std::vector<float> params;
  std::mutex mu;
  run_inproc(ranks, [&](Comm& c) {
    TrainResult r = train(c, cfg);
    std::lock_guard<std::mutex> lock(mu);
    if (!r.server && params.empty()) params = std::move(r.params);
  });
  return params;
}

TEST(Dlrm, SparsePsDensePsHybridAndRingAgreeAfterTenSteps) {
  ops::set_blas_threads(1);
  const auto ring = train_params(2, dlrm_config("ring"));
  const auto start = train_params(1, dlrm_config("ring", 1));
  ASSERT_FALSE(ring.empty());
  EXPECT_GT(relative_difference(ring, start), 1e-3);  // training moved them
  const std::map<std::string, Config> others = {
      {"ring dense tables", dlrm_config("ring", 10, {"sync.sparse_tables=dense"})},
      {"ps dense", dlrm_config("ps", 10, {"ps.servers=2"})},
      {"ps sparse", dlrm_config("ps", 10, {"ps.servers=2", "ps.sparse=true"})},
      {"hybrid ring", dlrm_config("hybrid", 10, {"ps.servers=2", "sync.algorithm=ring"})},
      {"hybrid halving_doubling",
       dlrm_config("hybrid", 10, {"ps.servers=1", "sync.algorithm=halving_doubling"})},
  };
  for (const auto& [name, cfg] : others) {
    const int servers = static_cast<int>(cfg.get_int("ps.servers"));
    const auto p = train_params(2 + servers, cfg);
    ASSERT_EQ(p.size(), ring.size()) << name;
    EXPECT_LE(relative_difference(ring, p), 1e-6) << name;
  }
}

// The allreduce side's all-gather of (ids, rows) (sync/allreduce_sync.h):
// 3 ranks, 200 rows of 4 floats and a dense tail of 50. Sparse batches
// gather — the sum equals a double-precision sum within 1e-6 and the bytes
// each rank sends equal the exact count (N − 1 counts, then every block but
// the next rank's) — and dense ones (every row touched) fall back to the
// allreduce.
TEST(SparseAllGather, SumsLikeTheAllreduceWithExactBytes) {
  constexpr int kRanks = 3;
  constexpr int64_t kRows = 200, kDim = 4, kTables = kRows * kDim, kSize = kTables + 50;
  const SparseRows sparse{kTables, kDim};
  for (const bool dense_batch : {false, true}) {
    std::vector<std::vector<int64_t>> touched(kRanks);
    std::vector<std::vector<float>> grads(kRanks, std::vector<float>(kSize, 0.0f));
    for (int r = 0; r < kRanks; ++r) {
      for (int64_t row = 0; row < kRows; ++row)
        if (dense_batch || Philox::uniform(3, static_cast<uint64_t>(r), row) < 0.05f * (r + 1))
          touched[r].push_back(row);
      for (int64_t row : touched[r])
        for (int64_t k = row * kDim; k < (row + 1) * kDim; ++k)
          grads[r][k] = Philox::uniform(4, static_cast<uint64_t>(r), k) - 0.5f;
      for (int64_t k = kTables; k < kSize; ++k)
        grads[r][k] = Philox::uniform(4, static_cast<uint64_t>(r), k) - 0.5f;
    }
    std::vector<double> expect(kSize, 0.0);  // params 0, lr 1: −(the average)
    for (int r = 0; r < kRanks; ++r)
      for (int64_t k = 0; k < kSize; ++k) expect[k] -= static_cast<double>(grads[r][k]) / kRanks;
    std::vector<int64_t> counts;
    for (const auto& t : touched) counts.push_back(static_cast<int64_t>(t.size()));
    EXPECT_EQ(sparse_gather_is_cheaper(sparse, counts), !dense_batch);
    std::mutex mu;
    run_inproc(kRanks, [&](Comm& comm) {
      const auto r = static_cast<size_t>(comm.rank());
      OptimizerOptions sgd;
      sgd.lr = 1.0f;
      AllreduceSync sync(comm, make_allreducer("ring", {}), sgd, kSize, Device::kCpu, sparse);
      std::vector<float> params(kSize, 0.0f), g = grads[r];
      sync.set_touched_rows(touched[r]);
      const CommCounters before = comm.counters();
      sync.step(params, g);
      const CommCounters after = comm.counters();
      // The dense tail's allreduce alone, to take out of the step's bytes.
      std::vector<float> tail(kSize - kTables, 1.0f);
      make_allreducer("ring", {})->allreduce(comm, tail);
      const int64_t tail_bytes = comm.counters().bytes_sent - after.bytes_sent;
      int64_t gather = (kRanks - 1) * 8;  // the counts
      for (int k = 0; k + 1 < kRanks; ++k)
        gather += counts[(r + kRanks - k) % kRanks] * (8 + 4 * kDim);
      double diff = 0, scale = 0;
      for (int64_t k = 0; k < kSize; ++k) {
        diff = std::max(diff, std::fabs(params[k] - expect[k]));
        scale = std::max(scale, std::fabs(expect[k]));
      }
      std::lock_guard<std::mutex> lock(mu);
      EXPECT_EQ(sync.gathered(), !dense_batch) << "rank " << r;
      EXPECT_LE(diff / scale, 1e-6) << "rank " << r;
      if (!dense_batch)
        EXPECT_EQ(after.bytes_sent - before.bytes_sent, gather + tail_bytes) << "rank " << r;
    });
  }
}

TEST(Dlrm, EveryConsistencyModelRunsSparse) {
  for (const std::string c : {"bsp", "ssp", "asp"}) {
    const auto p = train_params(
        3, dlrm_config("ps", 10, {"ps.sparse=true", "ps.consistency=" + c, "ps.staleness=1"}));
    ASSERT_FALSE(p.empty()) << c;
    for (float v : p) ASSERT_TRUE(std::isfinite(v)) << c;
  }
}

TEST(Dlrm, BadSparseConfigsNameTheirKeys) {
  EXPECT_THAT(testing::train_config_error(1, dlrm_config("ring", 10, {"data.zipf_ids=[301, 50]"})),
              ::testing::HasSubstr("data.zipf_ids[0] = 301 exceeds model.tables[0] = 300"));
  EXPECT_THAT(testing::train_config_error(2, testing::small_mlp_config("hybrid")),
              ::testing::HasSubstr("sync.backend hybrid needs a model with embedding tables"));
  EXPECT_THAT(testing::train_config_error(
                  2, Config::load_string("sync: {backend: ps}\nps: {sparse: true}\n"
                                         "model: {type: mlp, hidden: [8]}\n"
                                         "data: {dataset: synthetic, synthetic_samples: 96}\n"
                                         "train: {steps: 1, batch_size: 12}\n",
                                         config_schema())),
              ::testing::HasSubstr("ps.sparse needs a model with embedding tables"));
}

}  // namespace
}  // namespace psar
