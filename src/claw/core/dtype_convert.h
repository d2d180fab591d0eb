// Conversions between the floating-point element types of DType, exact where
// the target can hold the value and round-to-nearest-even otherwise.
//
//   bf16      1-8-7,  bias 127, IEEE (inf, NaN): the top half of an f32
//   f16       1-5-10, bias 15,  IEEE (inf, NaN), subnormals
//   fp8 e4m3  1-4-3,  bias 7,   the OCP "FN" variant: no inf, one NaN per sign
//             (S.1111.111), largest finite 448; subnormals down to 2^-9
//   fp8 e5m2  1-5-2,  bias 15,  IEEE (inf, NaN), subnormals down to 2^-16
//
// Narrowing rounds to nearest, ties to even. Out of range: bf16, f16 and
// e5m2 overflow to inf as IEEE does; e4m3 has no inf and saturates finite
// values and infinities to +-448 (Transformer Engine's "satfinite" cast).
// NaN stays NaN. Widening is exact. Checkpoints convert with these when a
// chunk's stored dtype differs from the memory it loads into; the
// mixed-precision kernels use the same definitions.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

#include "claw/core/dtype.h"

namespace claw {

// Whether convert() handles `t` (f32, f64, bf16, f16, e4m3, e5m2).
bool is_float_dtype(DType t);

float bf16_to_f32(uint16_t h);
uint16_t f32_to_bf16(float x);
inline float f16_to_f32(uint16_t h);
inline uint16_t f32_to_f16(float x);
float e4m3_to_f32(uint8_t h);
uint8_t f32_to_e4m3(float x);
float e5m2_to_f32(uint8_t h);
uint8_t f32_to_e5m2(float x);

// dst[i] = src[i] converted, for n elements of floating-point types. Same
// types copy bytes. Throws claw::Error for a non-float type.
void convert(DType from, const void* src, DType to, void* dst, int64_t n);
// convert()'s f16 <-> f32 without its dispatch, for kernels: F16C where
// the build targets it, f16_to_f32 / f32_to_f16 bit for bit (NaNs too).
void f16_to_f32_bulk(const uint16_t* s, float* d, int64_t n);
void f32_to_f16_bulk(const float* s, uint16_t* d, int64_t n);

// f16 through the generic codec every small format uses (the format's
// arithmetic in double): what the inline bit arithmetic below is tested
// against.
float f16_to_f32_reference(uint16_t h);
uint16_t f32_to_f16_reference(float x);

// f16 by bit arithmetic, inline so that element loops (the optimizer's fp16
// masters, the working copies made from them) vectorise; the unit tests hold
// them to the reference codec for every f16 and f32 binade.
inline float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16, em = h & 0x7fffu;
  float a;
  if (em >= 0x7c00u)  // inf, or NaN (a quiet NaN, as the reference decoder gives)
    a = em == 0x7c00u ? std::bit_cast<float>(0x7f800000u) : std::bit_cast<float>(0x7fc00000u);
  else if (em >= 0x0400u)  // normal: rebias the exponent (112 = 127 - 15)
    a = std::bit_cast<float>((em << 13) + (112u << 23));
  else  // subnormal: em x 2^-24, exact
    a = static_cast<float>(em) * 0x1p-24f;
  return std::isnan(a) ? a : std::bit_cast<float>(std::bit_cast<uint32_t>(a) | sign);
}

inline uint16_t f32_to_f16(float x) {
  uint32_t u = std::bit_cast<uint32_t>(x);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  u &= 0x7fffffffu;
  if (u > 0x7f800000u) return sign | 0x7fffu;     // NaN
  if (u >= 0x477ff000u) return sign | 0x7c00u;    // |x| >= 65520 rounds to inf
  if (u >= 0x38800000u) {                         // normal: round the 13 dropped bits to nearest even
    u += ((u >> 13) & 1u) + 0x0fffu - (112u << 23);
    return sign | static_cast<uint16_t>(u >> 13);
  }
  // Subnormal or zero: adding 0.5 (whose ulp is 2^-24, f16's subnormal
  // quantum) rounds |x| to nearest even in the FPU; the low bits count quanta.
  const float t = std::bit_cast<float>(u) + 0.5f;
  return sign | static_cast<uint16_t>(std::bit_cast<uint32_t>(t) - 0x3f000000u);
}

}  // namespace claw
