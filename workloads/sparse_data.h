#pragma once
// Synthetic categorical data for the sparse (DLRM-style) workload
// (`data.dataset: zipf`, docs/sparse.md): each sample has F dense features,
// one id per embedding table and a class.
//
// Generator, a pure function of train.seed:
//  - ids: table t's id of sample i is drawn from a Zipf law over
//    data.zipf_ids[t] ids (default: model.tables[t]) with exponent
//    s = data.zipf_skew — P(rank k) ∝ k^−s, s = 0 is uniform — by
//    rejection-inversion (Hörmann & Derflinger 1996) on Philox's uniforms
//    (stream "zipf.<split>.<t>", index i·64 + attempt); rank k maps to row
//    (k − 1)·P mod n with P = 2654435761 (a prime; n a multiple of P falls
//    back to row k − 1), so that the hot rows spread over the parameter
//    server's shards instead of sitting in the first.
//  - dense features: N(0, 1).
//  - class: argmax over c of Σ_t score_t(id_t)[c] + Σ_j x_j·v_j[c], where
//    score_t(row) and v_j are N(0, 1) vectors keyed by (table, row) and j:
//    additive in the rows' embeddings, so a model can learn it.

#include <cstdint>
#include <span>
#include <vector>

#include "workloads/workload_options.h"
#include "workloads/dataset.h"

namespace psar {

// Zipf ranks in [1, n] with exponent s ≥ 0, by rejection-inversion.
class ZipfSampler {
 public:
  ZipfSampler(int64_t n, double s);
  // Rank from uniforms u(0), u(1), ...: the first accepted attempt's.
  template <class Uniform>
  int64_t sample(Uniform&& u) const {
    if (s_ == 0.0) return 1 + std::min<int64_t>(n_ - 1, static_cast<int64_t>(u(0) * n_));
    for (int attempt = 0;; ++attempt) {
      const double v = h_n_ + u(attempt) * (h_x1_ - h_n_);
      const double x = h_inverse(v);
      int64_t k = static_cast<int64_t>(x + 0.5);
      k = std::max<int64_t>(1, std::min<int64_t>(n_, k));
      if (k - x <= sv_ || v >= h_integral(static_cast<double>(k) + 0.5) - h(static_cast<double>(k)))
        return k;
    }
  }
  // P(rank = k), exactly (Σ over n terms on first use): for tests.
  double probability(int64_t k) const;

 private:
  double h(double x) const;
  double h_integral(double x) const;
  double h_inverse(double v) const;
  int64_t n_;
  double s_;
  double h_x1_ = 0, h_n_ = 0, sv_ = 0;
};

// Row of Zipf rank k (1-based) in a table of n rows: (k − 1)·P mod n.
int64_t zipf_row(int64_t rank, int64_t n);

class SparseDataset final : public Dataset {
 public:
  SparseDataset(int64_t features, int64_t classes, std::vector<int64_t> id_ranges,
                std::vector<float> x, std::vector<int32_t> ids, std::vector<int32_t> y);
  int64_t size() const override { return static_cast<int64_t>(y_.size()); }
  int64_t features() const override { return features_; }
  int64_t classes() const override { return classes_; }
  // inputs [size, F], tokens [size, T] (the ids), targets [size].
  void gather(std::span<const int64_t> indices, Batch& batch) const override;
  void truncate(int64_t n) override;
  int tables() const { return static_cast<int>(id_ranges_.size()); }
  // Ids of table t lie in [0, id_ranges()[t]).
  const std::vector<int64_t>& id_ranges() const { return id_ranges_; }

 private:
  int64_t features_, classes_;
  std::vector<int64_t> id_ranges_;
  std::vector<float> x_;
  std::vector<int32_t> ids_;
  std::vector<int32_t> y_;
};

// The generator above: `samples` training samples, samples/4 test samples.
DatasetPair make_zipf_data(int64_t samples, int64_t features, int64_t classes,
                           std::vector<int64_t> id_ranges, double skew, uint64_t seed);
// From the config: data.synthetic_samples/_features/_classes, data.zipf_ids
// (or model.tables), data.zipf_skew, train.seed. ConfigError naming the key
// for ranges that are not positive or exceed 2^31 − 1.
DatasetPair load_zipf_data(const WorkloadOptions& options);

}  // namespace psar
