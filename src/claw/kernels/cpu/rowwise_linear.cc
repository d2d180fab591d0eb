#include "claw/kernels/cpu/rowwise_linear.h"

#include "claw/kernels/cpu/rowwise_tile.h"

namespace claw::kernels {

void rowwise_linear_forward(const CpuCtx& ctx, float* out, const float* inp, const float* weight, const float* bias,
                            int64_t M, int64_t K, int64_t N) {
  rowwise::over_panels(ctx, N, static_cast<size_t>(K) * sizeof(float), [&](int64_t n0, int64_t n1) {
    rowwise::panel<rowwise::F32Rows>(out, N, inp, weight, bias, M, K, n0, n1);
  });
}

}  // namespace claw::kernels
