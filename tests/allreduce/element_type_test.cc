// The element conversions (allreduce/element_type.h) against a reference
// rounding written here from the definition: the nearest representable value
// found in double precision among the two neighbours, ties to the one with
// an even last bit; NaN stays NaN, overflow (fp16) goes to infinity.

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "allreduce/element_type.h"
#include "core/errors.h"
#include "core/rng.h"

namespace psar {
namespace {

// bf16: the float's top 16 bits; neighbours are truncation and one ulp up.
uint16_t reference_bf16(float x) {
  const uint32_t u = std::bit_cast<uint32_t>(x);
  const uint16_t down = static_cast<uint16_t>(u >> 16);
  const uint16_t up = static_cast<uint16_t>(down + 1);
  // One ulp past the largest finite is 2¹²⁸ (the rounding boundary to infinity).
  const bool past = (up & 0x7fff) == 0x7f80;
  const double dx = x, d = bf16_to_float(down),
               e = past ? std::copysign(std::ldexp(1.0, 128), dx) : bf16_to_float(up);
  const double to_down = std::fabs(dx - d), to_up = std::fabs(e - dx);
  if (to_down < to_up) return down;
  if (to_up < to_down) return up;
  return (down & 1) == 0 ? down : up;
}

// fp16 by exhaustive nearest search over the 65536 codes would be slow per
// value; instead the value's two neighbours in binary16 from its exponent.
double fp16_value(int sign, int exponent, int fraction) {  // exponent field 0..30
  const double m = exponent == 0 ? fraction / 1024.0 : 1 + fraction / 1024.0;
  return (sign ? -1 : 1) * std::ldexp(m, (exponent == 0 ? 1 : exponent) - 15);
}
uint16_t reference_fp16(float x) {
  const int sign = std::signbit(x) ? 1 : 0;
  const double a = std::fabs(static_cast<double>(x));
  // Largest code with value ≤ a, among finite magnitudes.
  int lo = 0;
  for (int step = 1 << 14; step > 0; step >>= 1)
    if (lo + step <= 0x7bff && fp16_value(0, (lo + step) >> 10, (lo + step) & 1023) <= a) lo += step;
  const double vlo = fp16_value(0, lo >> 10, lo & 1023);
  const double vhi = lo == 0x7bff ? 65536.0 : fp16_value(0, (lo + 1) >> 10, (lo + 1) & 1023);
  int code = a - vlo < vhi - a ? lo : (vhi - a < a - vlo ? lo + 1 : ((lo & 1) == 0 ? lo : lo + 1));
  if (code > 0x7bff) code = 0x7c00;  // rounds past the largest finite: infinity
  return static_cast<uint16_t>((sign << 15) | code);
}

TEST(ElementType, Bf16RoundsToNearestEvenLikeTheReference) {
  for (uint64_t i = 0; i < 200000; ++i) {
    const auto b = Philox::block(7, 0, i);
    const float x = std::bit_cast<float>(static_cast<uint32_t>(b[0]));
    if (std::isnan(x)) {
      EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(x))));
      continue;
    }
    ASSERT_EQ(float_to_bf16(x), reference_bf16(x)) << x;
  }
  // Ties: 1 + 2⁻⁸ lies halfway between 1 and 1 + 2⁻⁷: to the even one, 1.
  EXPECT_EQ(bf16_to_float(float_to_bf16(1.0f + 0x1p-8f)), 1.0f);
  EXPECT_EQ(bf16_to_float(float_to_bf16(1.0f + 3 * 0x1p-8f)), 1.0f + 0x1p-6f);
}

TEST(ElementType, Fp16RoundsToNearestEvenLikeTheReference) {
  for (uint64_t i = 0; i < 100000; ++i) {
    const auto b = Philox::block(8, 0, i);
    // Magnitudes around fp16's range: 2^-30 .. 2^17.
    const float x = std::ldexp(static_cast<float>(b[0] >> 8) * 0x1.0p-24f * ((b[1] & 1) ? -1 : 1),
                               static_cast<int>(b[1] % 48) - 30);
    ASSERT_EQ(float_to_fp16(x), reference_fp16(x)) << x;
  }
  EXPECT_EQ(fp16_to_float(float_to_fp16(1e6f)), std::numeric_limits<float>::infinity());
  EXPECT_EQ(fp16_to_float(float_to_fp16(1.0f + 0x1p-11f)), 1.0f);  // tie to even
}

TEST(ElementType, VectorsRoundTripAndAddInFloat32) {
  const float x[] = {1.0f, -2.5f, 1.0f + 0x1p-8f, 3e-3f};
  for (ElementType t : {ElementType::kFp32, ElementType::kBf16, ElementType::kFp16}) {
    uint16_t wire16[4];
    float wire32[4], back[4], sum[4] = {10, 10, 10, 10}, rounded[4];
    void* wire = t == ElementType::kFp32 ? static_cast<void*>(wire32) : static_cast<void*>(wire16);
    encode(t, x, wire, 4);
    decode(t, wire, back, 4);
    decode_add(t, wire, sum, 4);
    std::copy(std::begin(x), std::end(x), rounded);
    round_to(t, rounded, 4);
    // encode_kept: the same wire bits, and the source becomes what was sent.
    uint16_t kept_wire16[4];
    float kept_wire32[4], kept[4];
    void* kept_wire =
        t == ElementType::kFp32 ? static_cast<void*>(kept_wire32) : static_cast<void*>(kept_wire16);
    std::copy(std::begin(x), std::end(x), kept);
    encode_kept(t, kept, kept_wire, 4);
    EXPECT_EQ(std::memcmp(kept_wire, wire, static_cast<size_t>(4 * element_size(t))), 0)
        << element_type_name(t);
    for (int i = 0; i < 4; ++i) {
      const float expect = t == ElementType::kBf16   ? bf16_to_float(reference_bf16(x[i]))
                           : t == ElementType::kFp16 ? fp16_to_float(reference_fp16(x[i]))
                                                     : x[i];
      EXPECT_EQ(back[i], expect) << element_type_name(t) << " " << i;
      EXPECT_EQ(rounded[i], expect) << element_type_name(t) << " " << i;
      EXPECT_EQ(kept[i], expect) << element_type_name(t) << " " << i;
      EXPECT_EQ(sum[i], 10.0f + expect) << element_type_name(t) << " " << i;
    }
  }
}

TEST(ElementType, UnknownNameIsAConfigErrorNamingTheKeyAndChoices) {
  EXPECT_EQ(parse_element_type("bf16"), ElementType::kBf16);
  try {
    parse_element_type("int8");
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(), "sync.dtype: unknown element type 'int8' (known: fp32, bf16, fp16)");
  }
}

}  // namespace
}  // namespace psar
