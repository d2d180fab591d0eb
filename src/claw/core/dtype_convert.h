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

#include <cstdint>

#include "claw/core/dtype.h"

namespace claw {

// Whether convert() handles `t` (f32, f64, bf16, f16, e4m3, e5m2).
bool is_float_dtype(DType t);

float bf16_to_f32(uint16_t h);
uint16_t f32_to_bf16(float x);
float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float x);
float e4m3_to_f32(uint8_t h);
uint8_t f32_to_e4m3(float x);
float e5m2_to_f32(uint8_t h);
uint8_t f32_to_e5m2(float x);

// dst[i] = src[i] converted, for n elements of floating-point types. Same
// types copy bytes. Throws claw::Error for a non-float type.
void convert(DType from, const void* src, DType to, void* dst, int64_t n);

}  // namespace claw
