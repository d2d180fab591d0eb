#include "claw/kernels/cpu/dropout.h"
#include "claw/kernels/cpu/route.h"

#include <algorithm>
#include <cmath>

#include "claw/core/error.h"
#include "claw/core/storage.h"

namespace claw::kernels {
namespace {

// out_i = keep_i ? in_i / (1 - p) : 0 with keep_i = uniform(rng, index0 + i) >= p.
// uniform() is (word >> 8) / 2^24, so the test is done exactly on the 24-bit
// integer: k / 2^24 >= p  <=>  k >= ceil(p * 2^24) (p * 2^24 is exact in double).
template <typename T>
void apply_mask(const CpuCtx& ctx, T* out, const T* in, int64_t n, double p, const RandomStream& rng,
                uint64_t index0) {
  CLAW_CHECK(p >= 0.0 && p < 1.0, "dropout probability must be in [0, 1), got {}", p);
  if (p == 0.0) {
    if (out != in) parallel_for(ctx, n, 1 << 16, [&](int64_t b, int64_t e) { std::copy(in + b, in + e, out + b); });
    return;
  }
  const uint32_t threshold = static_cast<uint32_t>(std::ceil(p * 16777216.0));
  const acc_t<T> scale = static_cast<acc_t<T>>(1.0 / (1.0 - p));
  parallel_for(ctx, n, 1 << 12, [&](int64_t b, int64_t e) {
    // A local copy of the stream keeps its key in registers; GCC then
    // vectorises Philox across elements. ivdep rather than omp simd: out may
    // alias in exactly, and omp simd makes GCC keep the Philox block in memory.
    const RandomStream stream = rng;
#pragma GCC ivdep
    for (int64_t i = b; i < e; ++i) {
      uint32_t k = stream.block(index0 + static_cast<uint64_t>(i))[0] >> 8;
      acc_t<T> v = widen(in[i]) * scale;
      out[i] = narrow<T>(k >= threshold ? v : acc_t<T>(0));
    }
  });
}

}  // namespace

template <typename T>
void dropout_forward(const CpuCtx& ctx, T* y, const T* x, int64_t n, double p, const RandomStream& rng,
                     uint64_t index0) {
  CLAW_ROUTE_TO_GPU(ctx, T, dropout_forward, y, x, n, p, rng, index0);
  apply_mask(ctx, y, x, n, p, rng, index0);
}

template <typename T>
void dropout_backward(const CpuCtx& ctx, T* dx, const T* dy, int64_t n, double p, const RandomStream& rng,
                      uint64_t index0) {
  CLAW_ROUTE_TO_GPU(ctx, T, dropout_backward, dx, dy, n, p, rng, index0);
  apply_mask(ctx, dx, dy, n, p, rng, index0);
}

#define CLAW_INSTANTIATE(T)                                                                                     \
  template void dropout_forward<T>(const CpuCtx&, T*, const T*, int64_t, double, const RandomStream&, uint64_t); \
  template void dropout_backward<T>(const CpuCtx&, T*, const T*, int64_t, double, const RandomStream&, uint64_t);
CLAW_INSTANTIATE(float)
CLAW_INSTANTIATE(double)
CLAW_INSTANTIATE(bfloat16)
CLAW_INSTANTIATE(float16)
#undef CLAW_INSTANTIATE

}  // namespace claw::kernels
