// Low-precision weights: the GGUF block layouts and their rounding, the
// linear layer over them against an fp64 product of the same quantized
// operands, batch invariance, and the AVX-512 VNNI, AVX2 and portable
// kernels bitwise equal.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "claw/core/dtype_convert.h"
#include "claw/kernels/cpu/quant.h"
#include "claw/kernels/cpu/quant_panel.h"

namespace claw::kernels {
namespace {

std::vector<float> randn(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d;
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = d(rng);
  return v;
}

constexpr WeightType kAll[] = {WeightType::f32, WeightType::bf16, WeightType::f16, WeightType::q8_0, WeightType::q4_0};

TEST(Quant, Names) {
  for (WeightType t : kAll) EXPECT_EQ(parse_weight_type(weight_type_name(t)), t);
  EXPECT_EQ(parse_weight_type("Q4_0"), WeightType::q4_0);
  EXPECT_EQ(parse_weight_type("Q4_K"), WeightType::q4_k);  // written as llama.cpp's reference quantizer does
  EXPECT_EQ(parse_weight_type("IQ4_XS"), WeightType::iq4_xs);
  EXPECT_FALSE(parse_weight_type("q8_k"));                  // an activation type
  EXPECT_FALSE(parse_weight_type("q4_k_m"));                // a file's recipe, not a type
  EXPECT_FALSE(weight_type_fits(WeightType::q8_0, 48));
  EXPECT_TRUE(weight_type_fits(WeightType::bf16, 48));
  EXPECT_EQ(weight_row_bytes(WeightType::q4_0, 64), 36u);
  EXPECT_EQ(weight_row_bytes(WeightType::q8_0, 64), 68u);
}

TEST(Quant, Q8_0BlockLayout) {
  std::vector<float> x(32);
  for (int k = 0; k < 32; ++k) x[k] = (k - 16) * 0.5f;  // max |x| = 8 at k = 0
  BlockQ8_0 b;
  quantize_rows(WeightType::q8_0, x.data(), &b, 1, 32);
  EXPECT_EQ(f16_to_f32(b.d), f16_to_f32(f32_to_f16(8.0f / 127)));
  EXPECT_EQ(b.qs[0], -127);
  EXPECT_EQ(b.qs[16], 0);
  EXPECT_EQ(b.qs[24], static_cast<int8_t>(std::round(4.0f * 127 / 8)));
}

TEST(Quant, Q4_0BlockLayout) {
  // Values that are exactly d (q - 8) with d = 0.25: the element of largest
  // magnitude is -2 (q = 0); element k is in the low nibble of byte k, k + 16
  // in the high nibble.
  std::vector<float> x(32);
  for (int k = 0; k < 32; ++k) x[k] = 0.25f * ((k * 5) % 16 - 8);
  x[3] = -2.0f;
  BlockQ4_0 b;
  quantize_rows(WeightType::q4_0, x.data(), &b, 1, 32);
  EXPECT_EQ(f16_to_f32(b.d), 0.25f);
  for (int k = 0; k < 16; ++k) {
    EXPECT_EQ(b.qs[k] & 15, static_cast<int>(x[k] / 0.25f) + 8) << k;
    EXPECT_EQ(b.qs[k] >> 4, static_cast<int>(x[k + 16] / 0.25f) + 8) << k;
  }
  std::vector<float> back(32);
  dequantize_rows(WeightType::q4_0, &b, back.data(), 1, 32);
  EXPECT_EQ(back, x);
}

TEST(Quant, MatricesSpeakGgufBytes) {
  const int64_t rows = 3, K = 64;
  auto w = randn(rows * K, 11);
  for (WeightType t : kAll) {
    std::vector<uint8_t> g(weight_row_bytes(t, K) * rows);
    quantize_rows(t, w.data(), g.data(), rows, K);
    const WeightMatrix a = WeightMatrix::quantize({1}, t, w.data(), rows, K);
    const WeightMatrix b = WeightMatrix::from_bytes(t, rows, K, g);
    EXPECT_EQ(a.gguf_bytes(), g) << weight_type_name(t);
    EXPECT_EQ(b.gguf_bytes(), g) << weight_type_name(t);
    std::vector<float> x(rows * K), y(rows * K);
    dequantize_rows(t, g.data(), x.data(), rows, K);
    b.dequantize(y.data());
    EXPECT_EQ(x, y) << weight_type_name(t);
  }
}

TEST(Quant, RoundTripError) {
  const int64_t rows = 8, K = 256;
  auto w = randn(rows * K, 1);
  for (WeightType t : kAll) {
    std::vector<uint8_t> q(weight_row_bytes(t, K) * rows);
    std::vector<float> back(rows * K);
    quantize_rows(t, w.data(), q.data(), rows, K);
    dequantize_rows(t, q.data(), back.data(), rows, K);
    for (int64_t b = 0; b < rows * K / 32; ++b) {
      float amax = 0;
      for (int k = 0; k < 32; ++k) amax = std::max(amax, std::fabs(w[b * 32 + k]));
      // Half a step of each grid (plus the f16 rounding of the scale); q4_0's
      // grid d (q - 8) reaches 8|d| on one side only, so a whole step there.
      const float tol = t == WeightType::f32    ? 0
                        : t == WeightType::bf16 ? amax / 256
                        : t == WeightType::f16  ? amax / 2048
                        : t == WeightType::q8_0 ? amax / 127 * 0.502f + amax * 1e-3f
                                                : amax / 8 * 1.002f + amax * 1e-3f;
      for (int k = 0; k < 32; ++k)
        ASSERT_LE(std::fabs(back[b * 32 + k] - w[b * 32 + k]), tol) << weight_type_name(t) << " block " << b;
    }
  }
}

// What the layer computes, in fp64: the weights dequantized, and for the
// integer types the inputs quantized to blocks of 32 int8 as llama.cpp's q8_0
// (q = x (127 / max|x|) rounded half to even, d = max|x| / 127 in f16).
std::vector<double> reference(WeightType t, const std::vector<float>& x, const WeightMatrix& W,
                              const std::vector<float>& b, int64_t M) {
  const int64_t N = W.rows(), K = W.cols();
  std::vector<float> w(N * K);
  W.dequantize(w.data());
  std::vector<double> xr(x.begin(), x.end());
  if (t == WeightType::f16)  // the inputs in f16, llama.cpp's vec-dot type for f16 weights
    for (size_t i = 0; i < xr.size(); ++i) xr[i] = f16_to_f32(f32_to_f16(x[i]));
  if (t == WeightType::q8_0 || t == WeightType::q4_0)
    for (int64_t blk = 0; blk < M * K / 32; ++blk) {
      float amax = 0;
      for (int k = 0; k < 32; ++k) amax = std::max(amax, std::fabs(x[blk * 32 + k]));
      const float d = f16_to_f32(f32_to_f16(amax / 127)), id = amax != 0 ? 127 / amax : 0;
      for (int k = 0; k < 32; ++k) xr[blk * 32 + k] = double(d) * std::nearbyint(x[blk * 32 + k] * id);
    }
  std::vector<double> out(M * N);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double s = b[n];
      for (int64_t k = 0; k < K; ++k) s += xr[m * K + k] * w[n * K + k];
      out[m * N + n] = s;
    }
  return out;
}

TEST(Quant, LinearMatchesFp64OfTheQuantizedOperands) {
  for (auto [M, K, N] : {std::tuple{1, 768, 37}, {5, 64, 9}, {13, 128, 130}, {4, 32, 4}}) {
    auto x = randn(M * K, 2), w = randn(N * K, 3), b = randn(N, 4);
    for (WeightType t : kAll) {
      const WeightMatrix W = WeightMatrix::quantize({2}, t, w.data(), N, K);
      std::vector<float> out(M * N);
      weight_linear_forward({2}, out.data(), x.data(), W, b.data(), M);
      const auto ref = reference(t, x, W, b, M);
      for (int64_t i = 0; i < M * N; ++i)
        ASSERT_NEAR(out[i], ref[i], 2e-5 * K) << weight_type_name(t) << " " << M << "x" << K << "x" << N << " @" << i;
    }
  }
}

TEST(Quant, RowsDoNotDependOnTheBatchOrThreads) {
  const int64_t K = 160, N = 203, M = 17;
  auto x = randn(M * K, 5), w = randn(N * K, 6);
  for (WeightType t : kAll) {
    const WeightMatrix W = WeightMatrix::quantize({1}, t, w.data(), N, K);
    std::vector<float> all(M * N);
    weight_linear_forward({2}, all.data(), x.data(), W, nullptr, M);
    for (int threads : {1, 3})
      for (int64_t m0 = 0; m0 < M; m0 += 4)
        for (int64_t rows = 1; m0 + rows <= M; rows += 3) {
          std::vector<float> part(rows * N);
          weight_linear_forward({threads}, part.data(), x.data() + m0 * K, W, nullptr, rows);
          ASSERT_EQ(std::memcmp(part.data(), all.data() + m0 * N, part.size() * sizeof(float)), 0)
              << weight_type_name(t) << " rows [" << m0 << ", " << m0 + rows << ") on " << threads << " threads";
        }
  }
}

// The activations as the layer quantizes them, by the definition (llama.cpp's
// q8_0, as above): quants, scales, and -offset x block sums.
struct QuantizedActivations {
  std::vector<int8_t> q;
  std::vector<float> d;
  std::vector<int32_t> c;
};
QuantizedActivations quantize_by_definition(const std::vector<float>& x, int32_t offset) {
  const size_t blocks = x.size() / 32;
  QuantizedActivations a{std::vector<int8_t>(x.size()), std::vector<float>(blocks), std::vector<int32_t>(blocks)};
  for (size_t blk = 0; blk < blocks; ++blk) {
    float amax = 0;
    for (int k = 0; k < 32; ++k) amax = std::max(amax, std::fabs(x[blk * 32 + k]));
    a.d[blk] = f16_to_f32(f32_to_f16(amax / 127));
    const float id = amax != 0 ? 127 / amax : 0;
    int32_t sum = 0;
    for (int k = 0; k < 32; ++k) {
      a.q[blk * 32 + k] = static_cast<int8_t>(std::nearbyint(x[blk * 32 + k] * id));
      sum += a.q[blk * 32 + k];
    }
    a.c[blk] = -offset * sum;
  }
  return a;
}

TEST(Quant, InstructionSetsAgreeBitwise) {
  using namespace quant_detail;
  const int64_t K = 256, N = 75;  // tiles of 32 rows: 2 full and one of 11 (a group of 3)
  std::vector<std::pair<const char*, PanelFn>> isas;
#if defined(__x86_64__)
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) isas.push_back({"avx2", panel_avx2});
  if (__builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512vl"))
    isas.push_back({"avx512_vnni", panel_avx512_vnni});
#endif
  size_t checked = 0;
  for (const int64_t M : {1, 2, 3, 7}) {  // every register tile of input rows
    auto x = randn(M * K, 7), w = randn(N * K, 8), b = randn(N, 9);
    for (WeightType t : {WeightType::q8_0, WeightType::q4_0}) {
      const WeightMatrix W = WeightMatrix::quantize({1}, t, w.data(), N, K);
      // The block sums times -offset (quant.h: 128 for q8_0, 8 for q4_0).
      const QuantizedActivations xa = quantize_by_definition(x, t == WeightType::q8_0 ? 128 : 8);
      const PanelArgs proto{nullptr,
                            N,
                            xa.q.data(),
                            xa.d.data(),
                            xa.c.data(),
                            M,
                            K,
                            W.data(),
                            reinterpret_cast<const uint16_t*>(W.data() + W.scales_offset()),
                            t,
                            b.data()};
      const int64_t tiles = (N + kTileRows - 1) / kTileRows;
      std::vector<float> want(M * N);
      PanelArgs a = proto;
      a.out = want.data();
      panel_generic(a, 0, tiles);
      for (auto [name, fn] : isas) {
        std::vector<float> got(M * N, -1);
        a.out = got.data();
        fn(a, 0, 1);  // panels of any split
        fn(a, 1, tiles);
        EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0)
            << name << " " << weight_type_name(t) << " M=" << M;
        ++checked;
      }
    }
  }
  EXPECT_EQ(checked, 4 * 2 * isas.size());
  std::printf("quantized kernels checked against the portable one: %zu; in use: %s\n", isas.size(),
              quant_kernel_isa().c_str());
}

