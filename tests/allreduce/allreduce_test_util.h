#pragma once
// Shared by the allreduce tests: inputs whose float sums depend on the order
// of addition (so "bitwise identical on every rank" is a real check), the
// double-precision reference, and the tolerance it is held to.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "allreduce/allreducer.h"
#include "core/rng.h"

namespace psar::testing {

// Rank `rank`'s element i: uniform in [-1, 1) times 2^k, k in [-6, 6], so the
// magnitudes differ and rounding depends on the order of the additions.
inline float input_value(uint64_t seed, int rank, int64_t i) {
  const auto b = Philox::block(seed, static_cast<uint64_t>(rank), static_cast<uint64_t>(i));
  const float unit = static_cast<float>(b[0] >> 8) * 0x1.0p-23f - 1.0f;
  return std::ldexp(unit, static_cast<int>(b[1] % 13) - 6);
}

inline std::vector<float> make_input(uint64_t seed, int rank, int64_t count) {
  std::vector<float> v(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) v[static_cast<size_t>(i)] = input_value(seed, rank, i);
  return v;
}

// Relative tolerance of a sum of N ≤ 8 terms with `dtype` on the wire: float
// addition errs by at most (N-1)·2⁻²⁴ of Σ|x| (1e-6 bounds it); a value put
// on the wire is rounded by at most the unit roundoff u of its relative size
// (u = 2⁻⁸ for bf16, 2⁻¹¹ for fp16), and an algorithm rounds the inputs once
// and each of at most N-1 partial sums (all bounded by Σ|x|) once: N·u of
// Σ|x|. fp16 also loses what falls below its subnormals (2⁻²⁵ absolute per
// rounding): `absolute`.
struct Tolerance {
  double relative = 1e-6, absolute = 0;
};
inline Tolerance tolerance(ElementType dtype, int ranks) {
  switch (dtype) {
    case ElementType::kBf16: return {1e-6 + ranks * 0x1p-8, 0};
    case ElementType::kFp16: return {1e-6 + ranks * 0x1p-11, ranks * 0x1p-25};
    case ElementType::kFp32: break;
  }
  return {};
}

// Checks result[i] against Σ_r x_r[i] in double, within the tolerance
// (default: float32 on the wire, 1e-6 of Σ_r |x_r[i]|).
// Returns the number of elements outside the tolerance; reports the first few.
inline int64_t count_wrong(const std::vector<float>& result, uint64_t seed, int ranks,
                           int64_t first = 0, Tolerance tol = {}) {
  int64_t wrong = 0;
  for (size_t k = 0; k < result.size(); ++k) {
    const int64_t i = first + static_cast<int64_t>(k);
    double sum = 0, magnitude = 0;
    for (int r = 0; r < ranks; ++r) {
      const double x = input_value(seed, r, i);
      sum += x;
      magnitude += std::fabs(x);
    }
    if (!(std::fabs(result[k] - sum) <= tol.relative * magnitude + tol.absolute)) {
      if (++wrong <= 3)
        ADD_FAILURE() << "element " << i << ": got " << result[k] << ", reference " << sum;
    }
  }
  return wrong;
}

inline bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

// Every host algorithm of the registry that runs on the in-process transport
// (`mpi` needs mpirun and is cross-checked in the MPI test; GPU backends have
// tests of their own).
inline std::vector<std::string> inproc_algorithms() {
  std::vector<std::string> names;
  for (const auto& name : allreducer_names())
    if (name != "mpi") names.push_back(name);
  return names;
}

// Balanced chunk sizes, re-derived here rather than taken from Partition.
inline int64_t chunk_size(int64_t count, int parts, int i) {
  return count / parts + (i < count % parts ? 1 : 0);
}

}  // namespace psar::testing
