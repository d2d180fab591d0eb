// The kernels at 16-bit storage (bfloat16, float16). The contract of
// core/storage.h: a kernel widens its 16-bit inputs exactly, computes in
// acc_t<T> = fp32 the very operations of its fp32 version, and rounds each
// output once. So every 16-bit result of an element-wise kernel (and of the
// GEMMs, which run the fp32 GEMM on widened operands) equals the fp32
// kernel's result on the widened inputs, rounded to T, bit for bit, and their
// fp32 parameter gradients are equal. The norms' row sums may be taken in
// another order (the 16-bit loop vectorises differently), so there they
// agree to fp32 rounding: one unit of T's last place for the outputs, 1e-5
// for the statistics and weight gradients. The last test shows the sums
// really are fp32: long reductions stay at fp32 accuracy.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "claw/core/storage.h"
#include "claw/kernels/cpu/activations.h"
#include "claw/kernels/cpu/adamw.h"
#include "claw/kernels/cpu/attention.h"
#include "claw/kernels/cpu/attention_offset.h"
#include "claw/kernels/cpu/cross_entropy.h"
#include "claw/kernels/cpu/dropout.h"
#include "claw/kernels/cpu/embedding.h"
#include "claw/kernels/cpu/layernorm.h"
#include "claw/kernels/cpu/linear.h"
#include "claw/kernels/cpu/reduce.h"
#include "claw/kernels/cpu/rmsnorm.h"
#include "claw/kernels/cpu/rope.h"
#include "fd.h"

