#pragma once
// The element type a collective puts on the wire (sync.dtype). Callers hold
// float32 vectors; with bf16 or fp16 every message carries the vector's slice
// converted to that type (round to nearest, ties to even), and the receiver
// widens it back to float32 before adding or storing it, so sums accumulate
// in float32 unless the caller asks for the sum in the element type
// (sync.accumulate: dtype), which rounds every partial sum too. A rank keeps
// what it sends: sending a slice in bf16 rounds the sender's own copy of it
// to bf16 as well, so partners that add each other's values (butterfly) add
// the same two numbers and every rank ends with identical bits.
//
// bf16: float32's sign and exponent with 7 fraction bits (range of float32,
// 2⁻⁸ relative precision); fp16: IEEE binary16 (5 exponent bits, 10 fraction
// bits: ±65504, subnormals below 2⁻¹⁴; larger values round to ±inf).

#include <cstdint>
#include <string>
#include <vector>

namespace psar {

enum class ElementType : uint8_t { kFp32, kBf16, kFp16 };

inline int element_size(ElementType t) { return t == ElementType::kFp32 ? 4 : 2; }
const char* element_type_name(ElementType t);
// "fp32" | "bf16" | "fp16"; ConfigError naming `what` (the key) otherwise.
// What sync.dtype accepts, in parse_element_type's order.
std::vector<std::string> element_type_names();
ElementType parse_element_type(const std::string& name, const std::string& what = "sync.dtype");

uint16_t float_to_bf16(float x);
float bf16_to_float(uint16_t x);
uint16_t float_to_fp16(float x);
float fp16_to_float(uint16_t x);

// Vectors of n elements. `wire` points to n elements of type t.
void encode(ElementType t, const float* src, void* wire, int64_t n);
// encode, and `data` becomes what went on the wire (round_to), in one pass:
// a rank keeps what it sends.
void encode_kept(ElementType t, float* data, void* wire, int64_t n);
void decode(ElementType t, const void* wire, float* dst, int64_t n);
void decode_add(ElementType t, const void* wire, float* dst, int64_t n);  // dst += wire
// data = widen(narrow(data)): what a value becomes on the wire (no-op for fp32).
void round_to(ElementType t, float* data, int64_t n);

}  // namespace psar
