#include "claw/kernels/cpu/bf16_gemm.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>
#include <tuple>

#include <oneapi/dnnl/dnnl.hpp>

#include "claw/core/dtype_convert.h"
#include "claw/core/error.h"
#include "claw/core/storage.h"
#include "claw/kernels/cpu/blas.h"
#include "claw/kernels/cuda/ops.h"

namespace claw::kernels {
namespace {

// CLAW_BF16_GEMM: "onednn", "fp32", or unset (measure).
std::string forced_backend() {
  const char* e = std::getenv("CLAW_BF16_GEMM");
  if (e == nullptr || *e == 0) return "";
  if (std::strcmp(e, "onednn") == 0 || std::strcmp(e, "fp32") == 0) return e;
  fail("CLAW_BF16_GEMM={}: expected 'onednn' or 'fp32' (unset: chosen by measurement)", e);
}

bool cpu_has_bf16_isa() {
  const dnnl::cpu_isa isa = dnnl::get_effective_cpu_isa();
  return isa == dnnl::cpu_isa::avx512_core_bf16 || isa == dnnl::cpu_isa::avx512_core_amx;
}

// One engine for every primitive, memory and stream (oneDNN refuses to mix engines).
const dnnl::engine& engine() {
  static const dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  return eng;
}

// Primitives by shape, strides and scalars: a training step repeats a few
// dozen shapes, each built once.
using Key = std::tuple<bool, bool, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, float, float>;

struct Primitive {
  dnnl::memory::desc a, b, c;
  dnnl::matmul mm;
};

const Primitive& primitive(const Key& key) {
  static std::mutex mu;
  static std::map<Key, std::unique_ptr<Primitive>> cache;
  std::lock_guard lock(mu);
  auto& slot = cache[key];
  if (slot) return *slot;
  const auto [ta, tb, M, N, K, lda, ldb, ldc, alpha, beta] = key;
  using dt = dnnl::memory::data_type;
  auto p = std::make_unique<Primitive>();
  // op(A) [M,K]: stored [M,K] with row stride lda, or [K,M] (transposed); B likewise.
  p->a = dnnl::memory::desc({M, K}, dt::bf16, ta ? dnnl::memory::dims{1, lda} : dnnl::memory::dims{lda, 1});
  p->b = dnnl::memory::desc({K, N}, dt::bf16, tb ? dnnl::memory::dims{1, ldb} : dnnl::memory::dims{ldb, 1});
  p->c = dnnl::memory::desc({M, N}, dt::f32, dnnl::memory::dims{ldc, 1});
  dnnl::primitive_attr attr;
  if (alpha != 1.0f) attr.set_output_scales(0, {alpha});
  if (beta != 0.0f) {
    dnnl::post_ops ops;
    ops.append_sum(beta);
    attr.set_post_ops(ops);
  }
  try {
    p->mm = dnnl::matmul(dnnl::matmul::primitive_desc(dnnl::matmul::desc(p->a, p->b, p->c), attr, engine()));
  } catch (const dnnl::error& e) {
    fail("oneDNN bf16 matmul {}x{}x{} (transposed {} {}): {}", M, N, K, ta, tb, e.what());
  }
  slot = std::move(p);
  return *slot;
}

}  // namespace

void onednn_bf16_gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const uint16_t* A, int64_t lda,
                      const uint16_t* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  const Primitive& p = primitive({ta, tb, M, N, K, lda, ldb, ldc, alpha, beta});
  const dnnl::engine& eng = engine();
  thread_local dnnl::stream stream(eng);
  dnnl::memory a(p.a, eng, const_cast<uint16_t*>(A)), b(p.b, eng, const_cast<uint16_t*>(B)), c(p.c, eng, C);
  p.mm.execute(stream, {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}});
  stream.wait();
}

