// The CUDA backend's kernels: one function per CPU kernel, same arguments
// and same contract (read the CPU header named beside each group for the
// math, shapes, aliasing and gradient rules), fp32 storage and accumulation
// unless said otherwise. Every pointer is device memory, including token,
// target, position and segment arrays; scalars come back through the
// context's pinned host result. All launches go on ctx.stream, in order;
// nothing here synchronizes unless it returns a value computed on the device.
//
// Determinism: every kernel but embedding_backward gives the same bits run to
// run (fixed reduction trees, no atomics on floats); embedding_backward
// accumulates repeated tokens with atomics (order-dependent in the last bit).
#pragma once

#include <cstdint>
#include <initializer_list>

#include "claw/core/philox.h"
#include "claw/kernels/cuda/context.h"

namespace claw::kernels::cuda {

// ---- GEMM (cuBLAS; cpu/blas.h) ------------------------------------------------
// C[M,N] = alpha op(A) op(B) + beta C, row-major, lda/ldb/ldc row strides.
void gemm(const GpuCtx& ctx, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
          const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc);
// BF16 operands (uint16_t bit patterns), fp32 accumulation, fp32 C.
void gemm_bf16(const GpuCtx& ctx, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
               const uint16_t* A, int64_t lda, const uint16_t* B, int64_t ldb, float beta, float* C, int64_t ldc);

// ---- linear (cpu/linear.h) -------------------------------------------------------
// out[m, n] += bias[n] for m < M, n < N.
void add_bias(const GpuCtx& ctx, float* out, const float* bias, int64_t M, int64_t N);
void linear_forward(const GpuCtx& ctx, float* out, const float* inp, const float* weight, const float* bias,
                    int64_t M, int64_t K, int64_t N);
void linear_backward_input(const GpuCtx& ctx, float* dinp, const float* dout, const float* weight, int64_t M,
                           int64_t K, int64_t N, bool accumulate);
void linear_backward_weight(const GpuCtx& ctx, float* dweight, float* dbias, const float* dout, const float* inp,
                            int64_t M, int64_t K, int64_t N);

// ---- element-wise and reductions (cpu/reduce.h, cpu/activations.h) ----------------
double sum_squares(const GpuCtx& ctx, const float* x, int64_t n);  // synchronizes
void add(const GpuCtx& ctx, float* out, const float* a, const float* b, int64_t n);
void axpy(const GpuCtx& ctx, float* y, float alpha, const float* x, int64_t n);
void scale(const GpuCtx& ctx, float* x, float alpha, int64_t n);
int64_t first_non_finite(const GpuCtx& ctx, const float* x, int64_t n);  // synchronizes
void gelu_forward(const GpuCtx& ctx, float* y, const float* x, int64_t n);
void gelu_backward(const GpuCtx& ctx, float* dx, const float* dy, const float* x, int64_t n);
void swiglu_forward(const GpuCtx& ctx, float* y, const float* gate, const float* up, int64_t n);
void swiglu_backward(const GpuCtx& ctx, float* dgate, float* dup, const float* dy, const float* gate, const float* up,
                     int64_t n);
// Conversions between fp32 and bf16 bit patterns (round to nearest even).
void to_bf16(const GpuCtx& ctx, uint16_t* out, const float* x, int64_t n);
void from_bf16(const GpuCtx& ctx, float* out, const uint16_t* x, int64_t n);
// 16-bit activations (cpu/bf16_gemm.h round_half_values, pack_half,
// unpack_half): f16 false for bf16, true for IEEE half (overflow to inf).
// The CPU's bits for every finite and infinite input.
void round_half_values(const GpuCtx& ctx, bool f16, float* x, int64_t n);
void pack_half(const GpuCtx& ctx, bool f16, const float* x, uint16_t* y, int64_t n);
void unpack_half(const GpuCtx& ctx, bool f16, const uint16_t* x, float* y, int64_t n);

// ---- dropout (cpu/dropout.h): the same Philox masks as the CPU -----------------------
void dropout_forward(const GpuCtx& ctx, float* y, const float* x, int64_t n, double p, const RandomStream& rng,
                     uint64_t index0);
void dropout_backward(const GpuCtx& ctx, float* dx, const float* dy, int64_t n, double p, const RandomStream& rng,
                      uint64_t index0);

// ---- embedding (cpu/embedding.h) ---------------------------------------------------
void embedding_forward(const GpuCtx& ctx, float* out, const int32_t* tokens, const float* wte, const float* wpe,
                       int64_t B, int64_t T, int64_t C, const int32_t* positions);
void embedding_backward(const GpuCtx& ctx, float* dwte, float* dwpe, const float* dout, const int32_t* tokens,
                        int64_t B, int64_t T, int64_t C, const int32_t* positions);

// ---- norms (cpu/layernorm.h, cpu/rmsnorm.h) -----------------------------------------
void layernorm_forward(const GpuCtx& ctx, float* y, float* mean, float* rstd, const float* x, const float* weight,
                       const float* bias, int64_t N, int64_t C, double eps);
void layernorm_backward(const GpuCtx& ctx, float* dx, float* dweight, float* dbias, const float* dy, const float* x,
                        const float* weight, const float* mean, const float* rstd, int64_t N, int64_t C,
                        bool accumulate_dx);
void rmsnorm_forward(const GpuCtx& ctx, float* y, float* rstd, const float* x, const float* weight, int64_t N,
                     int64_t C, double eps);
void rmsnorm_backward(const GpuCtx& ctx, float* dx, float* dweight, const float* dy, const float* x,
                      const float* weight, const float* rstd, int64_t N, int64_t C, bool accumulate_dx);

// ---- RoPE (cpu/rope.h); cos/sin tables on the device ------------------------------
void rope_forward(const GpuCtx& ctx, float* x, const float* cos, const float* sin, int64_t B, int64_t T, int64_t nh,
                  int64_t D, const int32_t* positions);
void rope_backward(const GpuCtx& ctx, float* dx, const float* cos, const float* sin, int64_t B, int64_t T,
                   int64_t nh, int64_t D, const int32_t* positions);

// ---- attention (cpu/attention.h: causal, documents through seg_start, GQA) ----------
void attention_forward(const GpuCtx& ctx, float* out, float* lse, const float* q, const float* k, const float* v,
                       int64_t B, int64_t T, int64_t H, int64_t G, int64_t D, double scale, const int32_t* seg_start);
void attention_backward(const GpuCtx& ctx, float* dq, float* dk, float* dv, const float* dout, const float* q,
                        const float* k, const float* v, const float* out, const float* lse, int64_t B, int64_t T,
                        int64_t H, int64_t G, int64_t D, double scale, const int32_t* seg_start);

// The same on the tensor cores (attention_bf16.cu): bf16 operands, fp32
// accumulation and softmax; for D = 64 or 128 and 16-byte aligned rows
// (attention_tc_supported). attention_forward/backward take this path when
// ctx.bf16_attention is set and it applies. delta: rowsum(dout * out) [B, H, T].
bool attention_tc_supported(int64_t D, std::initializer_list<const float*> ptrs);
void attention_forward_tc(const GpuCtx& ctx, float* out, float* lse, const float* q, const float* k, const float* v,
                          int64_t B, int64_t T, int64_t H, int64_t G, int64_t D, double scale,
                          const int32_t* seg_start);
void attention_backward_tc(const GpuCtx& ctx, float* dq, float* dk, float* dv, const float* dout, const float* q,
                           const float* k, const float* v, const float* lse, const float* delta, int64_t B, int64_t T,
                           int64_t H, int64_t G, int64_t D, double scale, const int32_t* seg_start);

// ---- cross-entropy (cpu/cross_entropy.h) -------------------------------------------
void cross_entropy_forward(const GpuCtx& ctx, float* losses, float* lse, const float* logits, const int32_t* targets,
                           int64_t N, int64_t V, int64_t Vp);
void cross_entropy_backward(const GpuCtx& ctx, float* dlogits, const float* logits, const float* lse,
                            const int32_t* targets, float dloss_scale, int64_t N, int64_t V, int64_t Vp);
// sum_i x[i] in double (the loss sum of a micro-batch); synchronizes.
double sum(const GpuCtx& ctx, const float* x, int64_t n);
// x[i] *= w[i] (per-token loss weights), and rows of [N, V] scaled by w[row].
void mul(const GpuCtx& ctx, float* x, const float* w, int64_t n);
void scale_rows(const GpuCtx& ctx, float* x, const float* w, int64_t rows, int64_t cols);

// ---- AdamW (cpu/adamw.h: PyTorch's operation order) ----------------------------------
struct AdamWArgs {
  double lr, beta1, beta2, eps, weight_decay, grad_scale;
  int64_t step;
};
void adamw_update(const GpuCtx& ctx, float* param, float* m, float* v, const float* grad, int64_t n,
                  const AdamWArgs& h);

}  // namespace claw::kernels::cuda
