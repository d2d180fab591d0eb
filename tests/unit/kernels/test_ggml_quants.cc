// ggml's types (kernels/cpu/ggml_quants.h): the products against fp64 of
// the dequantized operands, the same bits from the portable and the AVX2
// build, and the layer's rows independent of the batch. (Their bytes against
// gguf-py and llama.cpp's own kernels: tests/e2e/serve/gguf_quants.py.)
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "claw/core/dtype_convert.h"
#include "claw/kernels/cpu/ggml_blocks.h"
#include "claw/kernels/cpu/ggml_quants.h"
#include "claw/kernels/cpu/paged_attention.h"
#include "claw/kernels/cpu/quant.h"

namespace claw::kernels {
namespace {

constexpr GgmlType kRowTypes[] = {GgmlType::f16,  GgmlType::q4_0, GgmlType::q4_1, GgmlType::q5_0,   GgmlType::q5_1,
                                  GgmlType::q8_0, GgmlType::q2_K, GgmlType::q3_K, GgmlType::q4_K,   GgmlType::q5_K,
                                  GgmlType::q6_K, GgmlType::iq4_nl, GgmlType::iq4_xs};

// Rows of random blocks: every bit pattern is a valid block but for the f16
// scales, which are drawn as small finite values.
std::vector<uint8_t> random_rows(GgmlType t, int64_t rows, int64_t K, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> b(ggml_row_bytes(t, K) * rows);
  for (uint8_t& x : b) x = static_cast<uint8_t>(rng());
  const GgmlTypeInfo& info = *ggml_type_info(uint32_t(t));
  std::normal_distribution<float> d(0, 0.01f);
  auto scale = [&](uint8_t* p) {
    const uint16_t h = f32_to_f16(d(rng));
    std::memcpy(p, &h, 2);
  };
  for (size_t at = 0; at < b.size(); at += info.block_bytes) {
    uint8_t* p = b.data() + at;
    switch (t) {
      case GgmlType::f16:
        for (size_t i = 0; i < info.block_bytes; i += 2) scale(p + i);
        break;
      case GgmlType::q2_K: scale(p + 80), scale(p + 82); break;
      case GgmlType::q3_K: scale(p + 108); break;
      case GgmlType::q6_K: scale(p + 208); break;
      case GgmlType::q4_1:
      case GgmlType::q5_1:
      case GgmlType::q4_K:
      case GgmlType::q5_K: scale(p), scale(p + 2); break;
      default: scale(p); break;  // q4_0, q5_0, q8_0, iq4_nl, iq4_xs: d first
    }
  }
  return b;
}

// The activations as the vec-dot type holds them, back in fp64.
std::vector<double> activations_back(GgmlType xt, const std::vector<uint8_t>& xq, int64_t K) {
  std::vector<double> x(static_cast<size_t>(K));
  for (int64_t k = 0; k < K; ++k) {
    if (xt == GgmlType::f16) {
      uint16_t h;
      std::memcpy(&h, xq.data() + 2 * k, 2);
      x[k] = f16_to_f32(h);
    } else if (xt == GgmlType::q8_K) {
      const auto* b = reinterpret_cast<const ggml_detail::BlockQ8K*>(xq.data()) + k / 256;
      x[k] = double(b->d) * b->qs[k % 256];
    } else {
      const size_t bytes = xt == GgmlType::q8_1 ? 36 : 34;
      const uint8_t* b = xq.data() + (k / 32) * bytes;
      uint16_t h;
      std::memcpy(&h, b, 2);
      x[k] = double(f16_to_f32(h)) * static_cast<int8_t>(b[(xt == GgmlType::q8_1 ? 4 : 2) + k % 32]);
    }
  }
  return x;
}

TEST(GgmlQuants, ProductsAreTheDequantizedOperandsInFp64) {
  const int64_t K = 512, N = 7;
  std::mt19937 rng(3);
  std::normal_distribution<float> nd;
  std::vector<float> x(K);
  for (float& v : x) v = nd(rng);
  for (GgmlType t : kRowTypes) {
    const std::vector<uint8_t> w = random_rows(t, N, K, 5);
    std::vector<float> wf(N * K);
    ggml_dequantize(t, w.data(), wf.data(), N * K);
    const GgmlType xt = ggml_vec_dot_type(t);
    std::vector<uint8_t> xq(ggml_row_bytes(xt, K));
    ggml_quantize_activations(xt, x.data(), xq.data(), K);
    const std::vector<double> xb = activations_back(xt, xq, K);
    const size_t rb = ggml_row_bytes(t, K);
    for (int64_t n = 0; n < N; ++n) {
      double want = 0, size = 0;
      for (int64_t k = 0; k < K; ++k) want += double(wf[n * K + k]) * xb[k], size += std::fabs(wf[n * K + k] * xb[k]);
      if (xt == GgmlType::q8_1)  // a block's m meets the activations' sum as q8_1 holds it: s = d sum(q) in f16
        for (int64_t b = 0; b < K / 32; ++b) {
          const uint8_t* a = xq.data() + b * 36;
          uint16_t d, s, m;
          std::memcpy(&d, a, 2), std::memcpy(&s, a + 2, 2);
          std::memcpy(&m, w.data() + n * ggml_row_bytes(t, K) + b * ggml_type_info(uint32_t(t))->block_bytes + 2, 2);
          int32_t sum = 0;
          for (int k = 0; k < 32; ++k) sum += static_cast<int8_t>(a[4 + k]);
          want += double(f16_to_f32(m)) * (double(f16_to_f32(s)) - double(f16_to_f32(d)) * sum);
        }
      const float got = ggml_vec_dot(t, w.data() + n * rb, xq.data(), K);
      EXPECT_NEAR(got, want, 1e-6 * size) << ggml_type_label(uint32_t(t)) << " row " << n;
    }
  }
}

TEST(GgmlQuants, BuildsAgreeBitwiseAndRowsDoNotDependOnTheBatch) {
  const int64_t K = 768, N = 9, M = 5;
  std::mt19937 rng(4);
  std::normal_distribution<float> nd;
  std::vector<float> x(M * K), bias(N);
  for (float& v : x) v = nd(rng);
  for (float& v : bias) v = nd(rng);
  for (GgmlType t : kRowTypes) {
    const std::vector<uint8_t> w = random_rows(t, N, K, 6);
    const GgmlType xt = ggml_vec_dot_type(t);
    const size_t xb = ggml_row_bytes(xt, K), rb = ggml_row_bytes(t, K);
    std::vector<uint8_t> xq(xb * M);
    for (int64_t m = 0; m < M; ++m) ggml_quantize_activations(xt, x.data() + m * K, xq.data() + m * xb, K);
    std::vector<float> all(M * N), one(N);
    ggml_detail::rows_panel_generic(t, w.data(), rb, 0, N, K, xq.data(), xb, M, all.data(), N, bias.data());
#if defined(__x86_64__)
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c")) {
      std::vector<float> avx2(M * N);
      ggml_detail::rows_panel_avx2(t, w.data(), rb, 0, N, K, xq.data(), xb, M, avx2.data(), N, bias.data());
      EXPECT_EQ(std::memcmp(avx2.data(), all.data(), all.size() * 4), 0) << ggml_type_label(uint32_t(t));
    }
#endif
    for (int64_t m = 0; m < M; ++m) {  // row m alone, two rows of weights at a time
      for (int64_t n0 = 0; n0 < N; n0 += 2)
        ggml_rows_panel(t, w.data(), rb, n0, std::min(N, n0 + 2), K, xq.data() + m * xb, xb, 1, one.data(), N,
                        bias.data());
      EXPECT_EQ(std::memcmp(one.data(), all.data() + m * N, N * 4), 0) << ggml_type_label(uint32_t(t)) << " " << m;
    }
    // Through the linear layer (quant.h) of a WeightMatrix holding the rows
    // (q8_0 and q4_0 have a kernel layout and products of their own there,
    // f16 the fp32 tile's: test_quant.cc).
    if (!is_ggml_rows(*weight_type_of(t)) || t == GgmlType::f16) continue;
    const WeightMatrix W = WeightMatrix::from_bytes(*weight_type_of(t), N, K, w);
    std::vector<float> layer(M * N);
    weight_linear_forward({2}, layer.data(), x.data(), W, bias.data(), M);
    EXPECT_EQ(std::memcmp(layer.data(), all.data(), all.size() * 4), 0) << ggml_type_label(uint32_t(t));
  }
}

// A q8_0 KV cache holds a row as llama.cpp's q8_0 blocks (the activations'
// quantization above, which gguf_quants.py holds to llama.cpp's bytes).
TEST(GgmlQuants, KvCacheQ8_0IsLlamaCppsQ8_0) {
  const int64_t D = 128;
  std::mt19937 rng(8);
  std::normal_distribution<float> nd;
  std::vector<float> x(D);
  for (float& v : x) v = nd(rng);
  x[5] = 0;
  std::vector<int8_t> q(2 * D);
  std::vector<float> scales(2 * D / 32);
  const KvView v{KvDtype::q8_0, q.data(), scales.data()};
  kv_store_row(v, 1, x.data(), D);
  std::vector<uint8_t> ref(ggml_row_bytes(GgmlType::q8_0, D));
  ggml_quantize_activations(GgmlType::q8_0, x.data(), ref.data(), D);
  for (int64_t b = 0; b < D / 32; ++b) {
    uint16_t d;
    std::memcpy(&d, ref.data() + b * 34, 2);
    EXPECT_EQ(scales[D / 32 + b], f16_to_f32(d)) << b;
    EXPECT_EQ(std::memcmp(q.data() + D + b * 32, ref.data() + b * 34 + 2, 32), 0) << b;
  }
}

}  // namespace
}  // namespace claw::kernels
