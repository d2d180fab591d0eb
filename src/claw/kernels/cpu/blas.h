// BLAS access for claw: GEMM wrappers (row-major, fp32/fp64) and the runtime
// checks that make sure the fast kernel is in use.
//
// Debian's OpenBLAS is built with DYNAMIC_ARCH and picks its kernel set from
// CPUID at load time. On CPUs newer than its tables (e.g. some Sapphire
// Rapids steppings) it falls back to "Prescott", an SSE kernel ~5x slower
// than the AVX-512 one. ensure_fast_blas() compares the chosen core with what
// the CPU supports and, if it is worse, re-executes the process with
// OPENBLAS_CORETYPE set, before any thread or MPI state exists. A user who set
// OPENBLAS_CORETYPE keeps their choice.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "claw/core/parallel.h"

namespace claw::kernels {

struct BlasInfo {
  std::string config;     // e.g. "OpenBLAS 0.3.21 DYNAMIC_ARCH ..."
  std::string core;       // kernel set in use, e.g. "SkylakeX"
  std::string best_core;  // what this CPU could run
  int parallel;           // 0 sequential, 1 pthreads, 2 OpenMP
};
BlasInfo blas_info();

// The OpenBLAS core name this CPU should use given its features, and whether
// `current` is already at least as good. Pure; unit-tested.
std::string best_openblas_core(bool avx512, bool avx2_fma);
bool openblas_core_is_fast_enough(const std::string& current, const std::string& best);

// Call first thing in main(). May not return (re-exec); idempotent.
void ensure_fast_blas(int argc, char** argv);

// Sets the OpenMP team size for claw kernels and the BLAS thread count.
// Returns the context kernels should receive.
CpuCtx make_cpu_ctx(int num_threads);

// Default thread count: OMP_NUM_THREADS if set, else the CPUs this process may run on.
int default_num_threads();

// Measured SGEMM throughput in GFLOP/s on the current BLAS thread team: a
// square n x n x n fp32 product (row-major, no transposes), repeated for
// about `seconds` after one warm-up call; the best repetition counts. What
// this machine's BLAS reaches now; claw's MFU divides by the calibrated,
// cached peak instead (peak.h), which does not move with the load.
double measure_sgemm_gflops(int64_t n = 2048, double seconds = 0.5);

// C[M,N] = alpha * op(A) * op(B) + beta * C, all row-major; op(A) is [M,K],
// op(B) is [K,N]; lda/ldb/ldc are the row strides of A, B, C as stored.
// Threads: BLAS uses the OpenMP team when called outside a parallel region
// and runs single-threaded inside one (so tiled kernels may call it per tile).
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
          int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc);
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, double alpha, const double* A,
          int64_t lda, const double* B, int64_t ldb, double beta, double* C, int64_t ldc);
// The same on the context's device: cuBLAS when ctx.gpu is set, else BLAS.
void gemm(const CpuCtx& ctx, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
          const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc);

}  // namespace claw::kernels
