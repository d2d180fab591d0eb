#include "claw/kernels/cpu/adamw.h"
#include "claw/kernels/cpu/route.h"

#include <algorithm>
#include <cmath>

#include <type_traits>

#include "claw/core/dtype_convert.h"
#include "claw/core/error.h"
#include "claw/core/storage.h"

namespace claw::kernels {

template <typename P, typename G, typename M, typename V>
void adamw_update(const CpuCtx& ctx, P* param, M* m, V* v, const G* grad, int64_t n, const AdamWHyper& h) {
  using T = acc_t<P>;
  if constexpr (std::is_same_v<G, T> && std::is_same_v<M, T> && std::is_same_v<V, T> && std::is_same_v<P, T>) {
    CLAW_ROUTE_TO_GPU(ctx, T, adamw_update, param, m, v, grad, n,
                      cuda::AdamWArgs{h.lr, h.beta1, h.beta2, h.eps, h.weight_decay, h.grad_scale, h.step});
  } else {
    CLAW_CPU_ONLY(ctx, adamw_update);
  }
  CLAW_CHECK(h.step >= 1, "AdamW step counts from 1, got {}", h.step);
  // Scalars are formed in double and rounded once to T, as PyTorch does with
  // Python-float hyperparameters applied to a tensor of dtype T.
  const double step = static_cast<double>(h.step);
  const double bias_correction1 = 1.0 - std::pow(h.beta1, step);
  const double bias_correction2 = 1.0 - std::pow(h.beta2, step);
  const T grad_scale = static_cast<T>(h.grad_scale);
  const T decay = static_cast<T>(1.0 - h.lr * h.weight_decay);
  const T beta1 = static_cast<T>(h.beta1), one_minus_beta1 = static_cast<T>(1.0 - h.beta1);
  const T beta2 = static_cast<T>(h.beta2), one_minus_beta2 = static_cast<T>(1.0 - h.beta2);
  const T neg_step_size = static_cast<T>(-(h.lr / bias_correction1));
  const T bias_correction2_sqrt = static_cast<T>(std::sqrt(bias_correction2));
  const T eps = static_cast<T>(h.eps);
  // Elements [b, e) with param element i at p[i - off].
  const auto update = [&](auto* p_at, int64_t off, int64_t b, int64_t e) {
    using Q = std::remove_pointer_t<decltype(p_at)>;
#pragma omp simd
    for (int64_t i = b; i < e; ++i) {
      // One statement per PyTorch tensor op, each rounded to T in the same order.
      T g = static_cast<T>(widen(grad[i])) * grad_scale;
      T p = static_cast<T>(widen(p_at[i - off])) * decay;           // param.mul_(1 - lr * wd)
      T mi = static_cast<T>(widen(m[i])) * beta1 + one_minus_beta1 * g;      // exp_avg.mul_(b1).add_(g, alpha=1-b1)
      T vi = static_cast<T>(widen(v[i])) * beta2 + one_minus_beta2 * g * g;  // exp_avg_sq.mul_(b2).addcmul_(g, g, value=1-b2)
      T denom = std::sqrt(vi) / bias_correction2_sqrt + eps;        // (exp_avg_sq.sqrt() / bc2_sqrt).add_(eps)
      p_at[i - off] = narrow<Q>(p + neg_step_size * mi / denom);    // param.addcdiv_(exp_avg, denom, value=-step_size)
      m[i] = narrow<M>(mi);
      v[i] = narrow<V>(vi);
    }
  };
  parallel_for(ctx, n, 1 << 14, [&](int64_t b, int64_t e) {
    if constexpr (is_half_storage_v<P>) {
      // 16-bit masters: widened a block at a time into fp32 (the bulk
      // conversions vectorise), updated there and rounded back.
      constexpr DType kP = std::is_same_v<P, float16> ? DType::f16 : DType::bf16;
      constexpr int64_t kBlock = 1024;
      alignas(64) T block[kBlock];
      for (int64_t c = b; c < e; c += kBlock) {
        const int64_t k = std::min(kBlock, e - c);
        convert(kP, param + c, DType::f32, block, k);
        update(block, c, c, c + k);
        convert(DType::f32, block, kP, param + c, k);
      }
    } else {
      update(param, 0, b, e);
    }
  });
}

template void adamw_update<float, float>(const CpuCtx&, float*, float*, float*, const float*, int64_t,
                                        const AdamWHyper&);
template void adamw_update<double, double>(const CpuCtx&, double*, double*, double*, const double*, int64_t,
                                           const AdamWHyper&);
template void adamw_update<float, bfloat16>(const CpuCtx&, float*, float*, float*, const bfloat16*, int64_t,
                                            const AdamWHyper&);
template void adamw_update<float, float16>(const CpuCtx&, float*, float*, float*, const float16*, int64_t,
                                           const AdamWHyper&);
// The precision-aware optimizer's 16-bit moments (fp32 gradients).
#define CLAW_ADAMW_MOMENTS(M, V) \
  template void adamw_update<float, float, M, V>(const CpuCtx&, float*, M*, V*, const float*, int64_t, const AdamWHyper&);
CLAW_ADAMW_MOMENTS(float, bfloat16)
CLAW_ADAMW_MOMENTS(float, float16)
CLAW_ADAMW_MOMENTS(bfloat16, float)
CLAW_ADAMW_MOMENTS(bfloat16, bfloat16)
CLAW_ADAMW_MOMENTS(bfloat16, float16)
CLAW_ADAMW_MOMENTS(float16, float)
CLAW_ADAMW_MOMENTS(float16, bfloat16)
CLAW_ADAMW_MOMENTS(float16, float16)
#undef CLAW_ADAMW_MOMENTS
// fp16 master weights (--main-params-dtype fp16), with moments of any dtype.
#define CLAW_ADAMW_FP16_MASTER(M, V)                                                                        \
  template void adamw_update<float16, float, M, V>(const CpuCtx&, float16*, M*, V*, const float*, int64_t, \
                                                   const AdamWHyper&);
CLAW_ADAMW_FP16_MASTER(float, float)
CLAW_ADAMW_FP16_MASTER(float, bfloat16)
CLAW_ADAMW_FP16_MASTER(float, float16)
CLAW_ADAMW_FP16_MASTER(bfloat16, float)
CLAW_ADAMW_FP16_MASTER(bfloat16, bfloat16)
CLAW_ADAMW_FP16_MASTER(bfloat16, float16)
CLAW_ADAMW_FP16_MASTER(float16, float)
CLAW_ADAMW_FP16_MASTER(float16, bfloat16)
CLAW_ADAMW_FP16_MASTER(float16, float16)
#undef CLAW_ADAMW_FP16_MASTER

}  // namespace claw::kernels
