#include <gtest/gtest.h>

#include <vector>

#include "claw/kernels/cpu/embedding.h"
#include "fd.h"

namespace claw::kernels {
namespace {

using claw::testing::dot;
using claw::testing::fd_max_error;
using claw::testing::random_vector;

const CpuCtx ctx{2};

// Odd T, C not a multiple of 16, a repeated token (its grads must add) and a
// nonzero pos0.
constexpr int64_t B = 2, T = 3, C = 19, V = 5, P = 7, pos0 = 2;
const std::vector<int32_t> tokens = {3, 0, 3, 4, 3, 1};

TEST(Embedding, ForwardMatchesNaive) {
  auto wte = random_vector(V * C, 1), wpe = random_vector(P * C, 2);
  std::vector<float> wte_f(wte.begin(), wte.end()), wpe_f(wpe.begin(), wpe.end()), out(B * T * C);
  embedding_forward(ctx, out.data(), tokens.data(), wte_f.data(), wpe_f.data(), B, T, C, pos0);
  for (int64_t n = 0; n < B * T; ++n)
    for (int64_t c = 0; c < C; ++c)
      ASSERT_EQ(out[n * C + c], wte_f[tokens[n] * C + c] + wpe_f[(pos0 + n % T) * C + c]) << n << "," << c;
  // Without a position table (RoPE models) the row is the token embedding.
  embedding_forward(ctx, out.data(), tokens.data(), wte_f.data(), static_cast<const float*>(nullptr), B, T, C);
  for (int64_t n = 0; n < B * T; ++n)
    for (int64_t c = 0; c < C; ++c) ASSERT_EQ(out[n * C + c], wte_f[tokens[n] * C + c]);
}

TEST(Embedding, BackwardMatchesFiniteDifferences) {
  auto wte = random_vector(V * C, 3), wpe = random_vector(P * C, 4), w = random_vector(B * T * C, 5);
  std::vector<double> out(B * T * C);
  auto loss = [&] {
    embedding_forward(ctx, out.data(), tokens.data(), wte.data(), wpe.data(), B, T, C, pos0);
    return dot(w, out);
  };
  std::vector<double> dwte(V * C, 0.0), dwpe(P * C, 0.0);
  embedding_backward(ctx, dwte.data(), dwpe.data(), w.data(), tokens.data(), B, T, C, pos0);
  EXPECT_LT(fd_max_error(wte, dwte, loss), 1e-6);
  EXPECT_LT(fd_max_error(wpe, dwpe, loss), 1e-6);
  // Rows of tokens never seen and positions never used get exactly zero.
  for (int64_t c = 0; c < C; ++c) {
    EXPECT_EQ(dwte[2 * C + c], 0.0);
    EXPECT_EQ(dwpe[0 * C + c], 0.0);
    EXPECT_EQ(dwpe[6 * C + c], 0.0);
  }
}

TEST(Embedding, BackwardTwiceAccumulates) {
  auto dout = random_vector(B * T * C, 6);
  std::vector<double> dwte(V * C, 0.0), dwpe(P * C, 0.0);
  embedding_backward(ctx, dwte.data(), dwpe.data(), dout.data(), tokens.data(), B, T, C, pos0);
  auto dwte1 = dwte, dwpe1 = dwpe;
  embedding_backward(ctx, dwte.data(), dwpe.data(), dout.data(), tokens.data(), B, T, C, pos0);
  // The second call adds the same terms onto a nonzero accumulator, so it
  // rounds differently: equal to a few double ulps (three O(1) terms per entry).
  for (size_t i = 0; i < dwte.size(); ++i) EXPECT_NEAR(dwte[i], 2 * dwte1[i], 1e-14);
  for (size_t i = 0; i < dwpe.size(); ++i) EXPECT_NEAR(dwpe[i], 2 * dwpe1[i], 1e-14);
}

// Threads split channels, so each sum is taken in row order whatever the
// thread count: the fp32 result is bitwise the same with 1 or 2 threads.
TEST(Embedding, BackwardIndependentOfThreadCount) {
  constexpr int64_t Bl = 3, Tl = 5, Cl = 777, Vl = 4;
  std::vector<int32_t> tok(Bl * Tl);
  for (int64_t i = 0; i < Bl * Tl; ++i) tok[i] = static_cast<int32_t>((i * 7) % Vl);
  auto dd = random_vector(Bl * Tl * Cl, 7);
  std::vector<float> dout(dd.begin(), dd.end());
  std::vector<float> a(Vl * Cl, 0.f), b(Vl * Cl, 0.f), pa(Tl * Cl, 0.f), pb(Tl * Cl, 0.f);
  embedding_backward(CpuCtx{1}, a.data(), pa.data(), dout.data(), tok.data(), Bl, Tl, Cl);
  embedding_backward(CpuCtx{2}, b.data(), pb.data(), dout.data(), tok.data(), Bl, Tl, Cl);
  EXPECT_EQ(a, b);
  EXPECT_EQ(pa, pb);
}

}  // namespace
}  // namespace claw::kernels
