#include "workloads/text_data.h"

#include <sys/stat.h>

#include <algorithm>
#include <array>
#include <fstream>
#include <iterator>

#include "core/errors.h"
#include "core/rng.h"

namespace psar {

TokenDataset::TokenDataset(int64_t vocab, int64_t seq_len, int64_t stride,
                           std::vector<int32_t> tokens)
    : vocab_(vocab), T_(seq_len), stride_(stride), tokens_(std::move(tokens)) {
  PSAR_CHECK(vocab_ >= 2 && T_ >= 1 && stride_ >= 1, "token dataset: vocab ", vocab_, ", seq ", T_,
             ", stride ", stride_);
}

int64_t TokenDataset::size() const {
  const auto n = static_cast<int64_t>(tokens_.size());
  const int64_t all = n < T_ + 1 ? 0 : (n - (T_ + 1)) / stride_ + 1;
  return limit_ < 0 ? all : std::min(all, limit_);
}

void TokenDataset::gather(std::span<const int64_t> indices, Batch& batch) const {
  batch.size = static_cast<int64_t>(indices.size());
  batch.tokens.resize(static_cast<size_t>(batch.size * T_));
  batch.targets.resize(static_cast<size_t>(batch.size * T_));
  for (size_t i = 0; i < indices.size(); ++i) {
    const int64_t s = indices[i];
    PSAR_CHECK(s >= 0 && s < size(), "sequence ", s, " outside dataset of ", size());
    const int32_t* w = tokens_.data() + s * stride_;
    std::copy_n(w, T_, batch.tokens.data() + static_cast<int64_t>(i) * T_);
    std::copy_n(w + 1, T_, batch.targets.data() + static_cast<int64_t>(i) * T_);
  }
}

void TokenDataset::truncate(int64_t n) {
  if (n > 0) limit_ = n;
}

std::string resolve_text_path(const std::string& data_path) {
  struct stat st;
  if (::stat(data_path.c_str(), &st) != 0)
    throw DataError("data.path '" + data_path +
                    "': no such file (data.dataset text reads a "
                    "plain-text file; leave data.path unset for " +
                    kDefaultTextPath + ")");
  if (S_ISREG(st.st_mode)) return data_path;
  if (S_ISDIR(st.st_mode)) return kDefaultTextPath;
  throw DataError("data.path '" + data_path + "' is not a regular file");
}

DatasetPair load_text(const std::string& path, int64_t seq_len) {
  if (seq_len < 1)
    throw ConfigError("model.seq_len must be positive, got " + std::to_string(seq_len));
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw DataError("cannot read text corpus '" + path + "'" +
                    (path == kDefaultTextPath ? " (install the Debian package fortunes-min)" : ""));
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // The vocabulary: the distinct bytes, numbered in byte order.
  std::array<int32_t, 256> id;
  id.fill(-1);
  for (unsigned char c : text) id[c] = 0;
  int32_t vocab = 0;
  for (auto& v : id)
    if (v == 0) v = vocab++;
  const auto n = static_cast<int64_t>(text.size());
  const int64_t split = n * 9 / 10;
  if (split < seq_len + 1 || n - split < seq_len + 1 || vocab < 2)
    throw DataError("text corpus '" + path + "' has " + std::to_string(n) +
                    " characters: too short for model.seq_len = " + std::to_string(seq_len) +
                    " (needs 10·(seq_len + 1) and two distinct characters)");
  auto tokens = [&](int64_t lo, int64_t hi) {
    std::vector<int32_t> t(static_cast<size_t>(hi - lo));
    for (int64_t i = lo; i < hi; ++i)
      t[static_cast<size_t>(i - lo)] = id[static_cast<unsigned char>(text[i])];
    return t;
  };
  DatasetPair pair;
  pair.train = std::make_unique<TokenDataset>(vocab, seq_len, seq_len, tokens(0, split));
  pair.test = std::make_unique<TokenDataset>(vocab, seq_len, seq_len, tokens(split, n));
  return pair;
}

DatasetPair make_synthetic_tokens(int64_t samples, int64_t seq_len, int64_t vocab, uint64_t seed) {
  if (samples <= 0 || seq_len < 1 || vocab < 2)
    throw ConfigError(
        "synthetic_tokens needs data.synthetic_samples > 0, model.seq_len > 0 and "
        "a vocabulary of at least 2 (model.vocab), got " +
        std::to_string(samples) + ", " + std::to_string(seq_len) + ", " + std::to_string(vocab));
  constexpr int kSuccessors = 4;
  constexpr float kFollow = 0.8f;  // probability of taking a favoured successor
  const auto V = static_cast<uint32_t>(vocab);
  auto successor = [&](uint32_t token, uint32_t k) {
    return Philox::block(seed, fnv1a("synthetic_tokens.chain"), token * kSuccessors + k)[0] % V;
  };
  auto make = [&](int64_t n, uint64_t stream) {
    const int64_t len = seq_len + 1;
    std::vector<int32_t> tokens(static_cast<size_t>(n * len));
    for (int64_t s = 0; s < n; ++s) {
      uint32_t cur = 0;
      for (int64_t i = 0; i < len; ++i) {
        const auto b = Philox::block(seed, stream, static_cast<uint64_t>(s * len + i));
        const float u = static_cast<float>(b[0] >> 8) * 0x1.0p-24f;
        cur = i > 0 && u < kFollow ? successor(cur, b[1] % kSuccessors) : b[2] % V;
        tokens[static_cast<size_t>(s * len + i)] = static_cast<int32_t>(cur);
      }
    }
    return std::make_unique<TokenDataset>(vocab, seq_len, len, std::move(tokens));
  };
  DatasetPair pair;
  pair.train = make(samples, fnv1a("synthetic_tokens.train"));
  pair.test = make(std::max<int64_t>(samples / 4, 1), fnv1a("synthetic_tokens.test"));
  return pair;
}

}  // namespace psar
