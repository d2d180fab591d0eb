#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "claw/kernels/cpu/activations.h"
#include "fd.h"

namespace claw::kernels {
namespace {

using claw::testing::dot;
using claw::testing::fd_max_error;
using claw::testing::max_rel_diff;
using claw::testing::random_vector;

const CpuCtx ctx{2};
constexpr int64_t kSmall = 37;      // not a multiple of the SIMD width
constexpr int64_t kLarge = 100003;  // several parallel chunks, odd

double gelu_tanh_ref(double x) {
  return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}
double swiglu_ref(double g, double u) { return g / (1.0 + std::exp(-g)) * u; }

TEST(GELU, ForwardMatchesTanhFormula) {
  auto x = random_vector(kLarge, 1, -6.0, 6.0);
  std::vector<double> y(kLarge);
  gelu_forward(ctx, y.data(), x.data(), kLarge);
  std::vector<double> ref(kLarge);
  for (int64_t i = 0; i < kLarge; ++i) ref[i] = gelu_tanh_ref(x[i]);
  // The kernel evaluates 0.5 (1 + tanh u) as sigmoid(2u); in double the two
  // differ by rounding only.
  EXPECT_LT(max_rel_diff(y, ref), 1e-14);

  // fp32 through fast_exp (a few ulp) and ~10 more roundings of 6e-8: < 1e-6.
  std::vector<float> xf(x.begin(), x.end()), yf(kLarge);
  std::vector<double> ref_f(kLarge);
  for (int64_t i = 0; i < kLarge; ++i) ref_f[i] = gelu_tanh_ref(xf[i]);
  gelu_forward(ctx, yf.data(), xf.data(), kLarge);
  EXPECT_LT(max_rel_diff(yf, ref_f), 1e-6);
}

TEST(GELU, ExtremeInputsStayFinite) {
  std::vector<float> x = {-1e4f, -100.f, -20.f, 0.f, 20.f, 100.f, 1e4f}, y(x.size()), dx(x.size());
  std::vector<float> ones(x.size(), 1.f);
  gelu_forward(ctx, y.data(), x.data(), static_cast<int64_t>(x.size()));
  gelu_backward(ctx, dx.data(), ones.data(), x.data(), static_cast<int64_t>(x.size()));
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_NEAR(y[i], x[i] > 0 ? x[i] : 0.f, 1e-6f * std::abs(x[i]) + 1e-30f) << x[i];
    EXPECT_NEAR(dx[i], x[i] > 0 ? 1.f : (x[i] < 0 ? 0.f : 0.5f), 1e-6f) << x[i];
  }
}

TEST(GELU, BackwardMatchesFiniteDifferences) {
  auto x = random_vector(kSmall, 2, -4.0, 4.0), w = random_vector(kSmall, 3);
  std::vector<double> y(kSmall), dx(kSmall, std::numeric_limits<double>::quiet_NaN());
  auto loss = [&] {
    gelu_forward(ctx, y.data(), x.data(), kSmall);
    return dot(w, y);
  };
  gelu_backward(ctx, dx.data(), w.data(), x.data(), kSmall);  // overwrites the NaNs
  EXPECT_LT(fd_max_error(x, dx, loss), 1e-6);
}

// fp32 backward against fp64: same reasoning as the forward, 1e-6. The range
// reaches x = 8, where sigmoid(2u) rounds to 1 in fp32 and 1 - sigmoid(2u) must
// not be formed by subtraction.
TEST(GELU, Fp32BackwardMatchesFp64) {
  auto x = random_vector(kLarge, 4, -8.0, 8.0), dy = random_vector(kLarge, 5);
  std::vector<float> xf(x.begin(), x.end()), dyf(dy.begin(), dy.end()), dxf(kLarge);
  std::vector<double> xr(xf.begin(), xf.end()), dyr(dyf.begin(), dyf.end()), dxr(kLarge);
  gelu_backward(ctx, dxf.data(), dyf.data(), xf.data(), kLarge);
  gelu_backward(ctx, dxr.data(), dyr.data(), xr.data(), kLarge);
  EXPECT_LT(max_rel_diff(dxf, dxr), 1e-6);
}

TEST(GELU, InPlaceMatchesOutOfPlace) {
  auto xd = random_vector(kLarge, 6, -5.0, 5.0), dyd = random_vector(kLarge, 7);
  std::vector<float> x(xd.begin(), xd.end()), dy(dyd.begin(), dyd.end()), y(kLarge), dx(kLarge);
  gelu_forward(ctx, y.data(), x.data(), kLarge);
  gelu_backward(ctx, dx.data(), dy.data(), x.data(), kLarge);
  auto y_inplace = x;
  gelu_forward(ctx, y_inplace.data(), y_inplace.data(), kLarge);
  EXPECT_EQ(y_inplace, y);
  auto dx_over_dy = dy;
  gelu_backward(ctx, dx_over_dy.data(), dx_over_dy.data(), x.data(), kLarge);
  EXPECT_EQ(dx_over_dy, dx);
  auto dx_over_x = x;
  gelu_backward(ctx, dx_over_x.data(), dy.data(), dx_over_x.data(), kLarge);
  EXPECT_EQ(dx_over_x, dx);
}

TEST(SwiGLU, ForwardMatchesNaive) {
  auto g = random_vector(kLarge, 8, -8.0, 8.0), u = random_vector(kLarge, 9, -3.0, 3.0);
  std::vector<double> y(kLarge), ref(kLarge);
  swiglu_forward(ctx, y.data(), g.data(), u.data(), kLarge);
  for (int64_t i = 0; i < kLarge; ++i) ref[i] = swiglu_ref(g[i], u[i]);
  EXPECT_LT(max_rel_diff(y, ref), 1e-14);

  // fp32 via fast_exp: a few roundings of 6e-8 on O(1) values.
  std::vector<float> gf(g.begin(), g.end()), uf(u.begin(), u.end()), yf(kLarge);
  std::vector<double> ref_f(kLarge);
  for (int64_t i = 0; i < kLarge; ++i) ref_f[i] = swiglu_ref(gf[i], uf[i]);
  swiglu_forward(ctx, yf.data(), gf.data(), uf.data(), kLarge);
  EXPECT_LT(max_rel_diff(yf, ref_f), 1e-6);
}

TEST(SwiGLU, BackwardMatchesFiniteDifferences) {
  auto g = random_vector(kSmall, 10, -5.0, 5.0), u = random_vector(kSmall, 11), w = random_vector(kSmall, 12);
  std::vector<double> y(kSmall), dg(kSmall, std::numeric_limits<double>::quiet_NaN()), du(dg);
  auto loss = [&] {
    swiglu_forward(ctx, y.data(), g.data(), u.data(), kSmall);
    return dot(w, y);
  };
  swiglu_backward(ctx, dg.data(), du.data(), w.data(), g.data(), u.data(), kSmall);
  EXPECT_LT(fd_max_error(g, dg, loss), 1e-6);
  EXPECT_LT(fd_max_error(u, du, loss), 1e-6);
}

TEST(SwiGLU, Fp32BackwardMatchesFp64AndInPlace) {
  // Gates up to 20, where sigmoid(g) rounds to 1 in fp32 and 1 - sigmoid(g) must not be formed by subtraction.
  auto g = random_vector(kLarge, 13, -20.0, 20.0), u = random_vector(kLarge, 14), dy = random_vector(kLarge, 15);
  std::vector<float> gf(g.begin(), g.end()), uf(u.begin(), u.end()), dyf(dy.begin(), dy.end());
  std::vector<double> gr(gf.begin(), gf.end()), ur(uf.begin(), uf.end()), dyr(dyf.begin(), dyf.end());
  std::vector<float> dgf(kLarge), duf(kLarge);
  std::vector<double> dgr(kLarge), dur(kLarge);
  swiglu_backward(ctx, dgf.data(), duf.data(), dyf.data(), gf.data(), uf.data(), kLarge);
  swiglu_backward(ctx, dgr.data(), dur.data(), dyr.data(), gr.data(), ur.data(), kLarge);
  EXPECT_LT(max_rel_diff(dgf, dgr), 1e-6);
  EXPECT_LT(max_rel_diff(duf, dur), 1e-6);
  // In place: dgate over gate, dup over up.
  auto dg_inplace = gf, du_inplace = uf;
  swiglu_backward(ctx, dg_inplace.data(), du_inplace.data(), dyf.data(), dg_inplace.data(), du_inplace.data(),
                  kLarge);
  EXPECT_EQ(dg_inplace, dgf);
  EXPECT_EQ(du_inplace, duf);
}

// GeGLU: gelu_tanh(gate) * up, its backward by finite differences, in place.
TEST(GeGLU, ForwardMatchesNaiveAndBackwardMatchesFiniteDifferences) {
  auto g = random_vector(kLarge, 16, -8.0, 8.0), u = random_vector(kLarge, 17, -3.0, 3.0);
  std::vector<double> y(kLarge), ref(kLarge);
  geglu_forward(ctx, y.data(), g.data(), u.data(), kLarge);
  for (int64_t i = 0; i < kLarge; ++i) ref[i] = gelu_tanh_ref(g[i]) * u[i];
  EXPECT_LT(max_rel_diff(y, ref), 1e-14);

  auto gs = random_vector(kSmall, 18, -5.0, 5.0), us = random_vector(kSmall, 19), w = random_vector(kSmall, 20);
  std::vector<double> ys(kSmall), dg(kSmall, std::numeric_limits<double>::quiet_NaN()), du(dg);
  auto loss = [&] {
    geglu_forward(ctx, ys.data(), gs.data(), us.data(), kSmall);
    return dot(w, ys);
  };
  geglu_backward(ctx, dg.data(), du.data(), w.data(), gs.data(), us.data(), kSmall);
  EXPECT_LT(fd_max_error(gs, dg, loss), 1e-6);
  EXPECT_LT(fd_max_error(us, du, loss), 1e-6);
  auto dg_inplace = gs, du_inplace = us;
  geglu_backward(ctx, dg_inplace.data(), du_inplace.data(), w.data(), dg_inplace.data(), du_inplace.data(), kSmall);
  EXPECT_EQ(dg_inplace, dg);
  EXPECT_EQ(du_inplace, du);
}

}  // namespace
}  // namespace claw::kernels
