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

// Odd T, C not a multiple of 16, a repeated token (its grads must add) and
// positions: row 0 continues a sequence from position 2, row 1 packs
// documents of 2 and 1 tokens (position 0 repeats, its grads must add).
constexpr int64_t B = 2, T = 3, C = 19, V = 5, P = 7;
const std::vector<int32_t> tokens = {3, 0, 3, 4, 3, 1};
const std::vector<int32_t> positions = {2, 3, 4, 0, 1, 0};

TEST(Embedding, ForwardMatchesNaive) {
  auto wte = random_vector(V * C, 1), wpe = random_vector(P * C, 2);
  std::vector<float> wte_f(wte.begin(), wte.end()), wpe_f(wpe.begin(), wpe.end()), out(B * T * C);
  embedding_forward(ctx, out.data(), tokens.data(), wte_f.data(), wpe_f.data(), B, T, C, positions.data());
  for (int64_t n = 0; n < B * T; ++n)
    for (int64_t c = 0; c < C; ++c)
      ASSERT_EQ(out[n * C + c], wte_f[tokens[n] * C + c] + wpe_f[positions[n] * C + c]) << n << "," << c;
  // Without positions, token t of each row is at position t.
  embedding_forward(ctx, out.data(), tokens.data(), wte_f.data(), wpe_f.data(), B, T, C);
  for (int64_t n = 0; n < B * T; ++n)
    for (int64_t c = 0; c < C; ++c)
      ASSERT_EQ(out[n * C + c], wte_f[tokens[n] * C + c] + wpe_f[(n % T) * C + c]) << n << "," << c;
  // Without a position table (RoPE models) the row is the token embedding.
  embedding_forward(ctx, out.data(), tokens.data(), wte_f.data(), static_cast<const float*>(nullptr), B, T, C);
  for (int64_t n = 0; n < B * T; ++n)
    for (int64_t c = 0; c < C; ++c) ASSERT_EQ(out[n * C + c], wte_f[tokens[n] * C + c]);
}

TEST(Embedding, BackwardMatchesFiniteDifferences) {
  auto wte = random_vector(V * C, 3), wpe = random_vector(P * C, 4), w = random_vector(B * T * C, 5);
  std::vector<double> out(B * T * C);
  auto loss = [&] {
    embedding_forward(ctx, out.data(), tokens.data(), wte.data(), wpe.data(), B, T, C, positions.data());
    return dot(w, out);
  };
  std::vector<double> dwte(V * C, 0.0), dwpe(P * C, 0.0);
  embedding_backward(ctx, dwte.data(), dwpe.data(), w.data(), tokens.data(), B, T, C, positions.data());
  EXPECT_LT(fd_max_error(wte, dwte, loss), 1e-6);
  EXPECT_LT(fd_max_error(wpe, dwpe, loss), 1e-6);
  // Rows of tokens never seen and positions never used get exactly zero.
  for (int64_t c = 0; c < C; ++c) {
    EXPECT_EQ(dwte[2 * C + c], 0.0);
    EXPECT_EQ(dwpe[5 * C + c], 0.0);
    EXPECT_EQ(dwpe[6 * C + c], 0.0);
  }
}

TEST(Embedding, BackwardTwiceAccumulates) {
  auto dout = random_vector(B * T * C, 6);
  std::vector<double> dwte(V * C, 0.0), dwpe(P * C, 0.0);
  embedding_backward(ctx, dwte.data(), dwpe.data(), dout.data(), tokens.data(), B, T, C, positions.data());
  auto dwte1 = dwte, dwpe1 = dwpe;
  embedding_backward(ctx, dwte.data(), dwpe.data(), dout.data(), tokens.data(), B, T, C, positions.data());
  // The second call adds the same terms onto a nonzero accumulator, so it
  // rounds differently: equal to a few double ulps (three O(1) terms per entry).
  for (size_t i = 0; i < dwte.size(); ++i) EXPECT_NEAR(dwte[i], 2 * dwte1[i], 1e-14);
  for (size_t i = 0; i < dwpe.size(); ++i) EXPECT_NEAR(dwpe[i], 2 * dwpe1[i], 1e-14);
}

// Threads split channels, so each sum is taken in row order whatever the
// thread count: the fp32 result is bitwise the same with 1 or 2 threads,
// with or without (repeating) positions.
TEST(Embedding, BackwardIndependentOfThreadCount) {
  constexpr int64_t Bl = 3, Tl = 5, Cl = 777, Vl = 4;
  std::vector<int32_t> tok(Bl * Tl), pos(Bl * Tl);
  for (int64_t i = 0; i < Bl * Tl; ++i) {
    tok[i] = static_cast<int32_t>((i * 7) % Vl);
    pos[i] = static_cast<int32_t>(i % 3);
  }
  auto dd = random_vector(Bl * Tl * Cl, 7);
  std::vector<float> dout(dd.begin(), dd.end());
  for (const int32_t* p : std::initializer_list<const int32_t*>{nullptr, pos.data()}) {
    std::vector<float> a(Vl * Cl, 0.f), b(Vl * Cl, 0.f), pa(Tl * Cl, 0.f), pb(Tl * Cl, 0.f);
    embedding_backward(CpuCtx{1}, a.data(), pa.data(), dout.data(), tok.data(), Bl, Tl, Cl, p);
    embedding_backward(CpuCtx{2}, b.data(), pb.data(), dout.data(), tok.data(), Bl, Tl, Cl, p);
    EXPECT_EQ(a, b);
    EXPECT_EQ(pa, pb);
  }
}

// Positions restarting at each document of a packed row give each document
// exactly the embedding of a separate run, and the packed backward equals
// the separate backwards accumulated in document order (the same sums in
// the same order, so bitwise).
TEST(Embedding, RestartedPositionsEqualSeparateRuns) {
  const std::vector<int64_t> docs = {3, 1, 4};
  constexpr int64_t Tp = 8, Vl = 6, Pl = 5, Cl = 37;
  const std::vector<int32_t> tok = {1, 5, 1, 0, 2, 1, 5, 3};
  std::vector<int32_t> pos;
  for (int64_t len : docs)
    for (int64_t t = 0; t < len; ++t) pos.push_back(static_cast<int32_t>(t));
  const auto wte = random_vector(Vl * Cl, 8), wpe = random_vector(Pl * Cl, 9), dout = random_vector(Tp * Cl, 10);
  std::vector<double> packed(Tp * Cl), separate(Tp * Cl);
  std::vector<double> dwte(Vl * Cl, 0.0), dwpe(Pl * Cl, 0.0), sep_dwte(Vl * Cl, 0.0), sep_dwpe(Pl * Cl, 0.0);
  embedding_forward(ctx, packed.data(), tok.data(), wte.data(), wpe.data(), 1, Tp, Cl, pos.data());
  embedding_backward(ctx, dwte.data(), dwpe.data(), dout.data(), tok.data(), 1, Tp, Cl, pos.data());
  int64_t start = 0;
  for (int64_t len : docs) {
    embedding_forward(ctx, separate.data() + start * Cl, tok.data() + start, wte.data(), wpe.data(), 1, len, Cl);
    embedding_backward(ctx, sep_dwte.data(), sep_dwpe.data(), dout.data() + start * Cl, tok.data() + start, 1, len,
                       Cl);
    start += len;
  }
  EXPECT_EQ(packed, separate);
  EXPECT_EQ(dwte, sep_dwte);
  EXPECT_EQ(dwpe, sep_dwpe);
}

}  // namespace
}  // namespace claw::kernels
