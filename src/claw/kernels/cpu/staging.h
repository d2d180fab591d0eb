// Staging 16-bit operands through fp32 for kernels whose fp32 version does
// the work (GEMMs, attention, cross-entropy): BLAS here has no bf16/f16
// GEMM, and a kernel that widens its operands exactly, computes in fp32 and
// rounds each output once is what a bf16 tensor-core kernel computes, up to
// the order of its sums.
#pragma once

#include <cstdint>
#include <vector>

#include "claw/core/parallel.h"
#include "claw/core/storage.h"

namespace claw::kernels {

// x[0, n) widened to fp32 (empty for a null x).
template <typename T>
std::vector<float> widened(const CpuCtx& ctx, const T* x, int64_t n) {
  std::vector<float> out(static_cast<size_t>(x ? n : 0));
  if (x) parallel_for(ctx, n, 1 << 15, [&](int64_t b, int64_t e) { widen_n(x + b, out.data() + b, e - b); });
  return out;
}

// out[i] = x[i] rounded to T.
template <typename T>
void narrow_into(const CpuCtx& ctx, const std::vector<float>& x, T* out) {
  parallel_for(ctx, static_cast<int64_t>(x.size()), 1 << 15,
               [&](int64_t b, int64_t e) { narrow_n(x.data() + b, out + b, e - b); });
}

inline float* data_or_null(std::vector<float>& v) { return v.empty() ? nullptr : v.data(); }

}  // namespace claw::kernels
