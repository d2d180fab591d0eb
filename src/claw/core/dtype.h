// Element types. fp32 is the default everywhere and fp64 serves the
// finite-difference tests; bf16 and f16 are storage types of the kernels
// (core/storage.h), fp8 a checkpoint and conversion format so far.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace claw {

enum class DType : uint8_t { f32, f64, bf16, f16, e4m3, e5m2, i32, i64, u16, u8 };

constexpr size_t dtype_size(DType t) {
  switch (t) {
    case DType::f64: case DType::i64: return 8;
    case DType::f32: case DType::i32: return 4;
    case DType::bf16: case DType::f16: case DType::u16: return 2;
    case DType::e4m3: case DType::e5m2: case DType::u8: return 1;
  }
  return 0;
}

constexpr std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::f64: return "f64";
    case DType::bf16: return "bf16";
    case DType::f16: return "f16";
    case DType::e4m3: return "fp8_e4m3";
    case DType::e5m2: return "fp8_e5m2";
    case DType::i32: return "i32";
    case DType::i64: return "i64";
    case DType::u16: return "u16";
    case DType::u8: return "u8";
  }
  return "?";
}

template <typename T> struct dtype_of;
template <> struct dtype_of<float> { static constexpr DType value = DType::f32; };
template <> struct dtype_of<double> { static constexpr DType value = DType::f64; };
template <> struct dtype_of<int32_t> { static constexpr DType value = DType::i32; };
template <> struct dtype_of<int64_t> { static constexpr DType value = DType::i64; };
template <> struct dtype_of<uint16_t> { static constexpr DType value = DType::u16; };
template <> struct dtype_of<uint8_t> { static constexpr DType value = DType::u8; };

// 16-bit floating-point storage types: raw bits, no arithmetic. Kernels
// widen them to their accumulation type on load and round on store
// (core/storage.h).
struct bfloat16 {
  uint16_t bits = 0;
};
struct float16 {
  uint16_t bits = 0;
};
template <> struct dtype_of<bfloat16> { static constexpr DType value = DType::bf16; };
template <> struct dtype_of<float16> { static constexpr DType value = DType::f16; };

}  // namespace claw
