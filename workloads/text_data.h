#pragma once
// Token datasets for language models: fixed-length windows of a token stream.
// Sample i is the stream's tokens [i·stride, i·stride + T + 1); the model reads
// the first T as input and predicts the last T (the input shifted by one).
//
// Two sources:
//  - text: a plain-text file read as bytes, character-level. The vocabulary is
//    the set of distinct bytes of the file, numbered in byte order. The first
//    90% of the characters train, the last 10% test; windows do not overlap
//    (stride T). Default corpus: /usr/share/games/fortunes/fortunes from
//    Debian's fortunes-min package (about 24 KB of English text).
//  - synthetic_tokens: sequences of a seeded first-order Markov chain (each
//    token has 4 favoured successors, taken with probability 0.8), so there
//    is structure to learn; deterministic in the seed.

#include <cstdint>
#include <string>
#include <vector>

#include "workloads/dataset.h"

namespace psar {

class TokenDataset final : public Dataset {
 public:
  // tokens: the stream, every value in [0, vocab).
  TokenDataset(int64_t vocab, int64_t seq_len, int64_t stride, std::vector<int32_t> tokens);

  int64_t size() const override;
  int64_t classes() const override { return vocab_; }
  int64_t seq_len() const { return T_; }
  // batch.tokens and batch.targets: [indices.size(), T]
  void gather(std::span<const int64_t> indices, Batch& batch) const override;
  void truncate(int64_t n) override;

 private:
  int64_t vocab_, T_, stride_, limit_ = -1;
  std::vector<int32_t> tokens_;
};

// The corpus used when data.path does not name a file.
inline constexpr const char* kDefaultTextPath = "/usr/share/games/fortunes/fortunes";

// data.path if it names a regular file; the default corpus if it names a
// folder (its default is the Fashion-MNIST folder); DataError if it is absent.
std::string resolve_text_path(const std::string& data_path);

// Character-level windows of T + 1 characters; DataError if the file cannot be
// read or is too short for one training and one test window.
DatasetPair load_text(const std::string& path, int64_t seq_len);

// `samples` training sequences (and samples/4 test ones) over `vocab` tokens.
DatasetPair make_synthetic_tokens(int64_t samples, int64_t seq_len, int64_t vocab, uint64_t seed);

}  // namespace psar
