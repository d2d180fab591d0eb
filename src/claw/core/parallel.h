// claw's CPU thread team. Kernels split their loops over the team with
// parallel_for; BLAS calls use the same OpenMP team (claw links the OpenMP
// flavour of OpenBLAS), so there is exactly one set of worker threads and no
// oversubscription between BLAS and element-wise kernels.
//
// The team size is not a global knob read by kernels: it travels in the
// kernel context (CpuCtx) that each kernel receives.
#pragma once

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <exception>

namespace claw {

// An exception must not leave an OpenMP region (the runtime calls
// std::terminate: a bad_alloc in a worker would abort the process). Work in
// a region runs through guard(), which keeps the first exception any thread
// throws and skips the work still to come; rethrow() after the region.
class RegionErrors {
 public:
  template <typename F>
  void guard(F&& f) noexcept {
    if (failed_.load(std::memory_order_relaxed)) return;
    try {
      f();
    } catch (...) {
#pragma omp critical(claw_region_errors)
      if (!error_) error_ = std::current_exception();
      failed_.store(true, std::memory_order_relaxed);
    }
  }
  void rethrow() const {
    if (error_) std::rethrow_exception(error_);
  }

 private:
  std::atomic<bool> failed_{false};
  std::exception_ptr error_;
};

struct GpuCtx;  // kernels/cuda/context.h

// What every kernel receives. With `gpu` set (a build with the CUDA backend,
// `--device cuda`) kernels run on that device and every pointer they are
// given is device memory; without it they run on the CPU thread team.
struct CpuCtx {
  int num_threads = 1;
  const GpuCtx* gpu = nullptr;
};

// Calls fn(begin, end) on contiguous chunks of [0, n), at most one chunk per
// thread, each at least `grain` long. Runs inline when the range is small or
// when already inside a parallel region (nested loops stay serial).
template <typename F>
void parallel_for(const CpuCtx& ctx, int64_t n, int64_t grain, F&& fn) {
  if (n <= 0) return;
  int64_t max_chunks = std::max<int64_t>(1, n / std::max<int64_t>(grain, 1));
  int nt = static_cast<int>(std::min<int64_t>(ctx.num_threads, max_chunks));
  if (nt <= 1 || omp_in_parallel()) {
    fn(int64_t{0}, n);
    return;
  }
  RegionErrors errors;
#pragma omp parallel num_threads(nt)
  {
    int t = omp_get_thread_num();
    int64_t chunk = (n + nt - 1) / nt;
    int64_t b = std::min<int64_t>(n, t * chunk), e = std::min<int64_t>(n, b + chunk);
    if (b < e) errors.guard([&] { fn(b, e); });
  }
  errors.rethrow();
}

// Like parallel_for, but hands out items one at a time dynamically (for
// uneven work such as causal attention rows).
template <typename F>
void parallel_for_dynamic(const CpuCtx& ctx, int64_t n, F&& fn) {
  if (n <= 0) return;
  int nt = static_cast<int>(std::min<int64_t>(ctx.num_threads, n));
  if (nt <= 1 || omp_in_parallel()) {
    for (int64_t i = 0; i < n; ++i) fn(i);
    return;
  }
  RegionErrors errors;
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt)
  for (int64_t i = 0; i < n; ++i) errors.guard([&] { fn(i); });
  errors.rethrow();
}

}  // namespace claw
