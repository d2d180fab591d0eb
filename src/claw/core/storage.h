// Storage and accumulation types of the kernels.
//
// A kernel is written once over its storage type T (what its tensors hold in
// memory: float, double, bfloat16, float16) and computes in acc_t<T>, the
// accumulation type: T itself for float and double, float for the 16-bit
// types (the rule of mixed-precision training: bf16/f16 operands, fp32
// sums, fp32 statistics and parameter gradients). widen() loads an element
// into acc_t<T> exactly; narrow<T>() stores one, rounding to nearest even as
// core/dtype_convert.h defines it. For float and double both are the identity,
// so a kernel's fp32 path compiles to the code it had before it was generic.
#pragma once

#include <bit>
#include <cstdint>
#include <type_traits>

#include "claw/core/dtype.h"
#include "claw/core/dtype_convert.h"

namespace claw {

template <typename T> struct accumulate_as { using type = T; };
template <> struct accumulate_as<bfloat16> { using type = float; };
template <> struct accumulate_as<float16> { using type = float; };
template <typename T> using acc_t = typename accumulate_as<T>::type;

// Whether T is one of the 16-bit storage-only types.
template <typename T>
inline constexpr bool is_half_storage_v = std::is_same_v<T, bfloat16> || std::is_same_v<T, float16>;

inline float bf16_bits_to_f32(uint16_t h) { return std::bit_cast<float>(static_cast<uint32_t>(h) << 16); }

// Round to nearest even; NaN stays a quiet NaN of the same sign; a carry into
// the exponent rounds up a binade (or to inf), as IEEE narrowing does.
inline uint16_t f32_to_bf16_bits(float x) {
  uint32_t u = std::bit_cast<uint32_t>(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

template <typename T>
inline acc_t<T> widen(T x) {
  if constexpr (std::is_same_v<T, bfloat16>)
    return bf16_bits_to_f32(x.bits);
  else if constexpr (std::is_same_v<T, float16>)
    return f16_to_f32(x.bits);
  else
    return x;
}

template <typename T>
inline T narrow(acc_t<T> x) {
  if constexpr (std::is_same_v<T, bfloat16>)
    return bfloat16{f32_to_bf16_bits(x)};
  else if constexpr (std::is_same_v<T, float16>)
    return float16{f32_to_f16(x)};
  else
    return x;
}

// n elements of `src` widened into `dst` (acc_t<T>), and back with rounding.
template <typename T>
inline void widen_n(const T* src, acc_t<T>* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = widen(src[i]);
}
template <typename T>
inline void narrow_n(const acc_t<T>* src, T* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = narrow<T>(src[i]);
}

}  // namespace claw
