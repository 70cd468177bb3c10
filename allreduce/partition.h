#pragma once
// Partition: the balanced split of `count` elements into `parts` contiguous
// pieces that every chunked collective uses. The first count % parts pieces
// hold one element more than the rest, so sizes differ by at most one and a
// piece may be empty (count < parts). Every rank computes the same split from
// (count, parts) alone, which is how ranks agree on chunk boundaries without
// talking. Public because a reduce-scatter's caller must know which piece of
// the vector it receives.

#include <algorithm>
#include <cstdint>
#include <vector>

namespace psar {

struct Partition {
  int64_t count = 0;
  int parts = 1;

  int64_t offset(int i) const {
    const int64_t base = count / parts, extra = count % parts;
    return i * base + std::min<int64_t>(i, extra);
  }
  int64_t size(int i) const {
    const int64_t base = count / parts, extra = count % parts;
    return base + (i < extra ? 1 : 0);
  }
  int64_t largest() const { return size(0); }

  // The pieces' boundaries inside [lo, hi), from 0: parts + 1 ascending
  // values, piece i = [split[i], split[i+1]) (empty where it lies outside) —
  // the split a sharded collective over that range takes
  // (allreduce/sharded.h).
  std::vector<int64_t> split_within(int64_t lo, int64_t hi) const {
    std::vector<int64_t> split;
    for (int i = 0; i <= parts; ++i)
      split.push_back(std::clamp(i == parts ? count : offset(i), lo, hi) - lo);
    return split;
  }
};

}  // namespace psar
