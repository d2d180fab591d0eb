#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "claw/core/storage.h"
#include "claw/kernels/cpu/adamw.h"
#include "fd.h"

namespace claw::kernels {
namespace {

using claw::testing::max_rel_diff;
using claw::testing::random_vector;

const CpuCtx ctx{2};
constexpr int64_t kN = 100003;  // several parallel chunks, not a multiple of the SIMD width
constexpr int kSteps = 5;

// torch.optim.AdamW (decoupled weight decay) written out in double, one
// element at a time, in the order of the header.
struct NaiveAdamW {
  std::vector<double> p, m, v;
  void step(const std::vector<double>& grad, const AdamWHyper& h) {
    const double bc1 = 1.0 - std::pow(h.beta1, h.step), bc2 = 1.0 - std::pow(h.beta2, h.step);
    for (size_t i = 0; i < p.size(); ++i) {
      double g = grad[i] * h.grad_scale;
      p[i] *= 1.0 - h.lr * h.weight_decay;
      m[i] = h.beta1 * m[i] + (1.0 - h.beta1) * g;
      v[i] = h.beta2 * v[i] + (1.0 - h.beta2) * g * g;
      double denom = std::sqrt(v[i]) / std::sqrt(bc2) + h.eps;
      p[i] -= (h.lr / bc1) * m[i] / denom;
    }
  }
};

AdamWHyper hyper(int64_t step) {
  AdamWHyper h;
  h.lr = 1e-2;
  h.beta1 = 0.9;
  h.beta2 = 0.95;
  h.eps = 1e-8;
  h.weight_decay = 0.1;
  h.grad_scale = 0.7;
  h.step = step;
  return h;
}

TEST(AdamW, MatchesNaiveOverSeveralSteps) {
  auto p0 = random_vector(kN, 1);
  NaiveAdamW ref{p0, std::vector<double>(kN, 0.0), std::vector<double>(kN, 0.0)};
  std::vector<double> p = p0, m(kN, 0.0), v(kN, 0.0);
  std::vector<float> pf(p0.begin(), p0.end()), mf(kN, 0.f), vf(kN, 0.f);
  // The fp32 run's reference starts from the same fp32-rounded values.
  NaiveAdamW ref_f{std::vector<double>(pf.begin(), pf.end()), std::vector<double>(kN, 0.0),
                   std::vector<double>(kN, 0.0)};
  for (int64_t step = 1; step <= kSteps; ++step) {
    auto g = random_vector(kN, 100 + step, -2.0, 2.0);
    std::vector<float> gf(g.begin(), g.end());
    std::vector<double> g_of_f(gf.begin(), gf.end());
    adamw_update(ctx, p.data(), m.data(), v.data(), g.data(), kN, hyper(step));
    ref.step(g, hyper(step));
    adamw_update(ctx, pf.data(), mf.data(), vf.data(), gf.data(), kN, hyper(step));
    ref_f.step(g_of_f, hyper(step));
  }
  // Same operations in double; only FMA contraction may differ: ~1e-16 per
  // operation, ~10 operations per step, errors damped by beta.
  EXPECT_LT(max_rel_diff(p, ref.p), 1e-14);
  EXPECT_LT(max_rel_diff(m, ref.m), 1e-14);
  EXPECT_LT(max_rel_diff(v, ref.v, 1e-300), 1e-13);  // v > 0: purely relative
  // fp32: each step rounds p (6e-8 of |p| ~ 1) a few times; 5 steps < 1e-6.
  // A wrong bias correction or decay moves p by O(lr) = 1e-2.
  EXPECT_LT(max_rel_diff(pf, ref_f.p), 1e-6);
  EXPECT_LT(max_rel_diff(mf, ref_f.m), 1e-6);
  // v accumulates non-negative terms, so its relative error stays at a few
  // roundings per step.
  EXPECT_LT(max_rel_diff(vf, ref_f.v, 1e-300), 1e-6);
}

// Closed form of the first step: m = (1-b1) g, v = (1-b2) g^2, so the bias
// corrections cancel and p1 = p0 (1 - lr wd) - lr g / (|g| + eps). This checks
// the bias corrections independently of the formula's transcription above.
TEST(AdamW, FirstStepMovesByLearningRate) {
  auto p0 = random_vector(257, 2), g = random_vector(257, 3);
  AdamWHyper h = hyper(1);
  h.grad_scale = 1.0;
  auto p = p0;
  std::vector<double> m(257, 0.0), v(257, 0.0);
  adamw_update(ctx, p.data(), m.data(), v.data(), g.data(), 257, h);
  for (int64_t i = 0; i < 257; ++i) {
    double expect = p0[i] * (1.0 - h.lr * h.weight_decay) - h.lr * g[i] / (std::abs(g[i]) + h.eps);
    EXPECT_NEAR(p[i], expect, 1e-15) << i;
  }
}

// grad_scale multiplies the gradient, and only the gradient: a scale of 0.5
// (exact in fp32) equals halving the gradient beforehand, bitwise.
TEST(AdamW, GradScaleScalesTheGradient) {
  auto pd = random_vector(kN, 4), gd = random_vector(kN, 5);
  std::vector<float> p1(pd.begin(), pd.end()), g(gd.begin(), gd.end()), m1(kN, 0.1f), v1(kN, 0.2f);
  auto p2 = p1, m2 = m1, v2 = v1, g_half = g;
  for (float& x : g_half) x *= 0.5f;
  AdamWHyper h = hyper(3);
  h.grad_scale = 0.5;
  adamw_update(ctx, p1.data(), m1.data(), v1.data(), g.data(), kN, h);
  h.grad_scale = 1.0;
  adamw_update(ctx, p2.data(), m2.data(), v2.data(), g_half.data(), kN, h);
  EXPECT_EQ(p1, p2);
  EXPECT_EQ(m1, m2);
  EXPECT_EQ(v1, v2);
}

}  // namespace
}  // namespace claw::kernels

