#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "claw/core/error.h"
#include "claw/kernels/cpu/rope.h"
#include "fd.h"

namespace claw::kernels {
namespace {

using claw::testing::dot;
using claw::testing::fd_max_error;
using claw::testing::max_rel_diff;
using claw::testing::random_vector;

const CpuCtx ctx{2};
// Odd T and nh, a head dim whose half (10) is not a multiple of the SIMD width.
constexpr int64_t B = 2, T = 5, nh = 3, D = 20, P = 8;
constexpr double kTheta = 10000.0;
// Row 0 is one sequence continuing from position 3; row 1 packs documents of
// 3 and 2 tokens, positions restarting at each.
const std::vector<int32_t> kPositions = {3, 4, 5, 6, 7, 0, 1, 2, 0, 1};

TEST(RoPE, TableMatchesClosedForm) {
  std::vector<double> cos(P * D / 2), sin(P * D / 2);
  rope_table(cos.data(), sin.data(), P, D, kTheta);
  for (int64_t p = 0; p < P; ++p)
    for (int64_t i = 0; i < D / 2; ++i) {
      double angle = p * std::pow(kTheta, -2.0 * i / D);
      // inv_freq is computed in fp32 as in Hugging Face: rounding the exponent
      // 2i/D (<= 3e-8) moves theta^e by ln(theta) * 3e-8 = 2.8e-7 relative, and
      // powf and the division add ~1.2e-7; so the angle p * inv_freq <= p is
      // off by at most p * 4e-7 rad (5e-7 with margin).
      double tol = 1e-15 + p * 5e-7;
      EXPECT_NEAR(cos[p * D / 2 + i], std::cos(angle), tol) << p << "," << i;
      EXPECT_NEAR(sin[p * D / 2 + i], std::sin(angle), tol) << p << "," << i;
    }
  // Frequency 0 is exactly 1: angle p, exact to double rounding.
  for (int64_t p = 0; p < P; ++p) {
    EXPECT_DOUBLE_EQ(cos[p * D / 2], std::cos(static_cast<double>(p)));
    EXPECT_DOUBLE_EQ(sin[p * D / 2], std::sin(static_cast<double>(p)));
  }
}

// Hugging Face's formulation, literally: q * cat(cos, cos) + rotate_half(q) * cat(sin, sin)
// with rotate_half(q) = cat(-q[half:], q[:half]), at position_ids = positions
// (or arange(T) when null).
std::vector<double> hf_apply_rotary(const std::vector<double>& x, const std::vector<double>& cos,
                                    const std::vector<double>& sin, const int32_t* positions) {
  const int64_t half = D / 2;
  std::vector<double> y(x.size());
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < nh; ++h) {
        const double* q = x.data() + ((b * T + t) * nh + h) * D;
        double* out = y.data() + ((b * T + t) * nh + h) * D;
        for (int64_t j = 0; j < D; ++j) {
          const int64_t p = positions ? positions[b * T + t] : t;
          double c = cos[p * half + j % half], s = sin[p * half + j % half];
          double rot = j < half ? -q[j + half] : q[j - half];
          out[j] = q[j] * c + rot * s;
        }
      }
  return y;
}

TEST(RoPE, ForwardMatchesHuggingFaceFormula) {
  std::vector<double> cos(P * D / 2), sin(P * D / 2);
  rope_table(cos.data(), sin.data(), P, D, kTheta);
  std::vector<float> cos_f(P * D / 2), sin_f(P * D / 2);
  rope_table(cos_f.data(), sin_f.data(), P, D, kTheta);
  auto x = random_vector(B * T * nh * D, 1);
  for (const int32_t* positions : {static_cast<const int32_t*>(nullptr), kPositions.data()}) {
    auto ref = hf_apply_rotary(x, cos, sin, positions);
    auto y = x;
    rope_forward(ctx, y.data(), cos.data(), sin.data(), B, T, nh, D, positions);
    // Two products and a sum of O(1) values: a few double roundings.
    EXPECT_LT(max_rel_diff(y, ref), 1e-14);

    // fp32: two products and a sum of O(1) values, ~3 roundings of 6e-8.
    std::vector<float> xf(x.begin(), x.end());
    rope_forward(ctx, xf.data(), cos_f.data(), sin_f.data(), B, T, nh, D, positions);
    EXPECT_LT(max_rel_diff(xf, ref), 1e-6);
  }
}

// The map is a rotation: backward is its transpose, which is its inverse.
TEST(RoPE, BackwardIsInverseRotationAndMatchesFiniteDifferences) {
  std::vector<double> cos(P * D / 2), sin(P * D / 2);
  rope_table(cos.data(), sin.data(), P, D, kTheta);
  auto x = random_vector(B * T * nh * D, 2);
  auto w = random_vector(B * T * nh * D, 3);
  for (const int32_t* positions : {static_cast<const int32_t*>(nullptr), kPositions.data()}) {
    auto y = x;
    rope_forward(ctx, y.data(), cos.data(), sin.data(), B, T, nh, D, positions);
    EXPECT_GT(max_rel_diff(y, x), 0.1);  // it does rotate
    rope_backward(ctx, y.data(), cos.data(), sin.data(), B, T, nh, D, positions);
    EXPECT_LT(max_rel_diff(y, x), 1e-14);

    std::vector<double> out;
    auto loss = [&] {
      out = x;
      rope_forward(ctx, out.data(), cos.data(), sin.data(), B, T, nh, D, positions);
      return dot(w, out);
    };
    auto dx = w;
    rope_backward(ctx, dx.data(), cos.data(), sin.data(), B, T, nh, D, positions);
    EXPECT_LT(fd_max_error(x, dx, loss), 1e-6);
  }
}

// Partial rotary (Phi-4-mini's partial_rotary_factor): the first R = 12 of
// D = 20 dimensions rotate exactly as a head of 12 with tables of 12 (HF
// concatenates the rotated part and the untouched rest), the last 8 pass
// through; backward by finite differences.
TEST(RoPE, PartialRotaryRotatesTheFirstDimensionsOnly) {
  constexpr int64_t R = 12;
  std::vector<double> cos(P * R / 2), sin(P * R / 2);
  rope_table(cos.data(), sin.data(), P, R, kTheta);
  auto x = random_vector(B * T * nh * D, 4);
  const auto w = random_vector(B * T * nh * D, 5);
  std::vector<double> head(B * T * nh * R);  // the first R of every row
  for (int64_t row = 0; row < B * T * nh; ++row)
    for (int64_t d = 0; d < R; ++d) head[row * R + d] = x[row * D + d];
  rope_forward(ctx, head.data(), cos.data(), sin.data(), B, T, nh, R, kPositions.data());
  auto y = x;
  rope_forward(ctx, y.data(), cos.data(), sin.data(), B, T, nh, D, kPositions.data(), R);
  for (int64_t row = 0; row < B * T * nh; ++row)
    for (int64_t d = 0; d < D; ++d)
      ASSERT_EQ(y[row * D + d], d < R ? head[row * R + d] : x[row * D + d]) << "row " << row << " dim " << d;
  std::vector<double> out;
  auto loss = [&] {
    out = x;
    rope_forward(ctx, out.data(), cos.data(), sin.data(), B, T, nh, D, kPositions.data(), R);
    return dot(w, out);
  };
  auto dx = w;
  rope_backward(ctx, dx.data(), cos.data(), sin.data(), B, T, nh, D, kPositions.data(), R);
  EXPECT_LT(fd_max_error(x, dx, loss), 1e-6);
}

// Positions restarting at each document of a packed row give each document
// exactly (bitwise) the rotation, and the gradient, of a separate run.
TEST(RoPE, RestartedPositionsEqualSeparateRuns) {
  const std::vector<int64_t> docs = {3, 1, 4};
  constexpr int64_t Tp = 8;
  std::vector<int32_t> positions;
  for (int64_t len : docs)
    for (int64_t t = 0; t < len; ++t) positions.push_back(static_cast<int32_t>(t));
  std::vector<float> cos(P * D / 2), sin(P * D / 2);
  rope_table(cos.data(), sin.data(), P, D, kTheta);
  const auto xd = random_vector(Tp * nh * D, 4);
  const std::vector<float> x(xd.begin(), xd.end());
  auto packed = x, packed_grad = x;
  rope_forward(ctx, packed.data(), cos.data(), sin.data(), 1, Tp, nh, D, positions.data());
  rope_backward(ctx, packed_grad.data(), cos.data(), sin.data(), 1, Tp, nh, D, positions.data());
  auto separate = x, separate_grad = x;
  int64_t start = 0;
  for (int64_t len : docs) {
    rope_forward(ctx, separate.data() + start * nh * D, cos.data(), sin.data(), 1, len, nh, D);
    rope_backward(ctx, separate_grad.data() + start * nh * D, cos.data(), sin.data(), 1, len, nh, D);
    start += len;
  }
  EXPECT_EQ(packed, separate);
  EXPECT_EQ(packed_grad, separate_grad);
}

TEST(RoPE, OddHeadDimIsRejected) {
  std::vector<float> x(15), cs(8);
  EXPECT_THROW(rope_forward(ctx, x.data(), cs.data(), cs.data(), 1, 1, 1, 15), Error);
}

}  // namespace
}  // namespace claw::kernels
