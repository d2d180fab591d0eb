// GEMMs through cuBLAS, row-major as the CPU's kernels::gemm.
//
// cuBLAS is column-major: a row-major [M, N] matrix with row stride ldc is a
// column-major [N, M] one with the same leading dimension, so
//   C = op(A) op(B)  (row-major)   <=>   C^T = op(B)^T op(A)^T  (column-major)
// and the call swaps the operands and M/N. fp32 runs IEEE (CUBLAS_COMPUTE_32F,
// no TF32) unless the context allows TF32; bf16 operands accumulate in fp32.
// The linear layers are GEMMs plus a bias broadcast (forward) and a bias
// gradient computed as a GEMV against a vector of ones (backward).
#include "claw/kernels/cuda/check.cuh"
#include "claw/kernels/cuda/ops.h"

namespace claw::kernels::cuda {

namespace {

cublasOperation_t op(bool t) { return t ? CUBLAS_OP_T : CUBLAS_OP_N; }

void gemm_ex(const GpuCtx& ctx, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
             const void* A, int64_t lda, const void* B, int64_t ldb, float beta, float* C, int64_t ldc,
             cudaDataType_t in_type, cublasComputeType_t compute) {
  if (M == 0 || N == 0) return;
  CLAW_CHECK(M <= INT32_MAX && N <= INT32_MAX && K <= INT32_MAX, "GEMM of {} x {} x {} exceeds cuBLAS's int sizes", M, N, K);
  CLAW_CUBLAS_CHECK(cublasGemmEx(blas_of(ctx), op(trans_b), op(trans_a), static_cast<int>(N), static_cast<int>(M),
                                 static_cast<int>(K), &alpha, B, in_type, static_cast<int>(ldb), A, in_type,
                                 static_cast<int>(lda), &beta, C, CUDA_R_32F, static_cast<int>(ldc), compute,
                                 CUBLAS_GEMM_DEFAULT));
}

// out[m, n] += bias[n]
__global__ void add_bias_kernel(float* __restrict__ out, const float* __restrict__ bias, int64_t M, int64_t N) {
  const int64_t total = M * N;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total; i += int64_t{gridDim.x} * blockDim.x)
    out[i] += bias[i % N];
}

}  // namespace

void gemm(const GpuCtx& ctx, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
          int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  gemm_ex(ctx, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, CUDA_R_32F,
          ctx.allow_tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F);
}

void gemm_bf16(const GpuCtx& ctx, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
               const uint16_t* A, int64_t lda, const uint16_t* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  gemm_ex(ctx, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, CUDA_R_16BF, CUBLAS_COMPUTE_32F);
}

void add_bias(const GpuCtx& ctx, float* out, const float* bias, int64_t M, int64_t N) {
  if (M * N == 0) return;
  add_bias_kernel<<<grid_for(M * N, 256), 256, 0, stream_of(ctx)>>>(out, bias, M, N);
  CLAW_CUDA_LAUNCH_CHECK();
}

void linear_forward(const GpuCtx& ctx, float* out, const float* inp, const float* weight, const float* bias, int64_t M,
                    int64_t K, int64_t N) {
  gemm(ctx, false, true, M, N, K, 1.0f, inp, K, weight, K, 0.0f, out, N);
  if (bias) add_bias(ctx, out, bias, M, N);
}

void linear_backward_input(const GpuCtx& ctx, float* dinp, const float* dout, const float* weight, int64_t M, int64_t K,
                           int64_t N, bool accumulate) {
  gemm(ctx, false, false, M, K, N, 1.0f, dout, N, weight, K, accumulate ? 1.0f : 0.0f, dinp, K);
}

void linear_backward_weight(const GpuCtx& ctx, float* dweight, float* dbias, const float* dout, const float* inp,
                            int64_t M, int64_t K, int64_t N) {
  if (dweight) gemm(ctx, true, false, N, K, M, 1.0f, dout, N, inp, K, 1.0f, dweight, K);
  if (!dbias || M == 0) return;
  CLAW_CHECK(M <= ctx.ones_n, "bias gradient over {} rows exceeds the context's {} ones", M, ctx.ones_n);
  // dbias[N] += dout^T 1: dout is column-major [N, M] with leading dimension N.
  const float one = 1.0f;
  CLAW_CUBLAS_CHECK(cublasSgemv(blas_of(ctx), CUBLAS_OP_N, static_cast<int>(N), static_cast<int>(M), &one, dout,
                                static_cast<int>(N), ctx.ones, 1, &one, dbias, 1));
}

}  // namespace claw::kernels::cuda
