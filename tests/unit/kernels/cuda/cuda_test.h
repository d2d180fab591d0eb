// What the CUDA kernel tests share (test_cuda_kernels.cc, test_cuda_attention.cc):
// the device, device buffers poisoned with NaN, random inputs, and the relative
// error each comparison prints before it checks it.
#pragma once

#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "claw/core/dtype_convert.h"
#include "claw/core/philox.h"
#include "claw/kernels/cpu/activations.h"
#include "claw/kernels/cpu/adamw.h"
#include "claw/kernels/cpu/attention.h"
#include "claw/kernels/cpu/bf16_gemm.h"
#include "claw/kernels/cpu/blas.h"
#include "claw/kernels/cpu/cross_entropy.h"
#include "claw/kernels/cpu/dropout.h"
#include "claw/kernels/cpu/embedding.h"
#include "claw/kernels/cpu/layernorm.h"
#include "claw/kernels/cpu/linear.h"
#include "claw/kernels/cpu/reduce.h"
#include "claw/kernels/cpu/rmsnorm.h"
#include "claw/kernels/cpu/rope.h"
#include "claw/kernels/cuda/context.h"
#include "claw/kernels/cuda/ops.h"

namespace claw::kernels::cuda_test {

namespace gpu = claw::kernels::cuda;

inline const CpuCtx cpu{.num_threads = 4};
constexpr double kTol = 1e-5;

// One device for the whole binary, opened on first use.
inline gpu::Device& device() {
  static gpu::Device dev(0);
  return dev;
}
inline const GpuCtx& gctx() { return device().ctx(); }

class CudaKernels : public ::testing::Test {
 protected:
  void SetUp() override {
    if (gpu::device_count() == 0) GTEST_SKIP() << "no CUDA device";
    device();
  }
};

// A device array of n elements, freed on scope exit.
template <typename T>
class Buf {
 public:
  explicit Buf(size_t n) : n_(n) {
    if (cudaMalloc(&p_, std::max<size_t>(n, 1) * sizeof(T)) != cudaSuccess) throw std::runtime_error("cudaMalloc");
  }
  explicit Buf(const std::vector<T>& h) : Buf(h.size()) { upload(h); }
  ~Buf() { cudaFree(p_); }
  Buf(const Buf&) = delete;
  Buf& operator=(const Buf&) = delete;
  T* get() const { return p_; }
  void upload(const std::vector<T>& h) { gpu::copy_to_device(gctx(), p_, h.data(), n_ * sizeof(T)); }
  // All-ones bytes: NaN as fp32 and as bf16, -1 as an integer.
  void poison() {
    if (cudaMemsetAsync(p_, 0xff, n_ * sizeof(T), static_cast<cudaStream_t>(gctx().stream)) != cudaSuccess)
      throw std::runtime_error("cudaMemsetAsync");
  }
  std::vector<T> download() const {
    std::vector<T> h(n_);
    gpu::copy_to_host(gctx(), h.data(), p_, n_ * sizeof(T));
    gpu::check_stream(gctx(), "test download");
    return h;
  }

 private:
  T* p_ = nullptr;
  size_t n_;
};

inline std::vector<float> random_floats(size_t n, std::mt19937& gen, float lo = -1.f, float hi = 1.f) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(gen);
  return v;
}

// ||a - b|| / ||b||; infinite if a has a non-finite element that b does not.
inline double rel_err(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return std::numeric_limits<double>::infinity();
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(a[i]) && std::isfinite(b[i])) return std::numeric_limits<double>::infinity();
    const double d = static_cast<double>(a[i]) - static_cast<double>(b[i]);
    num += d * d;
    den += static_cast<double>(b[i]) * b[i];
  }
  if (den == 0) return std::sqrt(num);
  return std::sqrt(num / den);
}

inline std::string test_name() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  return info ? info->name() : "?";
}

// Prints the figure, then checks it.
#define EXPECT_CLOSE(what, gpu_v, cpu_v, tol)                                                       \
  do {                                                                                              \
    const double claw_e_ = rel_err((gpu_v), (cpu_v));                                               \
    std::printf("  %-24s %-28s rel err %.3e (tol %.0e)\n", test_name().c_str(), (what), claw_e_, (tol)); \
    EXPECT_LE(claw_e_, (tol)) << (what);                                                            \
  } while (0)

inline int64_t ulp_distance(float a, float b) {
  auto ordered = [](float x) {
    int32_t i;
    std::memcpy(&i, &x, 4);
    return i < 0 ? static_cast<int64_t>(std::numeric_limits<int32_t>::min()) - i : static_cast<int64_t>(i);
  };
  return std::llabs(ordered(a) - ordered(b));
}

// ---- GEMM and linear (implemented by the lead; tested here with the rest) ----------------

}  // namespace claw::kernels::cuda_test
