// Narrow element formats and the block-scaled formats built on them, as the
// FP8/FP4 training recipes use them (model/fp8.h). Elementwise casts with
// IEEE overflow live in dtype_convert.h; here every cast saturates, as
// training casts do (Transformer Engine's "satfinite", the OCP MX spec's
// clamp to the largest normal).
//
//   E4M3  1-4-3, bias 7,  max 448,   subnormals down to 2^-9     (dtype_convert.h)
//   E5M2  1-5-2, bias 15, max 57344, subnormals down to 2^-16    (dtype_convert.h)
//   E2M1  1-2-1, bias 1,  max 6: +-{0, 0.5, 1, 1.5, 2, 3, 4, 6}; no inf, no NaN
//   E8M0  8 exponent bits, bias 127, no sign, no mantissa: 2^(h - 127); 0xFF is NaN
//
// MXFP8 (OCP Microscaling Formats v1.0): blocks of 32 consecutive elements
// share one E8M0 scale X. With amax the block's largest magnitude and emax
// the element format's largest exponent (E4M3 8, E5M2 15, E2M1 2):
//   floor rule (the spec):  X = 2^(floor(log2 amax) - emax), clamped to the
//                           E8M0 range [2^-127, 2^127]; an element of
//                           V / X beyond the format's max saturates.
//   rceil rule:             X = the smallest power of two >= amax / max, so
//                           no element saturates (what NVIDIA's MXFP8
//                           quantisation does).
// A block of zeros gets X = 2^-127; a block holding NaN or inf gets X = NaN
// (0xFF) and decodes to NaN. Elements round to nearest even.
//
// NVFP4: blocks of 16 E2M1 elements with an E4M3 scale each and one fp32
// scale per tensor, s_enc = 448 * 6 / tensor_amax (1 when the amax is 0 or
// not finite, at most FLT_MAX). A block's scale is e4m3(block_amax / 6 * s_enc) (round to
// nearest even, saturating); its elements are e2m1(x * (s_enc / d)) with d
// that scale's value (all zero when d is 0), and decode as e2m1 * d / s_enc.
// A block holding NaN or inf gets the NaN scale (E4M3 0x7f) and decodes to NaN.
// Weights use 2-D blocks of 16 x 16 (one scale per tile, so W and W^T
// quantise alike); gradients round stochastically.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

namespace claw {

enum class ElemFormat : uint8_t { e4m3, e5m2, e2m1, f16 };

const char* elem_format_name(ElemFormat f);

struct ElemSpec {
  int mant;   // mantissa bits
  int emin;   // exponent of the smallest normal
  int emax;   // exponent of the largest normal
  float max;  // largest finite value
};

constexpr ElemSpec elem_spec(ElemFormat f) {
  switch (f) {
    case ElemFormat::e4m3: return {3, -6, 8, 448.0f};
    case ElemFormat::e5m2: return {2, -14, 15, 57344.0f};
    case ElemFormat::e2m1: return {1, 0, 2, 6.0f};
    case ElemFormat::f16: return {10, -14, 15, 65504.0f};
  }
  return {};
}

// x rounded to nearest even among the values of a format with `mant`
// mantissa bits and smallest normal exponent `emin` (subnormals below), with
// no upper limit: |x| / quantum is exact, so rint() does the rounding.
inline float round_to_grid(float x, int mant, int emin) {
  const uint32_t u = std::bit_cast<uint32_t>(x) & 0x7fffffffu;
  int e = static_cast<int>(u >> 23) - 127;
  if (e < emin) e = emin;
  const float quantum = std::bit_cast<float>(static_cast<uint32_t>(e - mant + 127) << 23);
  return std::copysign(std::rint(std::fabs(x) / quantum) * quantum, x);
}

// x as the nearest value of `f` (ties to even), saturating at +-max;
// infinities saturate too and NaN stays NaN. The decoded value, as float.
inline float quantize_rne(ElemFormat f, float x) {
  const ElemSpec s = elem_spec(f);
  const float v = round_to_grid(x, s.mant, s.emin);
  return std::fabs(v) > s.max ? std::copysign(s.max, x) : v;  // NaN compares false and passes through
}

// Stochastic rounding: x goes to the representable value just above |x|
// with probability (|x| - lo) / (hi - lo), else to the one below, so the
// expected result is x. u: uniform in [0, 1). Saturates like quantize_rne.
inline float quantize_stochastic(ElemFormat f, float x, float u) {
  const ElemSpec s = elem_spec(f);
  const float a = std::fabs(x);
  if (!(a < s.max)) return std::isnan(x) ? x : std::copysign(s.max, x);
  int e = static_cast<int>(std::bit_cast<uint32_t>(a) >> 23) - 127;
  if (e < s.emin) e = s.emin;
  const float quantum = std::bit_cast<float>(static_cast<uint32_t>(e - s.mant + 127) << 23);
  const double v = std::floor(static_cast<double>(a / quantum) + u) * quantum;  // a / quantum and the sum are exact
  return std::copysign(std::fmin(static_cast<float>(v), s.max), x);
}

// The exact casts (codes as the formats lay them out).
uint8_t f32_to_e2m1(float x);  // round to nearest even, saturating; NaN has no code: 0 (callers carry NaN in the scale)
float e2m1_to_f32(uint8_t h);  // the low 4 bits
float e8m0_to_f32(uint8_t h);
// The element format's code of an already representable value.
uint8_t elem_code(ElemFormat f, float v);
float elem_value(ElemFormat f, uint8_t code);

enum class MxScaleRule : uint8_t { floor, rceil };

// The E8M0 code of the shared scale of a block whose largest magnitude is amax.
uint8_t mx_scale_code(ElemFormat elem, float amax, MxScaleRule rule);

// MX blocks of `block` (32 for MXFP8/MXFP4) along x[0, n) (the last block may
// be short): codes[n] one element code per byte, scales[ceil(n / block)].
void mx_quantize(ElemFormat elem, const float* x, int64_t n, uint8_t* codes, uint8_t* scales, int block = 32,
                 MxScaleRule rule = MxScaleRule::floor);
void mx_dequantize(ElemFormat elem, const uint8_t* codes, const uint8_t* scales, int64_t n, float* x, int block = 32);

// NVFP4 (above). The per-tensor factor s_enc for a tensor whose largest magnitude is amax.
float nvfp4_tensor_scale(float amax);
// Blocks of 16 along x[0, n): codes[n], scales[ceil(n / 16)] (E4M3 codes).
// uniform: null for round to nearest even, else n uniforms in [0, 1) for
// stochastic rounding of the elements.
void nvfp4_quantize(const float* x, int64_t n, float tensor_amax, uint8_t* codes, uint8_t* scales,
                    const float* uniform = nullptr);
void nvfp4_dequantize(const uint8_t* codes, const uint8_t* scales, int64_t n, float tensor_amax, float* x);

}  // namespace claw
