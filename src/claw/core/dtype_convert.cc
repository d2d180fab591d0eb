#include "claw/core/dtype_convert.h"

#include <cmath>
#include <cstring>
#include <limits>
#if defined(__F16C__)
#include <immintrin.h>
#endif

#include "claw/core/error.h"
#include "claw/core/storage.h"

namespace claw {
namespace {

// A small binary float format: E exponent bits, M mantissa bits.
struct Format {
  int E, M, bias;
  bool ieee;  // the all-ones exponent holds inf and NaN (else only S.1..1.1..1 is NaN)
  uint32_t nan() const { return (1u << (E + M)) - 1; }
  double max_finite() const {
    const int emax = (ieee ? (1 << E) - 2 : (1 << E) - 1) - bias;
    const double mant = ieee ? 2.0 - std::ldexp(1.0, -M) : 2.0 - std::ldexp(1.0, 1 - M);
    return std::ldexp(mant, emax);
  }
};
constexpr Format kF16{5, 10, 15, true}, kE4M3{4, 3, 7, false}, kE5M2{5, 2, 15, true};

float decode(const Format& f, uint32_t h) {
  const uint32_t sign = h >> (f.E + f.M), exp = (h >> f.M) & ((1u << f.E) - 1), mant = h & ((1u << f.M) - 1);
  const double s = sign ? -1.0 : 1.0;
  if (f.ieee && exp == (1u << f.E) - 1)
    return static_cast<float>(mant ? std::numeric_limits<double>::quiet_NaN() : s * HUGE_VAL);
  if (!f.ieee && (h & f.nan()) == f.nan()) return std::numeric_limits<float>::quiet_NaN();
  if (exp == 0) return static_cast<float>(s * std::ldexp(static_cast<double>(mant), 1 - f.bias - f.M));
  return static_cast<float>(s * std::ldexp(static_cast<double>(mant + (1u << f.M)), static_cast<int>(exp) - f.bias - f.M));
}

// Round to nearest even at the format's quantum for |x|'s binade (the
// subnormal quantum below the normal range); x / quantum is exact in double.
uint32_t encode(const Format& f, float x) {
  const uint32_t sign = std::signbit(x) ? 1u << (f.E + f.M) : 0u;
  if (std::isnan(x)) return sign | f.nan();
  const double a = std::fabs(static_cast<double>(x)), max = f.max_finite();
  const uint32_t inf_or_max = f.ieee ? ((1u << f.E) - 1) << f.M : f.nan() - 1;
  if (std::isinf(a)) return sign | inf_or_max;
  if (a == 0) return sign;
  const int min_exp = 1 - f.bias;
  const int e = std::max(std::ilogb(a), min_exp);
  const double quantum = std::ldexp(1.0, e - f.M);
  const double v = std::nearbyint(a / quantum) * quantum;  // default rounding mode: ties to even
  if (v > max) return sign | inf_or_max;  // IEEE: rounds past the largest finite to inf; FN: saturates
  if (v == 0) return sign;
  const int ve = std::ilogb(v);
  if (ve < min_exp) return sign | static_cast<uint32_t>(v / std::ldexp(1.0, min_exp - f.M));
  const uint32_t mant = static_cast<uint32_t>(v / std::ldexp(1.0, ve - f.M)) - (1u << f.M);
  return sign | (static_cast<uint32_t>(ve + f.bias) << f.M) | mant;
}

template <typename Src, typename Dst, typename F>
void map(const void* src, void* dst, int64_t n, F f) {
  const Src* s = static_cast<const Src*>(src);
  Dst* d = static_cast<Dst*>(dst);
  for (int64_t i = 0; i < n; ++i) d[i] = f(s[i]);
}

float load(DType t, const void* p, int64_t i) {
  switch (t) {
    case DType::f32: return static_cast<const float*>(p)[i];
    case DType::f64: return static_cast<float>(static_cast<const double*>(p)[i]);
    case DType::bf16: return bf16_to_f32(static_cast<const uint16_t*>(p)[i]);
    case DType::f16: return f16_to_f32(static_cast<const uint16_t*>(p)[i]);
    case DType::e4m3: return e4m3_to_f32(static_cast<const uint8_t*>(p)[i]);
    case DType::e5m2: return e5m2_to_f32(static_cast<const uint8_t*>(p)[i]);
    default: break;
  }
  CLAW_CHECK(false, "not a floating-point dtype: {}", dtype_name(t));
  return 0;
}
}  // namespace

// Bulk f16 <-> f32 with the F16C instructions where the build targets them
// (round to nearest even, subnormals and infinities as IEEE); eight lanes
// holding a NaN take the scalar path, which gives the codec's NaN bits.
void f16_to_f32_bulk(const uint16_t* s, float* d, int64_t n) {
  int64_t i = 0;
#if defined(__F16C__)
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i)));
    if (_mm256_movemask_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q)) != 0) {
      for (int k = 0; k < 8; ++k) d[i + k] = f16_to_f32(s[i + k]);
      continue;
    }
    _mm256_storeu_ps(d + i, v);
  }