namespace claw::kernels {
namespace {

// 16-bit moments (the precision-aware optimizer): each step equals the fp32
// update from the widened moments, with the new moments then rounded to
// nearest even and the parameter updated from the unrounded ones.
template <typename M, typename V>
void check_16bit_moments() {
  const int64_t n = 1000;
  std::vector<float> p(n), g(n), p32(n), m32(n), v32(n);
  std::vector<M> m(n);
  std::vector<V> v(n);
  for (int64_t i = 0; i < n; ++i) {
    p[i] = p32[i] = std::sin(0.37f * i);
    m[i] = narrow<M>(0);
    v[i] = narrow<V>(0);
  }
  for (int64_t step = 1; step <= 5; ++step) {
    for (int64_t i = 0; i < n; ++i) g[i] = 1e-3f * std::cos(0.11f * i * step) + 1e-6f * step;
    for (int64_t i = 0; i < n; ++i) {
      m32[i] = widen(m[i]);
      v32[i] = widen(v[i]);
    }
    const AdamWHyper h{.lr = 1e-2, .weight_decay = 0.1, .step = step};
    adamw_update<float>(CpuCtx{1}, p32.data(), m32.data(), v32.data(), g.data(), n, h);
    adamw_update<float, float, M, V>(CpuCtx{2}, p.data(), m.data(), v.data(), g.data(), n, h);
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(p[i], p32[i]) << "step " << step << " element " << i;
      ASSERT_EQ(widen(m[i]), widen(narrow<M>(m32[i])));
      ASSERT_EQ(widen(v[i]), widen(narrow<V>(v32[i])));
    }
  }
}

TEST(AdamW, SixteenBitMomentsRoundTheFp32Update) {
  check_16bit_moments<bfloat16, bfloat16>();
  check_16bit_moments<float16, bfloat16>();
  check_16bit_moments<bfloat16, float>();
}

// fp16 masters (--main-params-dtype fp16): each step is the fp32 step of
// the widened master, rounded to nearest even into fp16; the moments, never
// rounded here, equal the fp32 kernel's bit for bit.
TEST(AdamW, Fp16MastersRoundTheFp32Update) {
  const int64_t n = 5003;  // several 1024-element blocks and a tail
  std::vector<float> g(n);
  std::vector<float16> p(n);
  for (int64_t i = 0; i < n; ++i) {
    p[i] = narrow<float16>(std::sin(0.37f * i));
    g[i] = 1e-2f * std::cos(0.11f * i);
  }
  std::vector<float> m(n, 0.0f), v(n, 0.0f), m32(n, 0.0f), v32(n, 0.0f);
  bool moved = false;
  for (int step = 1; step <= kSteps; ++step) {
    const AdamWHyper h = hyper(step);
    std::vector<float> want(n);
    for (int64_t i = 0; i < n; ++i) want[i] = widen(p[i]);
    const std::vector<float> before = want;
    adamw_update<float>(CpuCtx{1}, want.data(), m32.data(), v32.data(), g.data(), n, h);
    adamw_update<float16, float, float, float>(ctx, p.data(), m.data(), v.data(), g.data(), n, h);
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(p[i].bits, narrow<float16>(want[i]).bits) << "step " << step << " element " << i;
      ASSERT_EQ(m[i], m32[i]);
      ASSERT_EQ(v[i], v32[i]);
      moved |= widen(p[i]) != before[i];
    }
  }
  EXPECT_TRUE(moved);
}

}  // namespace
}  // namespace claw::kernels
