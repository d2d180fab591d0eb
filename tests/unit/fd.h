// Finite-difference gradient checking for kernel tests.
//
// A kernel y = f(x) is checked through the scalar L(x) = sum_i w_i y_i(x)
// with fixed random weights w (the upstream gradient dy = w). Its analytic
// gradient is backward(dy); the numeric one is the central difference
//   (L(x + h e_j) - L(x - h e_j)) / 2h
// in double precision, whose error is O(h^2) truncation + O(eps/h) rounding:
// with h = 1e-6 and O(1) values both are around 1e-9 relative, so a 1e-6
// tolerance separates rounding from a wrong formula by three orders of magnitude.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <vector>

namespace claw::testing {

inline std::vector<double> random_vector(int64_t n, uint64_t seed, double lo = -1.0, double hi = 1.0) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> v(n);
  for (auto& x : v) x = dist(gen);
  return v;
}

// Largest |analytic - numeric| / max(1, |numeric|) over the checked entries
// of x (all entries, or `max_checks` evenly spaced ones for large inputs).
inline double fd_max_error(std::vector<double>& x, const std::vector<double>& analytic,
                           const std::function<double()>& loss, double h = 1e-6, int64_t max_checks = 4096) {
  int64_t n = static_cast<int64_t>(x.size());
  int64_t stride = std::max<int64_t>(1, n / max_checks);
  double worst = 0.0;
  for (int64_t j = 0; j < n; j += stride) {
    double saved = x[j];
    x[j] = saved + h;
    double lp = loss();
    x[j] = saved - h;
    double lm = loss();
    x[j] = saved;
    double numeric = (lp - lm) / (2 * h);
    double e = std::abs(analytic[j] - numeric) / std::max(1.0, std::abs(numeric));
    if (std::isnan(e)) return e;  // std::max would drop it and hide the failure
    worst = std::max(worst, e);
  }
  return worst;
}

// Largest |a_i - ref_i| / max(floor, |ref_i|): relative error, measured
// absolutely for entries below `floor` (where relative error is meaningless).
template <typename A, typename B>
double max_rel_diff(const std::vector<A>& a, const std::vector<B>& ref, double floor = 1.0) {
  double worst = 0.0;
  for (size_t i = 0; i < ref.size(); ++i) {
    double r = static_cast<double>(ref[i]);
    double e = std::abs(static_cast<double>(a[i]) - r) / std::max(floor, std::abs(r));
    if (std::isnan(e)) return e;  // std::max would drop it and hide the failure
    worst = std::max(worst, e);
  }
  return worst;
}

inline double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

}  // namespace claw::testing