namespace claw::kernels {
namespace {

using claw::testing::random_vector;

const CpuCtx ctx{2};

// The same random values in storage type T and, widened, in fp32.
template <typename T>
struct Values {
  std::vector<T> s;
  std::vector<float> f;
};
template <typename T>
Values<T> values(int64_t n, uint64_t seed, double lo = -1.0, double hi = 1.0) {
  Values<T> v;
  for (double x : random_vector(n, seed, lo, hi)) {
    v.s.push_back(narrow<T>(static_cast<float>(x)));
    v.f.push_back(widen(v.s.back()));
  }
  return v;
}

// x widened to fp32, element by element.
template <typename T>
std::vector<float> widened(const std::vector<T>& x) {
  std::vector<float> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = widen(x[i]);
  return out;
}

// got[i] is ref[i] rounded to T, bit for bit.
template <typename T>
void expect_rounded(const std::vector<T>& got, const std::vector<float>& ref, const char* what) {
  ASSERT_EQ(got.size(), ref.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i].bits, narrow<T>(ref[i]).bits) << what << " [" << i << "]";
}

// got[i] is within one unit in T's last place of ref[i], plus what a
// different order of fp32 sums may move ref[i] by (1e-6 of the largest
// magnitude, which matters only near zero); fp32 vectors within `rel` of
// each other (relative to the largest magnitude).
template <typename T>
void expect_within_ulp(const std::vector<T>& got, const std::vector<float>& ref, const char* what) {
  ASSERT_EQ(got.size(), ref.size()) << what;
  constexpr int kMantissa = std::is_same_v<T, bfloat16> ? 7 : 10;
  constexpr int kMinExp = std::is_same_v<T, bfloat16> ? -126 : -14;  // below it the spacing is fixed (subnormals)
  double scale = 0;
  for (float r : ref) scale = std::max(scale, std::abs(static_cast<double>(r)));
  for (size_t i = 0; i < got.size(); ++i) {
    const int e = ref[i] == 0 ? kMinExp : std::max(std::ilogb(ref[i]), kMinExp);
    const double ulp = std::ldexp(1.0, e - kMantissa);
    ASSERT_LE(std::abs(widen(got[i]) - ref[i]), ulp + 1e-6 * scale) << what << " [" << i << "]";
  }
}
void expect_near(const std::vector<float>& got, const std::vector<float>& ref, double rel, const char* what) {
  double scale = 0, worst = 0;
  for (size_t i = 0; i < ref.size(); ++i) scale = std::max(scale, std::abs(static_cast<double>(ref[i])));
  for (size_t i = 0; i < ref.size(); ++i) worst = std::max(worst, std::abs(static_cast<double>(got[i]) - ref[i]));
  EXPECT_LE(worst, rel * scale) << what;
}

template <typename T>
class StorageKernels : public ::testing::Test {};
using HalfTypes = ::testing::Types<bfloat16, float16>;
TYPED_TEST_SUITE(StorageKernels, HalfTypes);

TYPED_TEST(StorageKernels, Activations) {
  using T = TypeParam;
  constexpr int64_t n = 40013;  // several parallel chunks, not a multiple of the SIMD width
  auto x = values<T>(n, 1, -6, 6), up = values<T>(n, 2, -2, 2), dy = values<T>(n, 3);
  std::vector<T> y(n), dx(n), dup(n);
  std::vector<float> yf(n), dxf(n), dupf(n);
  gelu_forward(ctx, y.data(), x.s.data(), n);
  gelu_forward(ctx, yf.data(), x.f.data(), n);
  expect_rounded(y, yf, "gelu");
  gelu_backward(ctx, dx.data(), dy.s.data(), x.s.data(), n);
  gelu_backward(ctx, dxf.data(), dy.f.data(), x.f.data(), n);
  expect_rounded(dx, dxf, "gelu dx");
  swiglu_forward(ctx, y.data(), x.s.data(), up.s.data(), n);
  swiglu_forward(ctx, yf.data(), x.f.data(), up.f.data(), n);
  expect_rounded(y, yf, "swiglu");
  swiglu_backward(ctx, dx.data(), dup.data(), dy.s.data(), x.s.data(), up.s.data(), n);
  swiglu_backward(ctx, dxf.data(), dupf.data(), dy.f.data(), x.f.data(), up.f.data(), n);
  expect_rounded(dx, dxf, "swiglu dgate");
  expect_rounded(dup, dupf, "swiglu dup");
}

TYPED_TEST(StorageKernels, Norms) {
  using T = TypeParam;
  constexpr int64_t N = 37, C = 300;
  auto x = values<T>(N * C, 4, -3, 5), w = values<T>(C, 5, 0.5, 1.5), b = values<T>(C, 6), dy = values<T>(N * C, 7);
  auto dx0 = values<T>(N * C, 8);  // what an accumulating backward adds to
  std::vector<T> y(N * C);
  std::vector<float> yf(N * C), mean(N), rstd(N), meanf(N), rstdf(N);
  layernorm_forward(ctx, y.data(), mean.data(), rstd.data(), x.s.data(), w.s.data(), b.s.data(), N, C, 1e-5);
  layernorm_forward(ctx, yf.data(), meanf.data(), rstdf.data(), x.f.data(), w.f.data(), b.f.data(), N, C, 1e-5);
  expect_within_ulp(y, yf, "layernorm");
  expect_near(mean, meanf, 1e-6, "layernorm mean");
  expect_near(rstd, rstdf, 1e-6, "layernorm rstd");
  for (bool accumulate : {false, true}) {
    std::vector<T> dx = dx0.s;
    std::vector<float> dxf = dx0.f, dw(C, 0.25f), db(C, 0.5f), dwf = dw, dbf = db;
    layernorm_backward(ctx, dx.data(), dw.data(), db.data(), dy.s.data(), x.s.data(), w.s.data(), mean.data(),
                       rstd.data(), N, C, accumulate);
    layernorm_backward(ctx, dxf.data(), dwf.data(), dbf.data(), dy.f.data(), x.f.data(), w.f.data(), meanf.data(),
                       rstdf.data(), N, C, accumulate);
    expect_within_ulp(dx, dxf, "layernorm dx");
    expect_near(dw, dwf, 1e-5, "layernorm dweight");
    expect_near(db, dbf, 1e-5, "layernorm dbias");
  }
  rmsnorm_forward(ctx, y.data(), rstd.data(), x.s.data(), w.s.data(), N, C, 1e-6);
  rmsnorm_forward(ctx, yf.data(), rstdf.data(), x.f.data(), w.f.data(), N, C, 1e-6);
  expect_within_ulp(y, yf, "rmsnorm");
  expect_near(rstd, rstdf, 1e-6, "rmsnorm rstd");
  for (bool accumulate : {false, true}) {
    std::vector<T> dx = dx0.s;
    std::vector<float> dxf = dx0.f, dw(C, 0.25f), dwf = dw;
    rmsnorm_backward(ctx, dx.data(), dw.data(), dy.s.data(), x.s.data(), w.s.data(), rstd.data(), N, C, accumulate);
    rmsnorm_backward(ctx, dxf.data(), dwf.data(), dy.f.data(), x.f.data(), w.f.data(), rstdf.data(), N, C,
                     accumulate);
    expect_within_ulp(dx, dxf, "rmsnorm dx");
    expect_near(dw, dwf, 1e-5, "rmsnorm dweight");
  }
}

TYPED_TEST(StorageKernels, Linear) {
  using T = TypeParam;
  constexpr int64_t M = 33, K = 70, N = 45;
  auto x = values<T>(M * K, 9), w = values<T>(N * K, 10), b = values<T>(N, 11), dy = values<T>(M * N, 12);
  auto dx0 = values<T>(M * K, 13);
  std::vector<T> y(M * N);
  std::vector<float> yf(M * N);
  linear_forward(ctx, y.data(), x.s.data(), w.s.data(), b.s.data(), M, K, N);
  linear_forward(ctx, yf.data(), x.f.data(), w.f.data(), b.f.data(), M, K, N);
  expect_rounded(y, yf, "linear");
  linear_forward(ctx, y.data(), x.s.data(), w.s.data(), static_cast<const T*>(nullptr), M, K, N);
  linear_forward(ctx, yf.data(), x.f.data(), w.f.data(), static_cast<const float*>(nullptr), M, K, N);
  expect_rounded(y, yf, "linear without bias");
  for (bool accumulate : {false, true}) {
    std::vector<T> dx = dx0.s;
    std::vector<float> dxf = dx0.f;
    linear_backward_input(ctx, dx.data(), dy.s.data(), w.s.data(), M, K, N, accumulate);
    linear_backward_input(ctx, dxf.data(), dy.f.data(), w.f.data(), M, K, N, accumulate);
    expect_rounded(dx, dxf, "linear dx");
  }
  std::vector<float> dw(N * K, 0.125f), db(N, -0.5f), dwf = dw, dbf = db;
  linear_backward_weight(ctx, dw.data(), db.data(), dy.s.data(), x.s.data(), M, K, N);
  linear_backward_weight(ctx, dwf.data(), dbf.data(), dy.f.data(), x.f.data(), M, K, N);
  EXPECT_EQ(dw, dwf);
  EXPECT_EQ(db, dbf);
  // A frozen weight: only the bias gradient.
  linear_backward_weight(ctx, static_cast<float*>(nullptr), db.data(), dy.s.data(), x.s.data(), M, K, N);
  linear_backward_weight(ctx, static_cast<float*>(nullptr), dbf.data(), dy.f.data(), x.f.data(), M, K, N);
  EXPECT_EQ(db, dbf);
}

TYPED_TEST(StorageKernels, EmbeddingAndRope) {
  using T = TypeParam;
  constexpr int64_t B = 2, S = 5, C = 24, V = 7, P = 8, nh = 2, D = 12;
  const std::vector<int32_t> tokens = {3, 0, 3, 6, 1, 3, 3, 2, 5, 0}, positions = {0, 1, 2, 3, 4, 0, 1, 0, 1, 2};
  auto wte = values<T>(V * C, 14), wpe = values<T>(P * C, 15), dout = values<T>(B * S * C, 16);
  std::vector<T> out(B * S * C);
  std::vector<float> outf(B * S * C);
  embedding_forward(ctx, out.data(), tokens.data(), wte.s.data(), wpe.s.data(), B, S, C, positions.data());
  embedding_forward(ctx, outf.data(), tokens.data(), wte.f.data(), wpe.f.data(), B, S, C, positions.data());
  expect_rounded(out, outf, "embedding");
  std::vector<float> dwte(V * C, 0.5f), dwpe(P * C, -0.25f), dwtef = dwte, dwpef = dwpe;
  embedding_backward(ctx, dwte.data(), dwpe.data(), dout.s.data(), tokens.data(), B, S, C, positions.data());
  embedding_backward(ctx, dwtef.data(), dwpef.data(), dout.f.data(), tokens.data(), B, S, C, positions.data());
  EXPECT_EQ(dwte, dwtef);
  EXPECT_EQ(dwpe, dwpef);

  std::vector<float> cos(P * D / 2), sin(P * D / 2);
  rope_table(cos.data(), sin.data(), P, D, 10000.0);
  auto q = values<T>(B * S * nh * D, 17);
  std::vector<T> qs = q.s;
  std::vector<float> qf = q.f;
  rope_forward(ctx, qs.data(), cos.data(), sin.data(), B, S, nh, D, positions.data());
  rope_forward(ctx, qf.data(), cos.data(), sin.data(), B, S, nh, D, positions.data());
  expect_rounded(qs, qf, "rope");
  qs = q.s;
  qf = q.f;
  rope_backward(ctx, qs.data(), cos.data(), sin.data(), B, S, nh, D, positions.data());
  rope_backward(ctx, qf.data(), cos.data(), sin.data(), B, S, nh, D, positions.data());
  expect_rounded(qs, qf, "rope backward");
}

TYPED_TEST(StorageKernels, AttentionAndCrossEntropy) {
  using T = TypeParam;
  // GQA (H = 4 query heads over G = 2 key/value heads), two documents in the
  // second sequence, blocks smaller than the sequence.
  constexpr int64_t B = 2, S = 37, H = 4, G = 2, D = 16, block = 16;
  const std::vector<int32_t> seg = [] {
    std::vector<int32_t> v(B * S);
    for (int64_t t = 0; t < S; ++t) v[t] = 0, v[S + t] = t < 20 ? 0 : 20;
    return v;
  }();
  auto q = values<T>(B * S * H * D, 21), k = values<T>(B * S * G * D, 22), v = values<T>(B * S * G * D, 23);
  auto dout = values<T>(B * S * H * D, 24);
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  std::vector<T> out(B * S * H * D), dq(q.s.size()), dk(k.s.size()), dv(v.s.size());
  std::vector<float> outf(out.size()), lse(B * H * S), lsef(lse.size()), dqf(dq.size()), dkf(dk.size()),
      dvf(dv.size());
  attention_forward(ctx, out.data(), lse.data(), q.s.data(), k.s.data(), v.s.data(), B, S, H, G, D, scale,
                    seg.data(), block);
  attention_forward(ctx, outf.data(), lsef.data(), q.f.data(), k.f.data(), v.f.data(), B, S, H, G, D, scale,
                    seg.data(), block);
  expect_rounded(out, outf, "attention");
  EXPECT_EQ(lse, lsef);
  // The backward reads the saved (rounded) output, as training does.
  const std::vector<float> out_widened = widened(out);
  attention_backward(ctx, dq.data(), dk.data(), dv.data(), dout.s.data(), q.s.data(), k.s.data(), v.s.data(),
                     out.data(), lse.data(), B, S, H, G, D, scale, seg.data(), block);
  attention_backward(ctx, dqf.data(), dkf.data(), dvf.data(), dout.f.data(), q.f.data(), k.f.data(), v.f.data(),
                     out_widened.data(), lsef.data(), B, S, H, G, D, scale, seg.data(), block);
  expect_rounded(dq, dqf, "attention dq");
  expect_rounded(dk, dkf, "attention dk");
  expect_rounded(dv, dvf, "attention dv");

  constexpr int64_t N = 9, V = 50, Vp = 64;
  auto logits = values<T>(N * Vp, 25, -4, 4);
  const std::vector<int32_t> targets = {3, 49, -1, 0, 7, 7, 12, 48, 1};
  std::vector<float> losses(N), lse_ce(N), lossesf(N), lse_cef(N);
  cross_entropy_forward(ctx, losses.data(), lse_ce.data(), logits.s.data(), targets.data(), N, V, Vp);
  cross_entropy_forward(ctx, lossesf.data(), lse_cef.data(), logits.f.data(), targets.data(), N, V, Vp);
  EXPECT_EQ(losses, lossesf);
  EXPECT_EQ(lse_ce, lse_cef);
  std::vector<T> dlogits = logits.s;  // in place, as the output layer runs it
  std::vector<float> dlogitsf = logits.f;
  cross_entropy_backward(ctx, dlogits.data(), dlogits.data(), lse_ce.data(), targets.data(), 0.125f, N, V, Vp);
  cross_entropy_backward(ctx, dlogitsf.data(), dlogitsf.data(), lse_cef.data(), targets.data(), 0.125f, N, V, Vp);
  expect_rounded(dlogits, dlogitsf, "cross-entropy dlogits");
}

TYPED_TEST(StorageKernels, ReductionsAndDropout) {
  using T = TypeParam;
  constexpr int64_t n = 40009, rows = 13, cols = 17;
  auto a = values<T>(n, 26, -3, 3), b = values<T>(n, 27), w = values<T>(rows, 28);
  EXPECT_EQ(sum_squares(ctx, a.s.data(), n), sum_squares(ctx, a.f.data(), n));
  EXPECT_EQ(sum(ctx, a.s.data(), n), sum(ctx, a.f.data(), n));
  std::vector<T> y(n);
  std::vector<float> yf(n);
  add(ctx, y.data(), a.s.data(), b.s.data(), n);
  add(ctx, yf.data(), a.f.data(), b.f.data(), n);
  expect_rounded(y, yf, "add");
  std::vector<float> ref = widened(y);
  axpy(ctx, y.data(), 0.3f, b.s.data(), n);
  axpy(ctx, ref.data(), 0.3f, b.f.data(), n);
  expect_rounded(y, ref, "axpy");
  std::vector<float> y_widened = widened(y);
  scale(ctx, y.data(), -1.7f, n);
  scale(ctx, y_widened.data(), -1.7f, n);
  expect_rounded(y, y_widened, "scale");
  std::vector<T> m(a.s.begin(), a.s.begin() + rows * cols);
  std::vector<float> mf(a.f.begin(), a.f.begin() + rows * cols);
  scale_rows(ctx, m.data(), w.f.data(), rows, cols);
  scale_rows(ctx, mf.data(), w.f.data(), rows, cols);
  expect_rounded(m, mf, "scale_rows");
  std::vector<T> bad = a.s;
  EXPECT_EQ(first_non_finite(ctx, bad.data(), n), -1);
  bad[31337] = narrow<T>(std::numeric_limits<float>::infinity());
  bad[39999] = narrow<T>(std::numeric_limits<float>::quiet_NaN());
  EXPECT_EQ(first_non_finite(ctx, bad.data(), n), 31337);

  const RandomStream rng(5, 6);
  dropout_forward(ctx, y.data(), a.s.data(), n, 0.25, rng, 1000);
  dropout_forward(ctx, yf.data(), a.f.data(), n, 0.25, rng, 1000);
  expect_rounded(y, yf, "dropout");
  dropout_backward(ctx, y.data(), b.s.data(), n, 0.25, rng, 1000);
  dropout_backward(ctx, yf.data(), b.f.data(), n, 0.25, rng, 1000);
  expect_rounded(y, yf, "dropout backward");
}

TYPED_TEST(StorageKernels, AttentionWithOffsetsOverACache) {
  using T = TypeParam;
  // Two rows of a cache with room for 24 positions, 9 and 6 of them filled;
  // 3 new queries per row at the cache's lengths.
  constexpr int64_t B = 2, Tq = 3, Tk = 9, cap = 24, H = 4, G = 2, D = 8;
  const std::vector<int32_t> q_pos = {6, 3}, k_len = {9, 6};
  const AttentionOffsets off{.q_pos = q_pos.data(), .k_len = k_len.data(), .ld_kv_batch = cap * G * D};
  auto q = values<T>(B * Tq * H * D, 29), k = values<T>(B * cap * G * D, 30), v = values<T>(B * cap * G * D, 31);
  auto dout = values<T>(B * Tq * H * D, 32);
  const double sc = 0.35;
  std::vector<T> out(q.s.size());
  std::vector<float> outf(out.size()), lse(B * H * Tq), lsef(lse.size());
  attention_offset_forward(ctx, out.data(), lse.data(), q.s.data(), k.s.data(), v.s.data(), B, Tq, Tk, H, G, D, sc,
                           off);
  attention_offset_forward(ctx, outf.data(), lsef.data(), q.f.data(), k.f.data(), v.f.data(), B, Tq, Tk, H, G, D,
                           sc, off);
  expect_rounded(out, outf, "attention_offset");
  EXPECT_EQ(lse, lsef);
  const std::vector<float> out_widened = widened(out);
  // Gradient buffers start as a marker: positions past Tk of each row must keep it.
  const T marker = narrow<T>(42.0f);
  std::vector<T> dq(q.s.size()), dk(k.s.size(), marker), dv(v.s.size(), marker);
  std::vector<float> dqf(dq.size()), dkf(dk.size(), 42.0f), dvf(dv.size(), 42.0f);
  attention_offset_backward(ctx, dq.data(), dk.data(), dv.data(), dout.s.data(), q.s.data(), k.s.data(), v.s.data(),
                            out.data(), lse.data(), B, Tq, Tk, H, G, D, sc, off);
  attention_offset_backward(ctx, dqf.data(), dkf.data(), dvf.data(), dout.f.data(), q.f.data(), k.f.data(),
                            v.f.data(), out_widened.data(), lsef.data(), B, Tq, Tk, H, G, D, sc, off);
  expect_rounded(dq, dqf, "attention_offset dq");
  expect_rounded(dk, dkf, "attention_offset dk");
  expect_rounded(dv, dvf, "attention_offset dv");
}

TYPED_TEST(StorageKernels, AdamWReads16BitGradients) {
  using T = TypeParam;
  constexpr int64_t n = 50021;
  auto g = values<T>(n, 18, -1e-2, 1e-2);
  std::vector<float> p(n, 0.5f), m(n, 0.0f), v(n, 0.0f), pf = p, mf = m, vf = v;
  const AdamWHyper h{.lr = 1e-3, .weight_decay = 0.1, .grad_scale = 0.7, .step = 3};
  adamw_update(ctx, p.data(), m.data(), v.data(), g.s.data(), n, h);
  adamw_update(ctx, pf.data(), mf.data(), vf.data(), g.f.data(), n, h);
  EXPECT_EQ(p, pf);
  EXPECT_EQ(m, mf);
  EXPECT_EQ(v, vf);
}

// Sums are fp32 even though the data are 16-bit: the RMS of 8192 values near
// 1 and a length-4096 dot product come out at fp32 accuracy (a 16-bit
// running sum would be off by ~1e-2 and stop growing past 256 for bf16).
TEST(StorageAccumulation, LongReductionsAreFp32) {
  constexpr int64_t C = 8192, K = 4096;
  auto x = values<bfloat16>(C, 19, 0.9, 1.1);
  std::vector<bfloat16> w(C, narrow<bfloat16>(1.0f)), y(C);
  float rstd = 0;
  rmsnorm_forward(ctx, y.data(), &rstd, x.s.data(), w.data(), 1, C, 0.0);
  double ss = 0;
  for (float v : x.f) ss += static_cast<double>(v) * v;
  EXPECT_NEAR(rstd, 1.0 / std::sqrt(ss / C), 1e-6);

  auto a = values<bfloat16>(K, 20, 0.0, 1.0);
  std::vector<bfloat16> ones(K, narrow<bfloat16>(1.0f));
  bfloat16 out{};
  linear_forward(ctx, &out, a.s.data(), ones.data(), static_cast<const bfloat16*>(nullptr), 1, K, 1);
  double exact = 0;
  for (float v : a.f) exact += v;
  EXPECT_NEAR(widen(out), exact, exact * std::ldexp(1.0, -8));  // only the output's rounding to bf16
}

}  // namespace
}  // namespace claw::kernels
