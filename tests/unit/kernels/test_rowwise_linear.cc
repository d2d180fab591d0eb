// The batch-invariant linear: the values of a plain fp64 product, and every
// row bitwise the same whatever the batch around it and the thread count.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "claw/kernels/cpu/rowwise_linear.h"

namespace claw::kernels {
namespace {

std::vector<float> randn(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d;
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = d(rng);
  return v;
}

TEST(RowwiseLinear, MatchesFp64Product) {
  for (auto [M, K, N] : {std::tuple{1, 768, 37}, {5, 33, 9}, {13, 100, 130}, {4, 16, 4}, {3, 7, 1}}) {
    auto x = randn(M * K, 1), W = randn(N * K, 2), b = randn(N, 3);
    std::vector<float> out(M * N);
    rowwise_linear_forward({2}, out.data(), x.data(), W.data(), b.data(), M, K, N);
    for (int m = 0; m < M; ++m)
      for (int n = 0; n < N; ++n) {
        double ref = b[n];
        for (int k = 0; k < K; ++k) ref += double(x[m * K + k]) * W[n * K + k];
        ASSERT_NEAR(out[m * N + n], ref, 1e-5 * K) << M << "x" << K << "x" << N << " at " << m << "," << n;
      }
  }
}

TEST(RowwiseLinear, RowsDoNotDependOnTheBatchOrThreads) {
  const int64_t K = 203, N = 517, M = 23;
  auto x = randn(M * K, 4), W = randn(N * K, 5);
  std::vector<float> all(M * N);
  rowwise_linear_forward({2}, all.data(), x.data(), W.data(), nullptr, M, K, N);
  // Each row alone, and each row inside batches of every size from every
  // offset, on 1 and 3 threads: bitwise the rows of the full batch.
  for (int threads : {1, 3})
    for (int64_t m0 = 0; m0 < M; m0 += 5)
      for (int64_t rows = 1; m0 + rows <= M; rows += 3) {
        std::vector<float> part(rows * N);
        rowwise_linear_forward({threads}, part.data(), x.data() + m0 * K, W.data(), nullptr, rows, K, N);
        ASSERT_EQ(std::memcmp(part.data(), all.data() + m0 * N, part.size() * sizeof(float)), 0)
            << "rows [" << m0 << ", " << m0 + rows << ") on " << threads << " threads";
      }
}

}  // namespace
}  // namespace claw::kernels
