#include "workloads/dataset.h"

#include <sys/stat.h>
#include <zlib.h>

#include <cmath>
#include <cstring>

#include "core/errors.h"
#include "core/rng.h"

namespace psar {

void DeviceBatch::load(const Batch& batch, Device device) {
  if (device == Device::kCpu) {
    inputs_ = batch.inputs.data();
    tokens_ = batch.tokens.data();
    targets_ = batch.targets.data();
    return;
  }
  if (batch.inputs.numel() > 0) {
    if (inputs_storage_.device() != device || inputs_storage_.numel() != batch.inputs.numel())
      inputs_storage_ = Tensor(batch.inputs.shape(), device);
    inputs_storage_.copy_from(batch.inputs);
  }
  tokens_storage_.assign(batch.tokens, device);
  targets_storage_.assign(batch.targets, device);
  inputs_ = batch.inputs.numel() > 0 ? inputs_storage_.data() : nullptr;
  tokens_ = tokens_storage_.data();
  targets_ = targets_storage_.data();
}

ClassificationDataset::ClassificationDataset(int64_t features, int64_t classes,
                                             std::vector<float> x, std::vector<int32_t> y)
    : features_(features), classes_(classes), x_(std::move(x)), y_(std::move(y)) {
  PSAR_CHECK(static_cast<int64_t>(x_.size()) == features_ * size(), "dataset shape mismatch");
}

void ClassificationDataset::gather(std::span<const int64_t> indices, Batch& batch) const {
  batch.size = static_cast<int64_t>(indices.size());
  if (batch.inputs.numel() != batch.size * features_) batch.inputs.resize({batch.size, features_});
  batch.targets.resize(indices.size());
  float* x = batch.inputs.data();
  for (size_t i = 0; i < indices.size(); ++i) {
    const int64_t r = indices[i];
    PSAR_CHECK(r >= 0 && r < size(), "row ", r, " outside dataset of ", size());
    std::memcpy(x + static_cast<int64_t>(i) * features_, x_.data() + r * features_,
                sizeof(float) * static_cast<size_t>(features_));
    batch.targets[i] = y_[static_cast<size_t>(r)];
  }
}

void ClassificationDataset::truncate(int64_t n) {
  if (n <= 0 || n >= size()) return;
  x_.resize(static_cast<size_t>(n * features_));
  y_.resize(static_cast<size_t>(n));
}

namespace {

bool exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

// The file as given, or with ".gz" appended.
std::string locate(const std::string& dir, const std::string& stem) {
  for (const std::string& p : {dir + "/" + stem + ".gz", dir + "/" + stem})
    if (exists(p)) return p;
  throw DataError("dataset file '" + dir + "/" + stem + "[.gz]' not found (install the Debian "
                  "package dataset-fashion-mnist, or set data.path)");
}

}  // namespace

IdxFile read_idx(const std::string& path, int expected_rank) {
  gzFile f = gzopen(path.c_str(), "rb");  // reads plain files too
  if (!f) throw DataError("cannot open dataset file '" + path + "'");
  std::vector<uint8_t> bytes;
  uint8_t buf[1 << 16];
  int n;
  while ((n = gzread(f, buf, sizeof buf)) > 0) bytes.insert(bytes.end(), buf, buf + n);
  const bool err = n < 0;
  gzclose(f);
  if (err) throw DataError("'" + path + "': corrupt gzip stream");
  if (bytes.size() < 4) throw DataError("'" + path + "': too short for an IDX header");
  // Magic: 0x00 0x00 <type 0x08 = unsigned byte> <rank>
  if (bytes[0] != 0 || bytes[1] != 0 || bytes[2] != 0x08)
    throw DataError("'" + path + "': not an IDX file of unsigned bytes (bad magic)");
  const int rank = bytes[3];
  if (rank != expected_rank)
    throw DataError("'" + path + "': IDX rank " + std::to_string(rank) + ", expected " +
                    std::to_string(expected_rank));
  const size_t header = 4 + 4 * static_cast<size_t>(rank);
  if (bytes.size() < header) throw DataError("'" + path + "': truncated IDX header");
  IdxFile idx;
  int64_t total = 1;
  for (int d = 0; d < rank; ++d) {
    const uint8_t* p = bytes.data() + 4 + 4 * d;
    const int64_t dim = (int64_t{p[0]} << 24) | (int64_t{p[1]} << 16) | (int64_t{p[2]} << 8) | p[3];
    idx.dims.push_back(dim);
    total *= dim;
  }
  if (static_cast<int64_t>(bytes.size() - header) != total)
    throw DataError("'" + path + "': header promises " + std::to_string(total) +
                    " bytes of data, file has " + std::to_string(bytes.size() - header));
  idx.data.assign(bytes.begin() + static_cast<ptrdiff_t>(header), bytes.end());
  return idx;
}

DatasetPair load_fashion_mnist(const std::string& dir) {
  auto load = [&](const std::string& prefix, double* mean, double* stddev) {
    const std::string ipath = locate(dir, prefix + "-images-idx3-ubyte");
    const std::string lpath = locate(dir, prefix + "-labels-idx1-ubyte");
    IdxFile images = read_idx(ipath, 3);
    IdxFile labels = read_idx(lpath, 1);
    if (images.dims[0] != labels.dims[0])
      throw DataError("'" + ipath + "' has " + std::to_string(images.dims[0]) + " images but '" +
                      lpath + "' has " + std::to_string(labels.dims[0]) + " labels");
    const int64_t n = images.dims[0], features = images.dims[1] * images.dims[2];
    std::vector<float> x(static_cast<size_t>(n * features));
    for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(images.data[i]) / 255.0f;
    if (*mean < 0) {  // statistics of the training set, applied to both splits
      double s = 0, s2 = 0;
      for (float v : x) s += v, s2 += static_cast<double>(v) * v;
      *mean = s / static_cast<double>(x.size());
      *stddev = std::sqrt(s2 / static_cast<double>(x.size()) - *mean * *mean);
    }
    const float m = static_cast<float>(*mean), inv = static_cast<float>(1.0 / *stddev);
    for (float& v : x) v = (v - m) * inv;
    std::vector<int32_t> y(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      y[i] = labels.data[static_cast<size_t>(i)];
      if (y[i] > 9) throw DataError("'" + lpath + "': label " + std::to_string(y[i]) + " > 9");
    }
    return std::make_unique<ClassificationDataset>(features, 10, std::move(x), std::move(y));
  };
  double mean = -1, stddev = 1;
  DatasetPair pair;
  pair.train = load("train", &mean, &stddev);
  pair.test = load("t10k", &mean, &stddev);
  return pair;
}

DatasetPair make_synthetic(int64_t samples, int64_t features, int64_t classes, uint64_t seed) {
  if (samples <= 0 || features <= 0 || classes < 2)
    throw ConfigError("synthetic data needs samples > 0, features > 0, classes >= 2");
  // Class centres on a sphere of radius 3; unit-variance noise around them.
  std::vector<float> centres(static_cast<size_t>(classes * features));
  Philox::fill_normal(centres, 1.0f, seed, fnv1a("synthetic.centres"));
  for (int64_t c = 0; c < classes; ++c) {
    double norm = 0;
    for (int64_t j = 0; j < features; ++j) norm += centres[c * features + j] * centres[c * features + j];
    const float s = static_cast<float>(3.0 / std::sqrt(norm));
    for (int64_t j = 0; j < features; ++j) centres[c * features + j] *= s;
  }
  auto make = [&](int64_t n, uint64_t stream) {
    std::vector<float> x(static_cast<size_t>(n * features));
    std::vector<int32_t> y(static_cast<size_t>(n));
    Philox::fill_normal(x, 1.0f, seed, stream);
    for (int64_t i = 0; i < n; ++i) {
      y[i] = static_cast<int32_t>(Philox::block(seed, stream + 1, static_cast<uint64_t>(i))[0] %
                                  static_cast<uint32_t>(classes));
      for (int64_t j = 0; j < features; ++j) x[i * features + j] += centres[y[i] * features + j];
    }
    return std::make_unique<ClassificationDataset>(features, classes, std::move(x), std::move(y));
  };
  DatasetPair pair;
  pair.train = make(samples, fnv1a("synthetic.train"));
  pair.test = make(std::max<int64_t>(samples / 4, 1), fnv1a("synthetic.test"));
  return pair;
}

}  // namespace psar
