#pragma once
// Datasets: rows of float features with an integer class, held in memory.
// Fashion-MNIST comes from Debian's `dataset-fashion-mnist` (gzipped IDX files
// under /usr/share/datasets/fashion-mnist); `synthetic` is a seeded Gaussian
// mixture for fast hermetic tests.

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace psar {

// One (micro-)batch. Classifiers use `inputs` [size, features] and `targets`
// [size]; language models use `tokens` [size, seq] and `targets` [size, seq].
struct Batch {
  int64_t size = 0;
  Tensor inputs;
  std::vector<int32_t> tokens;
  std::vector<int32_t> targets;
};

// A batch's columns on a device: the explicit copy a model makes from the
// host batch when its parameters live on CUDA (train.device: cuda). On the
// CPU the pointers are the batch's own, without a copy.
class DeviceBatch {
 public:
  void load(const Batch& batch, Device device);
  const float* inputs() const { return inputs_; }
  const int32_t* tokens() const { return tokens_; }
  const int32_t* targets() const { return targets_; }

 private:
  Tensor inputs_storage_;
  IntBuffer tokens_storage_, targets_storage_;
  const float* inputs_ = nullptr;
  const int32_t* tokens_ = nullptr;
  const int32_t* targets_ = nullptr;
};

// Samples addressed by index; the trainer picks indices, the dataset fills
// the batch.
class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  // Input features per sample (classifiers) or 0.
  virtual int64_t features() const { return 0; }
  // Classes (classifiers) or vocabulary size (language models).
  virtual int64_t classes() const = 0;
  // Fills `batch` with samples `indices`.
  virtual void gather(std::span<const int64_t> indices, Batch& batch) const = 0;
  // Keeps only the first n samples (n <= 0 keeps all).
  virtual void truncate(int64_t n) = 0;
};

// Rows of float features with an integer class, in memory.
class ClassificationDataset final : public Dataset {
 public:
  ClassificationDataset(int64_t features, int64_t classes, std::vector<float> x,
                        std::vector<int32_t> y);

  int64_t size() const override { return static_cast<int64_t>(y_.size()); }
  int64_t features() const override { return features_; }
  int64_t classes() const override { return classes_; }
  void gather(std::span<const int64_t> indices, Batch& batch) const override;
  void truncate(int64_t n) override;

 private:
  int64_t features_ = 0, classes_ = 0;
  std::vector<float> x_;
  std::vector<int32_t> y_;
};

struct DatasetPair {
  std::unique_ptr<Dataset> train, test;
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
