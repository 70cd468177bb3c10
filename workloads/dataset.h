#pragma once
// Datasets: rows of float features with an integer class, held in memory.
// Fashion-MNIST comes from Debian's `dataset-fashion-mnist` (gzipped IDX files
// under /usr/share/datasets/fashion-mnist); `synthetic` is a seeded Gaussian
// mixture for fast hermetic tests.

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace psar {

class Dataset {
 public:
  Dataset() = default;
  Dataset(int64_t features, int64_t classes, std::vector<float> x, std::vector<int32_t> y);

  int64_t size() const { return static_cast<int64_t>(y_.size()); }
  int64_t features() const { return features_; }
  int64_t classes() const { return classes_; }
  // Copies rows `indices` into x: [n, features] and y: [n].
  void gather(std::span<const int64_t> indices, float* x, int32_t* y) const;
  // Keeps only the first n rows (n <= 0 keeps all).
  void truncate(int64_t n);

 private:
  int64_t features_ = 0, classes_ = 0;
  std::vector<float> x_;
  std::vector<int32_t> y_;
};

struct DatasetPair {
  Dataset train, test;
};

// Reads {train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz] from `dir`. Pixels
// are scaled to [0,1] and standardized with the training set's mean and std.
// Throws DataError naming the file that is missing or malformed.
DatasetPair load_fashion_mnist(const std::string& dir);

// Reads one IDX file (gzipped or not): returns dims and raw bytes.
struct IdxFile {
  std::vector<int64_t> dims;
  std::vector<uint8_t> data;
};
IdxFile read_idx(const std::string& path, int expected_rank);

// `classes` Gaussian blobs in `features` dimensions; deterministic in seed.
DatasetPair make_synthetic(int64_t samples, int64_t features, int64_t classes, uint64_t seed);

}  // namespace psar
