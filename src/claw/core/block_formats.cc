#include "claw/core/block_formats.h"

#include <algorithm>
#include <cfloat>
#include <limits>

#include "claw/core/dtype_convert.h"
#include "claw/core/error.h"

namespace claw {
namespace {

constexpr float kE2M1[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
constexpr uint8_t kE8M0Nan = 0xff;
constexpr uint8_t kE4M3Nan = 0x7f;

// The largest magnitude of x[0, n), NaN when any element is NaN or inf.
float block_amax(const float* x, int64_t n) {
  float amax = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float a = std::fabs(x[i]);
    if (!(a <= FLT_MAX)) return std::numeric_limits<float>::quiet_NaN();
    amax = std::max(amax, a);
  }
  return amax;
}

}  // namespace

const char* elem_format_name(ElemFormat f) {
  switch (f) {
    case ElemFormat::e4m3: return "e4m3";
    case ElemFormat::e5m2: return "e5m2";
    case ElemFormat::e2m1: return "e2m1";
    case ElemFormat::f16: return "f16";
  }
  return "?";
}

uint8_t f32_to_e2m1(float x) {
  const uint8_t sign = std::signbit(x) ? 0x8 : 0x0;
  if (std::isnan(x)) return 0;
  const float v = std::fabs(quantize_rne(ElemFormat::e2m1, x));
  for (uint8_t c = 0; c < 8; ++c)
    if (kE2M1[c] == v) return sign | c;
  CLAW_CHECK(false, "e2m1 rounding gave {}, not a value of the format", v);
  return 0;
}

float e2m1_to_f32(uint8_t h) { return (h & 0x8 ? -1.0f : 1.0f) * kE2M1[h & 0x7]; }

float e8m0_to_f32(uint8_t h) {
  if (h == kE8M0Nan) return std::numeric_limits<float>::quiet_NaN();
  return std::ldexp(1.0f, static_cast<int>(h) - 127);
}

uint8_t elem_code(ElemFormat f, float v) {
  switch (f) {
    case ElemFormat::e4m3: return f32_to_e4m3(v);
    case ElemFormat::e5m2: return f32_to_e5m2(v);
    case ElemFormat::e2m1: return f32_to_e2m1(v);
    case ElemFormat::f16: break;
  }
  CLAW_CHECK(false, "no one-byte code for {}", elem_format_name(f));
  return 0;
}

float elem_value(ElemFormat f, uint8_t code) {
  switch (f) {
    case ElemFormat::e4m3: return e4m3_to_f32(code);
    case ElemFormat::e5m2: return e5m2_to_f32(code);
    case ElemFormat::e2m1: return e2m1_to_f32(code);
    case ElemFormat::f16: break;
  }
  CLAW_CHECK(false, "no one-byte code for {}", elem_format_name(f));
  return 0;
}

uint8_t mx_scale_code(ElemFormat elem, float amax, MxScaleRule rule) {
  if (std::isnan(amax) || std::isinf(amax)) return kE8M0Nan;
  if (amax == 0) return 0;
  const ElemSpec s = elem_spec(elem);
  int e = std::ilogb(amax) - s.emax;
  // rceil: the smallest power of two X with amax / X <= max (exact: X is a power of two).
  if (rule == MxScaleRule::rceil && std::ldexp(static_cast<double>(amax), -e) > s.max) ++e;
  e = std::clamp(e, -127, 127);
  return static_cast<uint8_t>(e + 127);
}

void mx_quantize(ElemFormat elem, const float* x, int64_t n, uint8_t* codes, uint8_t* scales, int block,
                 MxScaleRule rule) {
  CLAW_CHECK(block > 0, "MX block size {}", block);
  for (int64_t b0 = 0, bi = 0; b0 < n; b0 += block, ++bi) {
    const int64_t len = std::min<int64_t>(block, n - b0);
    const uint8_t sc = mx_scale_code(elem, block_amax(x + b0, len), rule);
    scales[bi] = sc;
    const int shift = 127 - static_cast<int>(sc);  // V / X = V * 2^shift
    for (int64_t i = 0; i < len; ++i)
      codes[b0 + i] = sc == kE8M0Nan ? 0 : elem_code(elem, quantize_rne(elem, static_cast<float>(std::ldexp(
                                                                               static_cast<double>(x[b0 + i]), shift))));
  }
}

void mx_dequantize(ElemFormat elem, const uint8_t* codes, const uint8_t* scales, int64_t n, float* x, int block) {
  for (int64_t i = 0; i < n; ++i) {
    const uint8_t sc = scales[i / block];
    x[i] = sc == kE8M0Nan ? std::numeric_limits<float>::quiet_NaN()
                          : static_cast<float>(std::ldexp(static_cast<double>(elem_value(elem, codes[i])), sc - 127));
  }
}

float nvfp4_tensor_scale(float amax) {
  if (!(amax > 0) || !(amax <= FLT_MAX)) return 1.0f;
  return std::min(448.0f * 6.0f / amax, FLT_MAX);
}

void nvfp4_quantize(const float* x, int64_t n, float tensor_amax, uint8_t* codes, uint8_t* scales,
                    const float* uniform) {
  const float s_enc = nvfp4_tensor_scale(tensor_amax);
  for (int64_t b0 = 0, bi = 0; b0 < n; b0 += 16, ++bi) {
    const int64_t len = std::min<int64_t>(16, n - b0);
    const float amax = block_amax(x + b0, len);
    const uint8_t sc = std::isnan(amax) ? kE4M3Nan : f32_to_e4m3(amax / 6.0f * s_enc);
    scales[bi] = sc;
    const float d = e4m3_to_f32(sc);
    const float m = d == 0 || std::isnan(d) ? 0.0f : s_enc / d;
    for (int64_t i = 0; i < len; ++i) {
      const float v = x[b0 + i] * m;
      codes[b0 + i] = f32_to_e2m1(uniform ? quantize_stochastic(ElemFormat::e2m1, v, uniform[b0 + i])
                                          : quantize_rne(ElemFormat::e2m1, v));
    }
  }
}

void nvfp4_dequantize(const uint8_t* codes, const uint8_t* scales, int64_t n, float tensor_amax, float* x) {
  const float s_enc = nvfp4_tensor_scale(tensor_amax);
  for (int64_t i = 0; i < n; ++i) x[i] = e2m1_to_f32(codes[i]) * e4m3_to_f32(scales[i / 16]) / s_enc;
}

}  // namespace claw