// The layer quantizes its inputs as the definition says, halves away from
// zero (std::round of x * (1 / d)), with every instruction set: each
// quantizer gives the bytes computed here, and the layer's output equals the
// portable panel's on them.
TEST(Quant, ActivationsRoundAsStdRound) {
  using namespace quant_detail;
  const int64_t K = 128, N = 40;
  // Blocks whose max is 127 (d = 1, so x * id = x): halves of both signs,
  // values just below a half, and random ones.
  const float edge[] = {127, 0.5f, -0.5f, 1.5f, -2.5f, 126.5f, -126.5f, 0.49999997f, -0.49999997f,
                        2.4999998f, 0, -0.0f, 3.5f, -4.5f, 64.5f, -100.5f};
  for (const int64_t M : {1, 3, 130}) {  // 130 x 4 blocks: quantized on two threads
    auto x = randn(M * K, 10), w = randn(N * K, 11);
    for (int64_t blk = 0; blk < M * K / 32; blk += 2)
      for (int k = 0; k < 16; ++k) x[blk * 32 + 2 * k] = edge[k];
    for (WeightType t : {WeightType::q8_0, WeightType::q4_0}) {
      const WeightMatrix W = WeightMatrix::quantize({1}, t, w.data(), N, K);
      const int32_t offset = t == WeightType::q8_0 ? 128 : 8;
      const QuantizedActivations xa = quantize_by_definition(x, offset);
      const std::vector<int8_t>& xq = xa.q;
      const std::vector<float>& xd = xa.d;
      const std::vector<int32_t>& xc = xa.c;
      std::vector<std::pair<const char*, QuantizeFn>> quantizers = {{"generic", quantize_generic}};
#if defined(__x86_64__)
      if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) quantizers.push_back({"avx2", quantize_avx2});
#endif
      for (auto [name, quantize] : quantizers) {
        std::vector<int8_t> q(xq.size(), 99);
        std::vector<float> d(xd.size(), -1);
        std::vector<int32_t> c(xc.size(), 99);
        quantize(x.data(), M * K / 32, offset, q.data(), d.data(), c.data());
        EXPECT_EQ(q, xq) << name;
        EXPECT_EQ(std::memcmp(d.data(), xd.data(), d.size() * sizeof(float)), 0) << name;
        EXPECT_EQ(c, xc) << name;
      }
      std::vector<float> want(M * N), got(M * N);
      const PanelArgs a{want.data(), N, xq.data(), xd.data(), xc.data(), M, K, W.data(),
                        reinterpret_cast<const uint16_t*>(W.data() + W.scales_offset()), t, nullptr};
      panel_generic(a, 0, (N + kTileRows - 1) / kTileRows);
      weight_linear_forward({2}, got.data(), x.data(), W, nullptr, M);
      EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0)
          << weight_type_name(t) << " M=" << M;
    }
  }
}

}  // namespace
}  // namespace claw::kernels
