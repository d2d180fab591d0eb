#include "claw/kernels/cpu/blas.h"
#include "claw/kernels/cpu/route.h"

#include <sched.h>
#include <unistd.h>

#include <cblas.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <vector>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "claw/core/error.h"
#include "claw/core/log.h"

extern "C" {
char* openblas_get_corename(void);
char* openblas_get_config(void);
int openblas_get_parallel(void);
void openblas_set_num_threads(int);
}

namespace claw::kernels {

std::string best_openblas_core(bool avx512, bool avx2_fma) {
  if (avx512) return "SkylakeX";
  if (avx2_fma) return "Haswell";
  return "";
}

bool openblas_core_is_fast_enough(const std::string& current, const std::string& best) {
  if (best.empty()) return true;
  // Kernel sets with AVX-512 SGEMM, then those with AVX2+FMA (OpenBLAS 0.3.x names,
  // lower-cased; openblas_get_corename reports either case depending on version).
  static constexpr std::array<std::string_view, 4> avx512 = {"skylakex", "cooperlake", "sapphirerapids", "zen4"};
  static constexpr std::array<std::string_view, 5> avx2 = {"haswell", "zen", "skylake", "cooperlake", "sapphirerapids"};
  std::string cur;
  for (char c : current) cur += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  auto in = [&](auto& set) {
    for (auto n : set)
      if (cur == n) return true;
    return false;
  };
  if (best == "SkylakeX") return in(avx512);
  if (best == "Haswell") return in(avx512) || in(avx2);
  return true;
}

namespace {
std::string this_cpu_best_core() {
  __builtin_cpu_init();
  bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return best_openblas_core(avx512, avx2);
}
}  // namespace

BlasInfo blas_info() {
  return {openblas_get_config(), openblas_get_corename(), this_cpu_best_core(), openblas_get_parallel()};
}

void ensure_fast_blas(int argc, char** argv) {
  if (std::getenv("OPENBLAS_CORETYPE")) return;  // the user's explicit choice, or our re-exec
  std::string best = this_cpu_best_core();
  std::string core = openblas_get_corename();
  if (openblas_core_is_fast_enough(core, best)) return;
  // Mis-detected: restart with the right kernel set. execv keeps the pid, so
  // launchers (mpirun, srun) do not notice.
  setenv("OPENBLAS_CORETYPE", best.c_str(), 1);
  std::fprintf(stderr, "[claw] blas: OpenBLAS chose '%s' on a CPU that runs '%s'; restarting with OPENBLAS_CORETYPE=%s\n",
               core.c_str(), best.c_str(), best.c_str());
  execv("/proc/self/exe", argv);
  std::fprintf(stderr, "[claw] blas: re-exec failed (%s); continuing with the slow kernel\n", std::strerror(errno));
}

int default_num_threads() {
  if (const char* s = std::getenv("OMP_NUM_THREADS")) {
    int n = std::atoi(s);
    if (n > 0) return n;
  }
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1L, sysconf(_SC_NPROCESSORS_ONLN));
}

CpuCtx make_cpu_ctx(int num_threads) {
  if (num_threads < 1) fail("--num-threads must be at least 1 (got {})", num_threads);
  omp_set_num_threads(num_threads);
  openblas_set_num_threads(num_threads);
  return CpuCtx{num_threads};
}

double measure_sgemm_gflops(int64_t n, double seconds) {
  std::vector<float> a(n * n), b(n * n), c(n * n);
  for (int64_t i = 0; i < n * n; ++i) {
    a[i] = static_cast<float>(i % 7) * 0.25f - 0.75f;
    b[i] = static_cast<float>(i % 5) * 0.25f - 0.5f;
  }
  using clock = std::chrono::steady_clock;
  gemm(false, false, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);  // warm-up: threads, pages
  double best = 0;
  auto start = clock::now();
  do {
    auto t0 = clock::now();
    gemm(false, false, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
    double dt = std::chrono::duration<double>(clock::now() - t0).count();
    best = std::max(best, 2.0 * n * n * n / dt / 1e9);
  } while (std::chrono::duration<double>(clock::now() - start).count() < seconds);
  return best;
}

void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
          const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N, K, alpha,
              A, lda, B, ldb, beta, C, ldc);
}

void gemm(const CpuCtx& ctx, bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
          int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if constexpr (cuda::cuda_built()) {
    if (ctx.gpu) return cuda::gemm(*ctx.gpu, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  }
  gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, double alpha, const double* A, int64_t lda,
          const double* B, int64_t ldb, double beta, double* C, int64_t ldc) {
  cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N, K, alpha,
              A, lda, B, ldb, beta, C, ldc);
}

}  // namespace claw::kernels
