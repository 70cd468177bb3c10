#pragma once
// Counter-based random numbers (Philox-4x32-10, Salmon et al., SC'11).
// A value is a pure function of (seed, stream, index): every rank that asks
// for parameter element i of stream s gets the same number, whatever else it
// drew before. That is what makes replicas identical and lets a tensor-parallel
// shard or a dropout mask match the serial model bit for bit.

#include <array>
#include <cmath>
#include <cstdint>
#include <span>
#include <string_view>

// block() and uniform() also compile as CUDA device code (core/ops_cuda.cu,
// built with --expt-relaxed-constexpr for std::array), so a dropout mask on a
// GPU is the CPU's mask.
#if defined(__CUDACC__)
#define PSAR_HOST_DEVICE __host__ __device__
#else
#define PSAR_HOST_DEVICE
#endif

namespace psar {

class Philox {
 public:
  // One block of four 32-bit words for counter (index, stream).
  PSAR_HOST_DEVICE static std::array<uint32_t, 4> block(uint64_t seed, uint64_t stream,
                                                         uint64_t index) {
    uint32_t c0 = static_cast<uint32_t>(index), c1 = static_cast<uint32_t>(index >> 32);
    uint32_t c2 = static_cast<uint32_t>(stream), c3 = static_cast<uint32_t>(stream >> 32);
    uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
    for (int round = 0; round < 10; ++round) {
      const uint64_t p0 = uint64_t{0xD2511F53} * c0;
      const uint64_t p1 = uint64_t{0xCD9E8D57} * c2;
      const uint32_t n0 = static_cast<uint32_t>(p1 >> 32) ^ c1 ^ k0;
      const uint32_t n2 = static_cast<uint32_t>(p0 >> 32) ^ c3 ^ k1;
      c1 = static_cast<uint32_t>(p1);
      c3 = static_cast<uint32_t>(p0);
      c0 = n0;
      c2 = n2;
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    return {c0, c1, c2, c3};
  }

  // Uniform in [0, 1) from the first word of the block.
  PSAR_HOST_DEVICE static float uniform(uint64_t seed, uint64_t stream, uint64_t index) {
    return static_cast<float>(block(seed, stream, index)[0] >> 8) * 0x1.0p-24f;
  }

  // Standard normal by Box-Muller over the block's first two words.
  static float normal(uint64_t seed, uint64_t stream, uint64_t index) {
    const auto b = block(seed, stream, index);
    const double u1 = (static_cast<double>(b[0]) + 1.0) * 0x1.0p-32;  // (0, 1]
    const double u2 = static_cast<double>(b[1]) * 0x1.0p-32;
    return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
  }

  // Fill with N(0, stddev^2); element i of the span is index (first + i).
  static void fill_normal(std::span<float> out, float stddev, uint64_t seed, uint64_t stream,
                          uint64_t first = 0) {
    for (size_t i = 0; i < out.size(); ++i) out[i] = stddev * normal(seed, stream, first + i);
  }
  static void fill_uniform(std::span<float> out, float lo, float hi, uint64_t seed,
                           uint64_t stream, uint64_t first = 0) {
    for (size_t i = 0; i < out.size(); ++i)
      out[i] = lo + (hi - lo) * uniform(seed, stream, first + i);
  }
};

// Stable 64-bit hash of a name, for deriving a stream id from a parameter name.
constexpr uint64_t fnv1a(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (char c : s) h = (h ^ static_cast<uint8_t>(c)) * 0x100000001b3ull;
  return h;
}

}  // namespace psar
