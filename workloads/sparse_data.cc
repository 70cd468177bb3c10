#include "workloads/sparse_data.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "core/errors.h"
#include "core/rng.h"

namespace psar {

namespace {
// log1p(x)/x and expm1(x)/x, continuous at 0 (s = 1).
double helper1(double x) { return std::abs(x) > 1e-8 ? std::log1p(x) / x : 1 - x / 2; }
double helper2(double x) { return std::abs(x) > 1e-8 ? std::expm1(x) / x : 1 + x / 2; }
constexpr int64_t kPrime = 2654435761;
}  // namespace

ZipfSampler::ZipfSampler(int64_t n, double s) : n_(n), s_(s) {
  if (n < 1) throw ConfigError("zipf: a table needs at least one id");
  if (!(s >= 0.0)) throw ConfigError("data.zipf_skew: must be ≥ 0");
  if (s_ == 0.0) return;
  h_x1_ = h_integral(1.5) - 1.0;
  h_n_ = h_integral(static_cast<double>(n) + 0.5);
  sv_ = 2.0 - h_inverse(h_integral(2.5) - h(2.0));
}

double ZipfSampler::h(double x) const { return std::exp(-s_ * std::log(x)); }

double ZipfSampler::h_integral(double x) const {
  const double lx = std::log(x);
  return helper2((1.0 - s_) * lx) * lx;
}

double ZipfSampler::h_inverse(double v) const {
  double t = v * (1.0 - s_);
  if (t < -1.0) t = -1.0;
  return std::exp(helper1(t) * v);
}

double ZipfSampler::probability(int64_t k) const {
  double z = 0;
  for (int64_t i = 1; i <= n_; ++i) z += std::pow(static_cast<double>(i), -s_);
  return std::pow(static_cast<double>(k), -s_) / z;
}

int64_t zipf_row(int64_t rank, int64_t n) {
  if (n % kPrime == 0) return rank - 1;
  return static_cast<int64_t>((static_cast<unsigned __int128>(rank - 1) * kPrime) %
                              static_cast<unsigned __int128>(n));
}

SparseDataset::SparseDataset(int64_t features, int64_t classes, std::vector<int64_t> id_ranges,
                             std::vector<float> x, std::vector<int32_t> ids, std::vector<int32_t> y)
    : features_(features), classes_(classes), id_ranges_(std::move(id_ranges)), x_(std::move(x)),
      ids_(std::move(ids)), y_(std::move(y)) {
  PSAR_CHECK(static_cast<int64_t>(x_.size()) == features_ * size(), "dense shape mismatch");
  PSAR_CHECK(ids_.size() == id_ranges_.size() * y_.size(), "ids shape mismatch");
}

void SparseDataset::gather(std::span<const int64_t> indices, Batch& batch) const {
  const int64_t T = tables();
  batch.size = static_cast<int64_t>(indices.size());
  if (batch.inputs.numel() != batch.size * features_) batch.inputs.resize({batch.size, features_});
  batch.targets.resize(indices.size());
  batch.tokens.resize(indices.size() * static_cast<size_t>(T));
  for (size_t i = 0; i < indices.size(); ++i) {
    const int64_t r = indices[i];
    PSAR_CHECK(r >= 0 && r < size(), "row ", r, " outside dataset of ", size());
    std::memcpy(batch.inputs.data() + static_cast<int64_t>(i) * features_,
                x_.data() + r * features_, sizeof(float) * static_cast<size_t>(features_));
    std::memcpy(batch.tokens.data() + i * T, ids_.data() + r * T, sizeof(int32_t) * T);
    batch.targets[i] = y_[static_cast<size_t>(r)];
  }
}

void SparseDataset::truncate(int64_t n) {
  if (n <= 0 || n >= size()) return;
  x_.resize(static_cast<size_t>(n * features_));
  ids_.resize(static_cast<size_t>(n) * id_ranges_.size());
  y_.resize(static_cast<size_t>(n));
}

DatasetPair make_zipf_data(int64_t samples, int64_t features, int64_t classes,
                           std::vector<int64_t> id_ranges, double skew, uint64_t seed) {
  if (samples <= 0 || features <= 0 || classes < 2)
    throw ConfigError("zipf data needs samples > 0, features > 0, classes >= 2");
  const int64_t T = static_cast<int64_t>(id_ranges.size());
  std::vector<ZipfSampler> samplers;
  for (int64_t n : id_ranges) samplers.emplace_back(n, skew);
  auto make = [&](int64_t n, const std::string& split) {
    std::vector<float> x(static_cast<size_t>(n * features));
    Philox::fill_normal(x, 1.0f, seed, fnv1a("zipf." + split + ".dense"));
    std::vector<int32_t> ids(static_cast<size_t>(n * T));
    std::vector<int32_t> y(static_cast<size_t>(n));
    std::vector<double> score(static_cast<size_t>(classes));
    for (int64_t t = 0; t < T; ++t) {
      const uint64_t stream = fnv1a("zipf." + split + "." + std::to_string(t));
      for (int64_t i = 0; i < n; ++i) {
        const int64_t rank = samplers[t].sample([&](int attempt) {
          return static_cast<double>(Philox::block(seed, stream, static_cast<uint64_t>(i) * 64 +
                                                                     static_cast<uint64_t>(attempt))[0]) *
                 0x1.0p-32;
        });
        ids[i * T + t] = static_cast<int32_t>(zipf_row(rank, id_ranges[t]));
      }
    }
    for (int64_t i = 0; i < n; ++i) {
      std::fill(score.begin(), score.end(), 0.0);
      for (int64_t t = 0; t < T; ++t) {
        const uint64_t stream = fnv1a("zipf.score." + std::to_string(t));
        const auto row = static_cast<uint64_t>(ids[i * T + t]);
        for (int64_t c = 0; c < classes; ++c)
          score[c] += Philox::normal(seed, stream, row * static_cast<uint64_t>(classes) + c);
      }
      for (int64_t j = 0; j < features; ++j)
        for (int64_t c = 0; c < classes; ++c)
          score[c] += x[i * features + j] *
                      Philox::normal(seed, fnv1a("zipf.dense_score"),
                                     static_cast<uint64_t>(j * classes + c));
      y[i] = static_cast<int32_t>(std::max_element(score.begin(), score.end()) - score.begin());
    }
    return std::make_unique<SparseDataset>(features, classes, id_ranges, std::move(x),
                                           std::move(ids), std::move(y));
  };
  DatasetPair pair;
  pair.train = make(samples, "train");
  pair.test = make(std::max<int64_t>(samples / 4, 1), "test");
  return pair;
}

DatasetPair load_zipf_data(const WorkloadOptions& options) {
  std::vector<int64_t> ranges = options.data.zipf_ids;
  const char* key = "data.zipf_ids";
  if (ranges.empty()) {
    ranges = options.tables;
    key = "model.tables";
  }
  if (ranges.empty()) throw ConfigError("data.dataset zipf: model.tables lists no table");
  for (size_t t = 0; t < ranges.size(); ++t)
    if (ranges[t] < 1 || ranges[t] > INT32_MAX)
      throw ConfigError(std::string(key) + "[" + std::to_string(t) + "] = " +
                        std::to_string(ranges[t]) + ": ids per table must lie in [1, 2^31 − 1]");
  return make_zipf_data(options.data.synthetic_samples, options.data.synthetic_features,
                        options.data.synthetic_classes, std::move(ranges), options.data.zipf_skew,
                        options.seed);
}

}  // namespace psar
