// Branch-free, vectorisable transcendental functions for fp32 kernels.
//
// glibc's expf is not vectorised by GCC without -ffast-math, and softmax,
// cross-entropy, GELU and SiLU call exp once per element (cross-entropy alone
// ~10^8 times per GPT-2 step). These inline versions compile to straight-line
// SIMD inside a loop. For double they defer to <cmath>: the fp64 path exists
// for finite-difference tests, where exactness matters and speed does not.
//
// exp: x = n ln2 + r, |r| <= ln2/2 (Cody-Waite split of ln2), then a degree-7
// Taylor polynomial for e^r (truncation < 5e-9 relative, below fp32 rounding)
// scaled by 2^n through the exponent bits. Inputs below -87.3 (including
// -inf) return 0; above 88.7 return ~3.4e38 (float max range).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace claw::kernels {

// The parts of fast_exp shared with explicit-SIMD callers (attention.cc's
// whole-vector exp), so both compute bitwise the same values.
namespace exp_detail {
inline constexpr float kLo = -87.3f, kHi = 88.7f;
inline constexpr float kLog2e = 1.44269504088896341f;
inline constexpr float kLn2Hi = 0.693359375f;     // exact in fp32: n * kLn2Hi has no rounding error
inline constexpr float kLn2Lo = -2.12194440e-4f;  // ln2 - kLn2Hi

// r = x - n ln2 for an integer-valued n (Cody-Waite).
template <typename V>
inline V reduce(V x, V n) {
  V r = x - n * kLn2Hi;
  return r - n * kLn2Lo;
}

// e^r for |r| <= ln2/2: the degree-7 Taylor polynomial by Horner's rule.
// V is float or a GCC vector of floats.
template <typename V>
inline V exp_reduced(V r) {
  V p = r * (1.0f / 5040.0f) + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  return p * r + 1.0f;
}
}  // namespace exp_detail

inline float fast_exp(float x) {
  using namespace exp_detail;
  float xc = x > kHi ? kHi : (x < kLo ? kLo : x);
  float n = std::nearbyint(xc * kLog2e);
  float p = exp_reduced(reduce(xc, n));
  int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  float y = p * scale;
  return x < kLo ? 0.0f : y;
}
inline double fast_exp(double x) { return std::exp(x); }

inline float fast_tanh(float x) {
  // tanh(x) = 1 - 2 / (e^{2x} + 1): exact limits at +-inf through fast_exp's clamps.
  return 1.0f - 2.0f / (fast_exp(2.0f * x) + 1.0f);
}
inline double fast_tanh(double x) { return std::tanh(x); }

inline float fast_sigmoid(float x) { return 1.0f / (1.0f + fast_exp(-x)); }
inline double fast_sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

// sum_{i<n} term(i) accumulated in double, in 16 interleaved partial sums
// added in a fixed order at the end. A plain loop is not vectorised (that
// would reassociate the sum), and an OpenMP simd reduction whose terms change
// type (fp32 data, double sum) keeps its partials on the stack, ~4x slower;
// independent lanes compile to SIMD register accumulators and give the same
// result on every run.
template <typename F>
inline double lane_sum(int64_t n, F&& term) {
  constexpr int kLanes = 16;
  double acc[kLanes] = {};
  const int64_t full = n - n % kLanes;
  for (int64_t i = 0; i < full; i += kLanes)
    for (int j = 0; j < kLanes; ++j) acc[j] += term(i + j);
  for (int64_t i = full; i < n; ++i) acc[0] += term(i);
  double s = 0.0;
  for (int j = 0; j < kLanes; ++j) s += acc[j];
  return s;
}

}  // namespace claw::kernels