namespace {

// The best GFLOP/s of each of two products over `rounds` alternating runs
// (after a warm-up of each), so that a load that comes and goes touches both.
template <typename F, typename G>
std::pair<double, double> best_gflops(double flops, int rounds, F&& first, G&& second) {
  first();
  second();
  double best1 = 0, best2 = 0;
  const auto rate = [flops](auto&& product) {
    const auto t0 = std::chrono::steady_clock::now();
    product();
    return flops / std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / 1e9;
  };
  for (int i = 0; i < rounds; ++i) {
    best1 = std::max(best1, rate(first));
    best2 = std::max(best2, rate(second));
  }
  return {best1, best2};
}

// oneDNN must beat fp32 BLAS by this much to be used: the choice changes
// the summation order, so measurement noise must not flip it.
constexpr double kMargin = 1.25;

struct Backend {
  bool fast = false;
  std::string name;
};

const Backend& backend() {
  static const Backend b = [] {
    const dnnl_version_t* v = dnnl_version();
    const std::string onednn = fmt::format("oneDNN {}.{}.{} matmul", v->major, v->minor, v->patch);
    const std::string forced = forced_backend();
    if (forced == "fp32") return Backend{false, "fp32 BLAS on bf16 values (CLAW_BF16_GEMM=fp32)"};
    if (forced.empty() && !cpu_has_bf16_isa())
      return Backend{false, "fp32 BLAS on bf16 values (the CPU has neither avx512_bf16 nor AMX)"};
    // The implementation oneDNN picks, and its speed against fp32 BLAS on a
    // training-sized product.
    const dnnl::memory::desc a({256, 256}, dnnl::memory::data_type::bf16, dnnl::memory::format_tag::ab);
    const dnnl::memory::desc c({256, 256}, dnnl::memory::data_type::f32, dnnl::memory::format_tag::ab);
    const std::string impl = dnnl::matmul::primitive_desc(dnnl::matmul::desc(a, a, c), engine()).impl_info_str();
    if (forced == "onednn") return Backend{true, fmt::format("{} ({}; CLAW_BF16_GEMM=onednn)", onednn, impl)};
    constexpr int64_t M = 512, N = 768, K = 768;
    std::vector<uint16_t> ah(M * K, 0x3f80), bh(K * N, 0x3f00);
    std::vector<float> af(M * K, 1.0f), bf(K * N, 0.5f), cf(M * N);
    const double flops = 2.0 * M * N * K;
    const auto [g16, g32] = best_gflops(
        flops, 8, [&] { onednn_bf16_gemm(false, true, M, N, K, 1.0f, ah.data(), K, bh.data(), K, 0.0f, cf.data(), N); },
        [&] { gemm(false, true, M, N, K, 1.0f, af.data(), K, bf.data(), K, 0.0f, cf.data(), N); });
    if (g16 >= kMargin * g32)
      return Backend{true, fmt::format("{} ({}: {:.0f} GFLOP/s, fp32 BLAS {:.0f})", onednn, impl, g16, g32)};
    return Backend{false, fmt::format("fp32 BLAS on bf16 values ({} ({}) measured {:.0f} GFLOP/s against fp32 BLAS's "
                                      "{:.0f}: this CPU's bf16 instructions are no faster than its fp32 FMAs)",
                                      onednn, impl, g16, g32)};
  }();
  return b;
}

}  // namespace

bool bf16_gemm_fast() { return backend().fast; }

std::string bf16_gemm_kernel() { return backend().name; }

Bf16Operand round_to_bf16(const CpuCtx& ctx, const float* x, int64_t n, std::vector<float>& f32,
                          std::vector<uint16_t>& bits) {
  if (bf16_gemm_fast()) {
    bits.resize(static_cast<size_t>(n));
    pack_bf16(ctx, x, bits.data(), n);
    return {.bits = bits.data()};
  }
  f32.resize(static_cast<size_t>(n));
  float* y = f32.data();
  parallel_for(ctx, n, 1 << 14, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) y[i] = bf16_bits_to_f32(f32_to_bf16_bits(x[i]));
  });
  return {.f32 = y};
}

Bf16Operand round_to_bf16_in_place(const CpuCtx& ctx, float* x, int64_t n, std::vector<uint16_t>& bits) {
  if (bf16_gemm_fast()) {
    bits.resize(static_cast<size_t>(n));
    pack_bf16(ctx, x, bits.data(), n);
    return {.bits = bits.data()};
  }
  round_bf16_values(ctx, x, n);
  return {.f32 = x};
}

Bf16Operand exact_bf16(const CpuCtx& ctx, const float* x, int64_t n, std::vector<uint16_t>& bits) {
  if (!bf16_gemm_fast()) return {.f32 = x};
  bits.resize(static_cast<size_t>(n));
  pack_bf16(ctx, x, bits.data(), n);  // bf16 values: rounding gives their bits back
  return {.bits = bits.data()};
}

void gemm_bf16(const CpuCtx& ctx, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
               const Bf16Operand& A, int64_t lda, const Bf16Operand& B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if constexpr (cuda::cuda_built()) {
    if (ctx.gpu) {  // device bit patterns (Linear, OutputLayer on --device cuda)
      CLAW_CHECK(A.bits && B.bits, "gemm_bf16 on the GPU takes bf16 bit patterns in device memory");
      return cuda::gemm_bf16(*ctx.gpu, trans_a, trans_b, M, N, K, alpha, A.bits, lda, B.bits, ldb, beta, C, ldc);
    }
  }
  if (A.bits && B.bits && K > 0 && M > 0 && N > 0) {
    CLAW_CHECK(!ctx.gpu, "oneDNN bf16 products run on the CPU");
    onednn_bf16_gemm(trans_a, trans_b, M, N, K, alpha, A.bits, lda, B.bits, ldb, beta, C, ldc);
    return;
  }
  CLAW_CHECK(A.f32 && B.f32, "gemm_bf16: operands of one backend (round_to_bf16, exact_bf16)");
  gemm(ctx, trans_a, trans_b, M, N, K, alpha, A.f32, lda, B.f32, ldb, beta, C, ldc);
}

