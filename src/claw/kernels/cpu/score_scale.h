// How attention turns q . k into a score: S = scale q . k, then, with a soft
// cap c > 0 (Gemma 2's attn_logit_softcapping), S = c tanh(S / c), which
// keeps every score in (-c, c). Its derivative, dS_raw = dS (1 - (S / c)^2),
// needs only the capped score, so backward passes recompute nothing more.
// Converts from a plain scale (no cap), as every kernel took before.
#pragma once

#include <cmath>
#include <cstdint>

namespace claw::kernels {

struct ScoreScale {
  double scale;
  double softcap = 0;  // 0: none
  ScoreScale(double s, double cap = 0) : scale(s), softcap(cap) {}  // NOLINT(google-explicit-constructor)
  bool capped() const { return softcap > 0; }
};

// s[c * ld + r] = cap tanh(s / cap) for columns [c_lo, c_hi) and rows [0, n).
template <typename T>
void soft_cap(T* s, int64_t ld, int64_t c_lo, int64_t c_hi, int64_t n, double cap) {
  const T c = static_cast<T>(cap), inv = static_cast<T>(1.0 / cap);
  for (int64_t col = c_lo; col < c_hi; ++col)
    for (int64_t r = 0; r < n; ++r) s[col * ld + r] = c * std::tanh(s[col * ld + r] * inv);
}

}  // namespace claw::kernels
