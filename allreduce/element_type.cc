#include "allreduce/element_type.h"

#include <bit>
#include <cstring>

#include "core/errors.h"
#include "core/ops.h"

namespace psar {

const char* element_type_name(ElementType t) {
  switch (t) {
    case ElementType::kFp32: return "fp32";
    case ElementType::kBf16: return "bf16";
    case ElementType::kFp16: return "fp16";
  }
  return "?";
}

namespace {
constexpr ElementType kElementTypes[] = {ElementType::kFp32, ElementType::kBf16,
                                         ElementType::kFp16};
}  // namespace

std::vector<std::string> element_type_names() {
  std::vector<std::string> names;
  for (ElementType t : kElementTypes) names.emplace_back(element_type_name(t));
  return names;
}

ElementType parse_element_type(const std::string& name, const std::string& what) {
  for (ElementType t : kElementTypes)
    if (name == element_type_name(t)) return t;
  throw ConfigError(what + ": unknown element type '" + name + "' (known: fp32, bf16, fp16)");
}

namespace {
// The upper 16 bits of the float, rounded to nearest even on the 16 dropped
// bits; a NaN stays a (quiet) NaN instead of rounding into infinity.
// Branch-free, so that the loops below vectorize.
inline uint16_t to_bf16(float x) {
  const uint32_t u = std::bit_cast<uint32_t>(x);
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  const uint32_t nan = (u >> 16) | 0x40u;
  return static_cast<uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
}
inline float from_bf16(uint16_t x) { return std::bit_cast<float>(static_cast<uint32_t>(x) << 16); }
}  // namespace

// The loops: built for AVX2 and the baseline, picked at load time (as the
// reductions of core/ops.cc).
#define PSAR_CONVERSION_KERNEL __attribute__((target_clones("avx2", "default")))

uint16_t float_to_bf16(float x) { return to_bf16(x); }

float bf16_to_float(uint16_t x) { return from_bf16(x); }

// _Float16 conversions are IEEE's (round to nearest even, overflow to inf,
// gradual underflow) in GCC and Clang on x86-64 and AArch64.
uint16_t float_to_fp16(float x) { return std::bit_cast<uint16_t>(static_cast<_Float16>(x)); }
float fp16_to_float(uint16_t x) { return static_cast<float>(std::bit_cast<_Float16>(x)); }

PSAR_CONVERSION_KERNEL
void encode(ElementType t, const float* src, void* wire, int64_t n) {
  if (t == ElementType::kFp32) {
    if (n > 0) std::memcpy(wire, src, static_cast<size_t>(n) * sizeof(float));
    return;
  }
  auto* w = static_cast<uint16_t*>(wire);
  if (t == ElementType::kBf16)
    for (int64_t i = 0; i < n; ++i) w[i] = to_bf16(src[i]);
  else
    for (int64_t i = 0; i < n; ++i) w[i] = std::bit_cast<uint16_t>(static_cast<_Float16>(src[i]));
}

PSAR_CONVERSION_KERNEL
void encode_kept(ElementType t, float* data, void* wire, int64_t n) {
  if (t == ElementType::kFp32) {
    if (n > 0) std::memcpy(wire, data, static_cast<size_t>(n) * sizeof(float));
    return;
  }
  auto* w = static_cast<uint16_t*>(wire);
  if (t == ElementType::kBf16)
    for (int64_t i = 0; i < n; ++i) {
      w[i] = to_bf16(data[i]);
      data[i] = from_bf16(w[i]);
    }
  else
    for (int64_t i = 0; i < n; ++i) {
      const _Float16 h = static_cast<_Float16>(data[i]);
      w[i] = std::bit_cast<uint16_t>(h);
      data[i] = static_cast<float>(h);
    }
}

PSAR_CONVERSION_KERNEL
void decode(ElementType t, const void* wire, float* dst, int64_t n) {
  if (t == ElementType::kFp32) {
    if (n > 0) std::memcpy(dst, wire, static_cast<size_t>(n) * sizeof(float));
    return;
  }
  const auto* w = static_cast<const uint16_t*>(wire);
  if (t == ElementType::kBf16)
    for (int64_t i = 0; i < n; ++i) dst[i] = from_bf16(w[i]);
  else
    for (int64_t i = 0; i < n; ++i) dst[i] = fp16_to_float(w[i]);
}

PSAR_CONVERSION_KERNEL
void decode_add(ElementType t, const void* wire, float* dst, int64_t n) {
  if (t == ElementType::kFp32) {
    ops::add_inplace(dst, static_cast<const float*>(wire), n);
    return;
  }
  const auto* w = static_cast<const uint16_t*>(wire);
  if (t == ElementType::kBf16)
    for (int64_t i = 0; i < n; ++i) dst[i] += from_bf16(w[i]);
  else
    for (int64_t i = 0; i < n; ++i) dst[i] += fp16_to_float(w[i]);
}

PSAR_CONVERSION_KERNEL
void round_to(ElementType t, float* data, int64_t n) {
  if (t == ElementType::kBf16)
    for (int64_t i = 0; i < n; ++i) data[i] = from_bf16(to_bf16(data[i]));
  else if (t == ElementType::kFp16)
    for (int64_t i = 0; i < n; ++i) data[i] = fp16_to_float(float_to_fp16(data[i]));
}

}  // namespace psar