#endif
  for (; i < n; ++i) d[i] = f16_to_f32(s[i]);
}

void f32_to_f16_bulk(const float* s, uint16_t* d, int64_t n) {
  int64_t i = 0;
#if defined(__F16C__)
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(s + i);
    if (_mm256_movemask_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q)) != 0) {
      for (int k = 0; k < 8; ++k) d[i + k] = f32_to_f16(s[i + k]);
      continue;
    }
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d + i), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
#endif
  for (; i < n; ++i) d[i] = f32_to_f16(s[i]);
}

bool is_float_dtype(DType t) {
  switch (t) {
    case DType::f32: case DType::f64: case DType::bf16: case DType::f16: case DType::e4m3: case DType::e5m2:
      return true;
    default:
      return false;
  }
}

float bf16_to_f32(uint16_t h) { return bf16_bits_to_f32(h); }
uint16_t f32_to_bf16(float x) { return f32_to_bf16_bits(x); }

float f16_to_f32_reference(uint16_t h) { return decode(kF16, h); }
uint16_t f32_to_f16_reference(float x) { return static_cast<uint16_t>(encode(kF16, x)); }
float e4m3_to_f32(uint8_t h) { return decode(kE4M3, h); }
uint8_t f32_to_e4m3(float x) { return static_cast<uint8_t>(encode(kE4M3, x)); }
float e5m2_to_f32(uint8_t h) { return decode(kE5M2, h); }
uint8_t f32_to_e5m2(float x) { return static_cast<uint8_t>(encode(kE5M2, x)); }

void convert(DType from, const void* src, DType to, void* dst, int64_t n) {
  if (!is_float_dtype(from) || !is_float_dtype(to))
    fail("cannot convert {} to {}: only floating-point types (f32, f64, bf16, f16, fp8_e4m3, fp8_e5m2) convert",
         dtype_name(from), dtype_name(to));
  if (from == to) {
    std::memcpy(dst, src, static_cast<size_t>(n) * dtype_size(from));
    return;
  }
  if (from == DType::f64 && to == DType::f32) return map<double, float>(src, dst, n, [](double v) { return float(v); });
  // The 16-bit pairs the trainer converts in bulk, without the per-element switch.
  if (from == DType::f16 && to == DType::f32)
    return f16_to_f32_bulk(static_cast<const uint16_t*>(src), static_cast<float*>(dst), n);
  if (from == DType::f32 && to == DType::f16)
    return f32_to_f16_bulk(static_cast<const float*>(src), static_cast<uint16_t*>(dst), n);
  if (from == DType::bf16 && to == DType::f32) return map<uint16_t, float>(src, dst, n, bf16_bits_to_f32);
  if (from == DType::f32 && to == DType::bf16) return map<float, uint16_t>(src, dst, n, f32_to_bf16_bits);
  switch (to) {
    case DType::f32: for (int64_t i = 0; i < n; ++i) static_cast<float*>(dst)[i] = load(from, src, i); return;
    case DType::f64:
      if (from == DType::f32) return map<float, double>(src, dst, n, [](float v) { return double(v); });
      for (int64_t i = 0; i < n; ++i) static_cast<double*>(dst)[i] = load(from, src, i);
      return;
    case DType::bf16: for (int64_t i = 0; i < n; ++i) static_cast<uint16_t*>(dst)[i] = f32_to_bf16(load(from, src, i)); return;
    case DType::f16: for (int64_t i = 0; i < n; ++i) static_cast<uint16_t*>(dst)[i] = f32_to_f16(load(from, src, i)); return;
    case DType::e4m3: for (int64_t i = 0; i < n; ++i) static_cast<uint8_t*>(dst)[i] = f32_to_e4m3(load(from, src, i)); return;
    case DType::e5m2: for (int64_t i = 0; i < n; ++i) static_cast<uint8_t*>(dst)[i] = f32_to_e5m2(load(from, src, i)); return;
    default: break;
  }
}

}  // namespace claw
