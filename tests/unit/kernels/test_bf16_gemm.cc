// BF16 products (kernels/cpu/bf16_gemm.h): oneDNN's matmul and the fp32
// path agree with a double-precision product of the same bf16 values, for
// every transpose, alpha, beta and padded strides; FP8 values under their
// scales are bf16 values exactly (the claim that lets FP8 recipes run on
// bf16 hardware).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "claw/core/block_formats.h"
#include "claw/core/dtype_convert.h"
#include "claw/core/storage.h"
#include "claw/kernels/cpu/bf16_gemm.h"

namespace claw::kernels {
namespace {

float bf16_round(float x) { return bf16_bits_to_f32(f32_to_bf16_bits(x)); }

TEST(Bf16Gemm, BothBackendsMatchADoubleProductOfTheBf16Values) {
  const CpuCtx ctx{2};
  std::mt19937 rng(7);
  std::normal_distribution<float> nd;
  const int64_t M = 37, N = 53, K = 71, pad = 5;
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (float alpha : {1.0f, 0.375f})
        for (float beta : {0.0f, 1.0f}) {
          // Stored shapes with padded row strides.
          const int64_t ar = ta ? K : M, ac = ta ? M : K, br = tb ? N : K, bc = tb ? K : N;
          const int64_t lda = ac + pad, ldb = bc + pad, ldc = N + pad;
          std::vector<float> a(ar * lda), b(br * ldb), c0(M * ldc);
          for (float& v : a) v = bf16_round(nd(rng));
          for (float& v : b) v = bf16_round(nd(rng));
          for (float& v : c0) v = nd(rng);
          std::vector<uint16_t> ab(a.size()), bb(b.size());
          for (size_t i = 0; i < a.size(); ++i) ab[i] = f32_to_bf16_bits(a[i]);
          for (size_t i = 0; i < b.size(); ++i) bb[i] = f32_to_bf16_bits(b[i]);
          auto A = [&](int64_t i, int64_t k) { return static_cast<double>(ta ? a[k * lda + i] : a[i * lda + k]); };
          auto B = [&](int64_t k, int64_t j) { return static_cast<double>(tb ? b[j * ldb + k] : b[k * ldb + j]); };
          std::vector<float> onednn = c0, fp32 = c0;
          onednn_bf16_gemm(ta, tb, M, N, K, alpha, ab.data(), lda, bb.data(), ldb, beta, onednn.data(), ldc);
          gemm_bf16(ctx, ta, tb, M, N, K, alpha, Bf16Operand{.f32 = a.data()}, lda, Bf16Operand{.f32 = b.data()}, ldb,
                    beta, fp32.data(), ldc);
          for (int64_t i = 0; i < M; ++i)
            for (int64_t j = 0; j < N; ++j) {
              double ref = 0, mag = 0;
              for (int64_t k = 0; k < K; ++k) {
                ref += A(i, k) * B(k, j);
                mag += std::fabs(A(i, k) * B(k, j));
              }
              ref = alpha * ref + beta * c0[i * ldc + j];
              // fp32 accumulation in any order: K roundings of partial sums.
              const double tol = 2.0 * K * 6e-8 * (alpha * mag + std::fabs(beta * c0[i * ldc + j])) + 1e-30;
              EXPECT_NEAR(onednn[i * ldc + j], ref, tol) << "oneDNN ta=" << ta << " tb=" << tb << " alpha=" << alpha
                                                         << " beta=" << beta << " at " << i << "," << j;
              EXPECT_NEAR(fp32[i * ldc + j], ref, tol) << "fp32 ta=" << ta << " tb=" << tb;
            }
          // The padding between rows is left alone.
          for (int64_t i = 0; i < M; ++i)
            for (int64_t j = N; j < ldc; ++j) EXPECT_EQ(onednn[i * ldc + j], c0[i * ldc + j]);
        }
}

TEST(Bf16Gemm, RoundingGivesBf16ValuesInTheBackendsRepresentation) {
  const CpuCtx ctx{2};
  std::vector<float> x = {0.0f, -0.0f, 1.0f, 1.00390625f, 1.01171875f, 3.14159265f, -65504.0f, 1e-40f, 3e38f,
                          INFINITY, -INFINITY};
  std::vector<float> f32;
  std::vector<uint16_t> bits;
  const Bf16Operand q = round_to_bf16(ctx, x.data(), static_cast<int64_t>(x.size()), f32, bits);
  ASSERT_TRUE((q.bits != nullptr) == bf16_gemm_fast() && (q.f32 != nullptr) != bf16_gemm_fast());
  for (size_t i = 0; i < x.size(); ++i) {
    const float got = q.bits ? bf16_bits_to_f32(q.bits[i]) : q.f32[i];
    EXPECT_EQ(std::bit_cast<uint32_t>(got), std::bit_cast<uint32_t>(bf16_to_f32(f32_to_bf16(x[i])))) << x[i];
  }
  EXPECT_FALSE(bf16_gemm_kernel().empty());
}

// Every finite E4M3 and E5M2 value, times every power-of-two scale an MX or
// blockwise tile can carry, and every E2M1 value times every E4M3 block
// scale (NVFP4), is a bf16 value: widening its top 16 bits gives it back.
TEST(Bf16Gemm, Fp8ValuesUnderTheirScalesAreBf16Values) {
  auto exact = [](float v) { return bf16_bits_to_f32(static_cast<uint16_t>(std::bit_cast<uint32_t>(v) >> 16)) == v; };
  int64_t checked = 0;
  for (int code = 0; code < 256; ++code) {
    for (float v : {e4m3_to_f32(static_cast<uint8_t>(code)), e5m2_to_f32(static_cast<uint8_t>(code))}) {
      if (!std::isfinite(v)) continue;
      for (int e = -100; e <= 100; ++e) {
        ASSERT_TRUE(exact(std::ldexp(v, e))) << v << " * 2^" << e;
        ++checked;
      }
    }
    const float scale = e4m3_to_f32(static_cast<uint8_t>(code));
    if (!std::isfinite(scale)) continue;
    for (float m : {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f}) {
      ASSERT_TRUE(exact(m * scale)) << m << " * " << scale;
      ASSERT_TRUE(exact(-m * scale));
      checked += 2;
    }
  }
  EXPECT_GT(checked, 100000);
}

}  // namespace
}  // namespace claw::kernels