// 16-bit activations live where the model does: device memory under a GPU context.
#define CLAW_HALF_ON_GPU(ctx, t, name, ...)                                                          \
  do {                                                                                               \
    if constexpr (cuda::cuda_built()) {                                                              \
      if ((ctx).gpu) {                                                                               \
        CLAW_CHECK(t == DType::bf16 || t == DType::f16, "16-bit activations are bf16 or f16, not {}", \
                   dtype_name(t));                                                                   \
        return cuda::name(*(ctx).gpu, t == DType::f16, __VA_ARGS__);                                 \
      }                                                                                              \
    }                                                                                                \
  } while (0)

void round_bf16_values(const CpuCtx& ctx, float* x, int64_t n) {
  CLAW_HALF_ON_GPU(ctx, DType::bf16, round_half_values, x, n);
  parallel_for(ctx, n, 1 << 14, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) x[i] = bf16_bits_to_f32(f32_to_bf16_bits(x[i]));
  });
}

void pack_bf16(const CpuCtx& ctx, const float* x, uint16_t* y, int64_t n) {
  CLAW_HALF_ON_GPU(ctx, DType::bf16, pack_half, x, y, n);
  parallel_for(ctx, n, 1 << 14, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) y[i] = f32_to_bf16_bits(x[i]);
  });
}

void unpack_bf16(const CpuCtx& ctx, const uint16_t* x, float* y, int64_t n) {
  CLAW_HALF_ON_GPU(ctx, DType::bf16, unpack_half, x, y, n);
  parallel_for(ctx, n, 1 << 14, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) y[i] = bf16_bits_to_f32(x[i]);
  });
}

void round_half_values(const CpuCtx& ctx, DType t, float* x, int64_t n) {
  CLAW_HALF_ON_GPU(ctx, t, round_half_values, x, n);
  if (t == DType::bf16) return round_bf16_values(ctx, x, n);
  CLAW_CHECK(t == DType::f16, "16-bit activations are bf16 or f16, not {}", dtype_name(t));
  parallel_for(ctx, n, 1 << 14, [&](int64_t lo, int64_t hi) {
    uint16_t bits[1024];
    for (int64_t b = lo; b < hi; b += 1024) {
      const int64_t k = std::min<int64_t>(1024, hi - b);
      convert(DType::f32, x + b, DType::f16, bits, k);
      convert(DType::f16, bits, DType::f32, x + b, k);
    }
  });
}

void pack_half(const CpuCtx& ctx, DType t, const float* x, uint16_t* y, int64_t n) {
  CLAW_HALF_ON_GPU(ctx, t, pack_half, x, y, n);
  if (t == DType::bf16) return pack_bf16(ctx, x, y, n);
  CLAW_CHECK(t == DType::f16, "16-bit activations are bf16 or f16, not {}", dtype_name(t));
  parallel_for(ctx, n, 1 << 14, [&](int64_t lo, int64_t hi) { convert(DType::f32, x + lo, DType::f16, y + lo, hi - lo); });
}

void unpack_half(const CpuCtx& ctx, DType t, const uint16_t* x, float* y, int64_t n) {
  CLAW_HALF_ON_GPU(ctx, t, unpack_half, x, y, n);
  if (t == DType::bf16) return unpack_bf16(ctx, x, y, n);
  CLAW_CHECK(t == DType::f16, "16-bit activations are bf16 or f16, not {}", dtype_name(t));
  parallel_for(ctx, n, 1 << 14, [&](int64_t lo, int64_t hi) { convert(DType::f16, x + lo, DType::f32, y + lo, hi - lo); });
}

#undef CLAW_HALF_ON_GPU

std::string cpu_precision_flags() {
  std::ifstream in("/proc/cpuinfo");
  std::set<std::string> have;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("flags", 0) != 0) continue;
    std::istringstream words(line.substr(line.find(':') + 1));
    for (std::string w; words >> w;) have.insert(w);
    break;
  }
  std::string out;
  for (const char* f : {"avx2", "fma", "f16c", "avx512f", "avx512_vnni", "avx512_bf16", "avx512_fp16", "amx_tile",
                        "amx_bf16", "amx_int8"})
    if (have.contains(f)) out += (out.empty() ? "" : " ") + std::string(f);
  return out.empty() ? "(none of the listed)" : out;
}

double measure_bf16_gemm_gflops(int64_t n, double seconds) {
  // oneDNN's bf16 matmul itself, whichever backend training uses.
  std::vector<uint16_t> a(static_cast<size_t>(n * n)), b(a.size());
  std::vector<float> c(a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    a[i] = f32_to_bf16_bits(static_cast<float>(i % 7) * 0.125f);
    b[i] = f32_to_bf16_bits(static_cast<float>(i % 5) * 0.25f);
  }
  const double flops = 2.0 * static_cast<double>(n) * n * n;
  const auto run = [&] { onednn_bf16_gemm(false, false, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n); };
  run();
  double best = 0, spent = 0;
  while (spent < seconds) {
    const auto t0 = std::chrono::steady_clock::now();
    run();
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    spent += dt;
    best = std::max(best, flops / dt / 1e9);
  }
  return best;
}

}  // namespace claw::kernels
