#include <gtest/gtest.h>

#include <vector>

#include "claw/kernels/cpu/linear.h"
#include "fd.h"

namespace claw::kernels {
namespace {

using claw::testing::dot;
using claw::testing::fd_max_error;
using claw::testing::random_vector;

constexpr int64_t M = 7, K = 5, N = 6;
const CpuCtx ctx{2};

// L = sum(w * linear(x)); checks dinp, dweight, dbias against central differences.
TEST(Linear, BackwardMatchesFiniteDifferences) {
  auto x = random_vector(M * K, 1), W = random_vector(N * K, 2), b = random_vector(N, 3);
  auto w = random_vector(M * N, 4);
  std::vector<double> out(M * N);
  auto loss = [&] {
    linear_forward(ctx, out.data(), x.data(), W.data(), b.data(), M, K, N);
    return dot(w, out);
  };
  std::vector<double> dx(M * K), dW(N * K, 0.0), db(N, 0.0);
  linear_backward_input(ctx, dx.data(), w.data(), W.data(), M, K, N, false);
  linear_backward_weight(ctx, dW.data(), db.data(), w.data(), x.data(), M, K, N);
  EXPECT_LT(fd_max_error(x, dx, loss), 1e-6);
  EXPECT_LT(fd_max_error(W, dW, loss), 1e-6);
  EXPECT_LT(fd_max_error(b, db, loss), 1e-6);
}

TEST(Linear, ForwardMatchesNaive) {
  auto x = random_vector(M * K, 5), W = random_vector(N * K, 6), b = random_vector(N, 7);
  std::vector<float> xf(x.begin(), x.end()), Wf(W.begin(), W.end()), bf(b.begin(), b.end()), out(M * N);
  linear_forward(ctx, out.data(), xf.data(), Wf.data(), bf.data(), M, K, N);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double ref = b[n];
      for (int64_t k = 0; k < K; ++k) ref += x[m * K + k] * W[n * K + k];
      EXPECT_NEAR(out[m * N + n], ref, 1e-5);
    }
}

// Gradient contract: parameter grads accumulate, the input grad overwrites
// unless asked to accumulate.
TEST(Linear, ParamGradsAccumulateInputGradOverwrites) {
  auto x = random_vector(M * K, 8), W = random_vector(N * K, 9), dy = random_vector(M * N, 10);
  std::vector<double> dW(N * K, 0.0), db(N, 0.0), dx(M * K, 123.0), dx2(M * K, 0.0);
  linear_backward_weight(ctx, dW.data(), db.data(), dy.data(), x.data(), M, K, N);
  auto dW1 = dW, db1 = db;
  linear_backward_weight(ctx, dW.data(), db.data(), dy.data(), x.data(), M, K, N);
  for (size_t i = 0; i < dW.size(); ++i) EXPECT_NEAR(dW[i], 2 * dW1[i], 1e-12);
  for (size_t i = 0; i < db.size(); ++i) EXPECT_NEAR(db[i], 2 * db1[i], 1e-12);
  linear_backward_input(ctx, dx.data(), dy.data(), W.data(), M, K, N, false);
  linear_backward_input(ctx, dx2.data(), dy.data(), W.data(), M, K, N, false);
  for (size_t i = 0; i < dx.size(); ++i) EXPECT_EQ(dx[i], dx2[i]);
  linear_backward_input(ctx, dx.data(), dy.data(), W.data(), M, K, N, true);
  for (size_t i = 0; i < dx.size(); ++i) EXPECT_NEAR(dx[i], 2 * dx2[i], 1e-12);
}

}  // namespace
}  // namespace claw::kernels
