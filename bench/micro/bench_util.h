// Timing helpers shared by the micro-benchmarks.
#pragma once

#include <algorithm>
#include <chrono>

namespace claw::bench {

inline double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Best of `reps` timings of fn, each averaging enough calls to last ~min_s.
// The best, not the mean: on a shared machine interference only adds time.
template <typename F>
double best_seconds(F&& fn, int reps = 5, double min_s = 0.2) {
  fn();
  double t0 = now();
  fn();
  const double one = std::max(now() - t0, 1e-7);
  const int iters = std::max(1, static_cast<int>(min_s / one));
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    t0 = now();
    for (int i = 0; i < iters; ++i) fn();
    best = std::min(best, (now() - t0) / iters);
  }
  return best;
}

}  // namespace claw::bench
