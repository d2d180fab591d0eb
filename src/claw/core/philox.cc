// RandomStream's normal deviates: Box-Muller with a logarithm and a cosine
// of our own. libm's are correctly rounded or nearly so, but they are calls
// the compiler cannot vectorise, and a vectorised libm (libmvec) rounds
// differently from the scalar one and per instruction set: initial weights
// would then depend on the CPU that drew them. These are plain double
// arithmetic, every multiply-add an explicit fma and this file compiled with
// -ffp-contract=off (core/CMakeLists.txt), so the value of each expression is
// fixed by IEEE 754 whatever the vector width; the loop in normals() runs
// several indices per instruction where the CPU allows.
//
// Accuracy (tests/unit/core/test_philox.cc checks it against libm over
// millions of arguments): the logarithm within 2 ulp, the cosine within
// 2e-16 absolute; the deviate is rounded to float, so it almost always equals
// the float of the exact Box-Muller value.
#include "claw/core/philox.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>

namespace claw {
namespace {

// c[0] x^(n-1) + ... + c[n-1] by Horner's rule, an fma a step.
template <size_t N>
[[gnu::always_inline]] inline double horner(double x, const std::array<double, N>& c) {
  double p = c[0];
  for (size_t k = 1; k < N; ++k) p = std::fma(p, x, c[k]);
  return p;
}

// ln((b + 1) / 2^32), for the Box-Muller radius: b + 1 = m 2^k with m in
// [sqrt(1/2), sqrt(2)), ln m = 2 atanh(s) with s = (m - 1) / (m + 1),
// |s| < 0.1716, whose odd series to s^21 leaves under 1e-17 relative.
[[gnu::always_inline]] inline double log_unit(uint32_t b) {
  constexpr double kLn2Hi = 6.93147180369123816490e-01;  // ln 2's leading 32 bits: k * kLn2Hi is exact
  constexpr double kLn2Lo = 1.90821492927058770002e-10;  // ln 2 - kLn2Hi
  constexpr double kSqrt2 = 1.41421356237309504880;
  const double x = static_cast<double>(b) + 1.0;  // exact: 1 .. 2^32
  const uint64_t bits = std::bit_cast<uint64_t>(x);
  int64_t k = static_cast<int64_t>(bits >> 52) - 1023;
  double m = std::bit_cast<double>((bits & 0x000FFFFFFFFFFFFFull) | 0x3FF0000000000000ull);  // [1, 2)
  const bool high = m >= kSqrt2;
  m = high ? m * 0.5 : m;  // exact
  k = high ? k + 1 : k;
  const double f = m - 1.0;  // exact (Sterbenz)
  const double s = f / (2.0 + f);
  const double z = s * s;
  const double p = horner(z, std::array{1.0 / 21.0, 1.0 / 19.0, 1.0 / 17.0, 1.0 / 15.0, 1.0 / 13.0, 1.0 / 11.0,
                                        1.0 / 9.0, 1.0 / 7.0, 1.0 / 5.0, 1.0 / 3.0});
  const double ln_m = 2.0 * std::fma(s * z, p, s);  // 2 (s + s^3 p(s^2))
  const double kk = static_cast<double>(k - 32);    // the 2^-32 of u
  return std::fma(kk, kLn2Hi, std::fma(kk, kLn2Lo, ln_m));
}

// cos(2 pi b / 2^32): the top two bits of b pick the quadrant, the other 30
// the exact fraction f of it; cos and sin of (pi / 2) min(f, 1 - f), an angle
// in [0, pi / 4], by their Taylor series to t^16 and t^17 (next terms under
// 3e-18).
[[gnu::always_inline]] inline double cos_turn(uint32_t b) {
  constexpr double kHalfPi = 1.57079632679489661923;
  const uint32_t q = b >> 30;
  const double f = static_cast<double>(b & 0x3FFFFFFFu) * 0x1p-30;  // [0, 1), exact
  const bool mirror = f > 0.5;
  const double t = (mirror ? 1.0 - f : f) * kHalfPi;
  const double t2 = t * t;
  const double c = horner(t2, std::array{1.0 / 20922789888000.0, -1.0 / 87178291200.0, 1.0 / 479001600.0,  // 1/16!, ...
                                         -1.0 / 3628800.0, 1.0 / 40320.0, -1.0 / 720.0, 1.0 / 24.0, -0.5, 1.0});
  const double s = std::fma(horner(t2, std::array{1.0 / 355687428096000.0, -1.0 / 1307674368000.0,  // 1/17!, ...
                                                  1.0 / 6227020800.0, -1.0 / 39916800.0, 1.0 / 362880.0,
                                                  -1.0 / 5040.0, 1.0 / 120.0, -1.0 / 6.0}) * t2,
                            t, t);
  const double cos_f = mirror ? s : c;  // cos(pi/2 f)
  const double sin_f = mirror ? c : s;  // sin(pi/2 f)
  // cos(q pi/2 + x) = cos x, -sin x, -cos x, sin x.
  const double v = (q & 1u) ? sin_f : cos_f;
  return (q == 1u || q == 2u) ? -v : v;
}

[[gnu::always_inline]] inline float box_muller(const Philox::Block& w) {
  return static_cast<float>(std::sqrt(-2.0 * log_unit(w[0])) * cos_turn(w[1]));
}

}  // namespace

double detail::log_unit(uint32_t b) { return claw::log_unit(b); }
double detail::cos_turn(uint32_t b) { return claw::cos_turn(b); }

float RandomStream::normal(uint64_t index) const { return box_muller(block(index)); }

void RandomStream::normals(const uint64_t* index, int64_t n, float* out) const {
  // Philox a round at a time over a block of counters held as four arrays,
  // then the two transforms: loops of plain arithmetic that vectorise.
  constexpr int64_t kBlock = 256;
  alignas(64) uint32_t c0[kBlock], c1[kBlock], c2[kBlock], c3[kBlock];
  for (int64_t b = 0; b < n; b += kBlock) {
    const int64_t m = std::min(kBlock, n - b);
    for (int64_t i = 0; i < m; ++i) {
      c0[i] = static_cast<uint32_t>(index[b + i]);
      c1[i] = static_cast<uint32_t>(index[b + i] >> 32);
      c2[i] = 0;
      c3[i] = 0;
    }
    uint32_t k0 = key0(), k1 = key1();
    for (int round = 0; round < 10; ++round) {
      for (int64_t i = 0; i < m; ++i) {
        const uint64_t p0 = static_cast<uint64_t>(Philox::M0) * c0[i];
        const uint64_t p1 = static_cast<uint64_t>(Philox::M1) * c2[i];
        const uint32_t n0 = static_cast<uint32_t>(p1 >> 32) ^ c1[i] ^ k0;
        const uint32_t n2 = static_cast<uint32_t>(p0 >> 32) ^ c3[i] ^ k1;
        c0[i] = n0;
        c1[i] = static_cast<uint32_t>(p1);
        c2[i] = n2;
        c3[i] = static_cast<uint32_t>(p0);
      }
      k0 += Philox::W0;
      k1 += Philox::W1;
    }
    for (int64_t i = 0; i < m; ++i)
      out[b + i] = static_cast<float>(std::sqrt(-2.0 * log_unit(c0[i])) * cos_turn(c1[i]));
  }
}

}  // namespace claw
