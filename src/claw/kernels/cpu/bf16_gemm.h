// GEMM on bf16 operands with fp32 accumulation and an fp32 result: the
// product --bf16 training runs its linear layers on, and FP8 recipes too
// (an E4M3, E5M2, MXFP8, blockwise or NVFP4 value, scales included, is a
// bf16 value exactly: at most 6 significant bits inside fp32's exponent
// range), so those products are exact and only the summation order differs
// from fp32 BLAS on the same values.
//
// The backend is chosen at run time, by measurement:
//   onednn    oneDNN's matmul on bf16 operands, where the CPU has avx512_bf16
//             or AMX and that matmul outruns fp32 BLAS by a clear margin
//             (AMX does; some avx512_bf16 parts issue VDPBF16PS at a quarter
//             of the FMA rate, and there fp32 BLAS is faster);
//   fp32      elsewhere: the operands' bf16 values kept as fp32 and fp32
//             BLAS: the same products, no conversion to undo.
// CLAW_BF16_GEMM=onednn or =fp32 forces a backend (tests compare the two).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "claw/core/dtype.h"
#include "claw/core/parallel.h"

namespace claw::kernels {

// Whether bf16 products run on bf16 hardware here (the onednn backend).
bool bf16_gemm_fast();
// What runs them and why, for claw info and logs: e.g. "oneDNN 2.6.3 matmul
// (brg:avx512_core_amx)", or the fp32 path and the measurement that chose it.
std::string bf16_gemm_kernel();

// A GEMM operand of bf16 values: their bit patterns under the onednn
// backend, else the same values as fp32 (exactly: bf16 widens to fp32).
struct Bf16Operand {
  const float* f32 = nullptr;
  const uint16_t* bits = nullptr;
};
// x rounded to bf16 (nearest even), into whichever buffer the backend reads.
Bf16Operand round_to_bf16(const CpuCtx& ctx, const float* x, int64_t n, std::vector<float>& f32,
                          std::vector<uint16_t>& bits);
// The same for x that is no longer needed: rounded in place under the fp32
// backend (no copy), else into bits.
Bf16Operand round_to_bf16_in_place(const CpuCtx& ctx, float* x, int64_t n, std::vector<uint16_t>& bits);
// x already holds bf16 values (FP8 codes and their power-of-two or E4M3
// scales): x itself, or its bit patterns.
Bf16Operand exact_bf16(const CpuCtx& ctx, const float* x, int64_t n, std::vector<uint16_t>& bits);

// oneDNN's bf16 matmul itself, whatever the backend (tests, measurement).
void onednn_bf16_gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const uint16_t* A,
                      int64_t lda, const uint16_t* B, int64_t ldb, float beta, float* C, int64_t ldc);

// bf16 activation storage (--bf16): x rounded to bf16 values in place; x
// packed into bf16 bit patterns (exact for values already rounded); and
// widened back.
void round_bf16_values(const CpuCtx& ctx, float* x, int64_t n);
void pack_bf16(const CpuCtx& ctx, const float* x, uint16_t* y, int64_t n);
void unpack_bf16(const CpuCtx& ctx, const uint16_t* x, float* y, int64_t n);
// The same for 16-bit activations of either kind (t: bf16, or f16 under
// --fp16: rounded to nearest even, overflowing to inf as IEEE does).
void round_half_values(const CpuCtx& ctx, DType t, float* x, int64_t n);
void pack_half(const CpuCtx& ctx, DType t, const float* x, uint16_t* y, int64_t n);
void unpack_half(const CpuCtx& ctx, DType t, const uint16_t* x, float* y, int64_t n);

// The CPU's instruction sets that matter to low precision, from
// /proc/cpuinfo: those of avx2 fma f16c avx512f avx512_vnni avx512_bf16
// avx512_fp16 amx_tile amx_bf16 amx_int8 it has, space-separated.
std::string cpu_precision_flags();
// Best of a few square n x n x n bf16 products, GFLOP/s (claw info, bench/).
double measure_bf16_gemm_gflops(int64_t n = 2048, double seconds = 0.5);

// C[M,N] = alpha op(A) op(B) + beta C, row-major as kernels::gemm.
void gemm_bf16(const CpuCtx& ctx, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
               const Bf16Operand& A, int64_t lda, const Bf16Operand& B, int64_t ldb, float beta, float* C, int64_t ldc);

}  // namespace claw::kernels
