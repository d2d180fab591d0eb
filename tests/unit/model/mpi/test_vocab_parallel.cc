// Vocabulary-parallel embedding and cross-entropy (model/vocab_parallel.h)
// equal the single-rank kernels on the full vocabulary.
//
// Every rank builds the same seeded full-vocabulary data and computes the
// single-rank reference itself (kernels::cross_entropy_*, embedding_*), then
// runs the vocab-parallel functions on its slice over the world group used as
// the TP group. Embedding outputs and weight gradients must be bitwise equal
// (each output row has one non-zero term; each gradient row is summed in the
// same token order). Cross-entropy: losses, lse and the gathered dlogits to
// 1e-5 relative in fp32 and 1e-12 in fp64 (the sum of exponentials is taken
// in another order and precision, so lse differs by about one fp32 rounding,
// which shifts every probability by as much: seen up to 3e-6 in fp32 and
// below 1e-14 in fp64); padding columns and ignored rows exactly 0.
// Vocabulary sizes: 97 (the last rank of 4 holds 1 real id and 31 padding
// ids), 90 (the last rank of 4 holds only padding), 256 (no padding).
//
//   mpirun -np N test_vocab_parallel     (N = 1, 2, 4; oversubscribed is fine)
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "claw/comm/world.h"
#include "claw/core/error.h"
#include "claw/core/philox.h"
#include "claw/kernels/cpu/cross_entropy.h"
#include "claw/kernels/cpu/embedding.h"
#include "claw/model/vocab_parallel.h"
#include "mpi_gtest.h"

namespace claw {
namespace {

std::shared_ptr<comm::Group> g_tp;
constexpr int64_t kDivisibleBy = 16;

CpuCtx ctx() { return {.num_threads = g_tp->size() == 1 ? 2 : 1}; }  // threads only where cores are free

// [N, Vp] from this rank's [N, Vl] column blocks.
template <typename T>
std::vector<T> gather_columns(const std::vector<T>& local, int64_t N, int64_t Vl) {
  const int tp = g_tp->size();
  std::vector<T> blocks(static_cast<size_t>(tp * N * Vl)), full(blocks.size());
  g_tp->all_gather(local.data(), blocks.data(), N * Vl, dtype_of<T>::value);
  for (int r = 0; r < tp; ++r)
    for (int64_t n = 0; n < N; ++n)
      std::copy_n(&blocks[(r * N + n) * Vl], Vl, &full[n * tp * Vl + r * Vl]);
  return full;
}

// |a - b| <= tol (|b| + floor(i)), element by element; with a zero floor,
// exact zeros must stay exact.
template <typename T, typename F>
void expect_rel(const std::vector<T>& got, const std::vector<T>& want, double tol, const std::string& what,
                F&& floor) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int bad = 0;
  for (size_t i = 0; i < got.size() && bad < 5; ++i) {
    const double g = got[i], w = want[i];
    if (!(std::abs(g - w) <= tol * (std::abs(w) + floor(i)))) {
      ADD_FAILURE() << what << "[" << i << "]: " << g << " vs " << w;
      ++bad;
    }
  }
}

struct CeData {
  int64_t V, Vp, N;
  std::vector<float> logits;  // [N, Vp]
  std::vector<int32_t> targets;
};

CeData ce_data(int64_t V, int64_t N) {
  CeData d{.V = V, .Vp = model::tp_padded_vocab_size(V, kDivisibleBy, g_tp->size()), .N = N};
  RandomStream rng(7, static_cast<uint64_t>(V));
  d.logits.resize(static_cast<size_t>(N * d.Vp));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < d.Vp; ++c) {
      const uint64_t i = static_cast<uint64_t>(n * d.Vp + c);
      // Padding columns hold large values: counted in the softmax, they would dominate it.
      d.logits[i] = c < V ? 2.5f * rng.normal(i) : 40.0f + rng.uniform(i);
    }
  d.logits[1 * d.Vp + V - 1] = 30.0f;  // a row whose maximum is far above the rest, on the last real id
  for (int64_t n = 0; n < N; ++n) d.targets.push_back(static_cast<int32_t>(rng.block(1u << 30, n)[0] % V));
  d.targets[1] = static_cast<int32_t>(V - 1);
  d.targets[2] = 0;
  for (int64_t n = 5; n < N; n += 7) d.targets[n] = -1;  // ignored rows
  d.targets[N - 1] = -100;                               // Megatron's ignore index is negative too
  return d;
}

// Forward and in-place backward on this rank's columns, `chunk` rows at a
// time (as the output layer calls it), against the single-rank kernels.
template <typename T>
void check_cross_entropy(int64_t V, int64_t N, int64_t chunk, double tol) {
  const CeData d = ce_data(V, N);
  const int64_t Vp = d.Vp;
  std::vector<T> full(d.logits.begin(), d.logits.end());
  int64_t valid = 0;
  for (int32_t t : d.targets) valid += t >= 0;
  const T scale = T(1) / static_cast<T>(valid);

  std::vector<T> ref_losses(N), ref_lse(N), ref_d(full);
  kernels::cross_entropy_forward(ctx(), ref_losses.data(), ref_lse.data(), full.data(), d.targets.data(), N, V, Vp);
  kernels::cross_entropy_backward(ctx(), ref_d.data(), ref_d.data(), ref_lse.data(), d.targets.data(), scale, N, V,
                                  Vp);

  const model::VocabShard s = model::VocabShard::of(V, Vp, *g_tp);
  const int64_t Vl = s.rows();
  ASSERT_EQ(Vl * g_tp->size(), Vp);
  std::vector<T> local(static_cast<size_t>(N * Vl)), losses(N), lse(N);
  for (int64_t n = 0; n < N; ++n) std::copy_n(&full[n * Vp + s.begin], Vl, &local[n * Vl]);
  for (int64_t r0 = 0; r0 < N; r0 += chunk) {
    const int64_t rows = std::min(chunk, N - r0);
    T* lg = local.data() + r0 * Vl;
    model::vocab_parallel_cross_entropy_forward(ctx(), *g_tp, losses.data() + r0, lse.data() + r0, lg,
                                                d.targets.data() + r0, s, rows);
    model::vocab_parallel_cross_entropy_backward(ctx(), lg, lg, lse.data() + r0, d.targets.data() + r0, scale, s,
                                                 rows);
  }
  // A loss is lse - logit: near 0 (a confident, right prediction: row 1) it
  // cancels, and its error is that of lse. Likewise a target's gradient,
  // scale (p - 1), has the error of scale p.
  expect_rel(losses, ref_losses, tol, "losses", [&](size_t n) { return std::abs(ref_lse[n]); });
  expect_rel(lse, ref_lse, tol, "lse", [](size_t) { return 0.0; });
  for (int64_t n = 0; n < N; ++n) {
    if (d.targets[n] < 0) {
      EXPECT_EQ(losses[n], T(0)) << "ignored row " << n;
    }
  }
  const std::vector<T> dl = gather_columns(local, N, Vl);
  expect_rel(dl, ref_d, tol, "dlogits", [&](size_t i) {
    return static_cast<int64_t>(i) % Vp == d.targets[i / Vp] ? static_cast<double>(scale) : 0.0;
  });
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t c = 0; c < Vp; ++c) {
      if (c >= V || d.targets[n] < 0) {
        ASSERT_EQ(dl[n * Vp + c], T(0)) << "row " << n << " column " << c;
      }
    }
  }
}

class VocabParallelCe : public ::testing::TestWithParam<int64_t> {};

TEST_P(VocabParallelCe, Fp32AllRowsAtOnce) { check_cross_entropy<float>(GetParam(), 45, 45, 1e-5); }
TEST_P(VocabParallelCe, Fp32InChunks) { check_cross_entropy<float>(GetParam(), 45, 16, 1e-5); }
TEST_P(VocabParallelCe, Fp64InChunks) { check_cross_entropy<double>(GetParam(), 45, 8, 1e-12); }

INSTANTIATE_TEST_SUITE_P(Vocab, VocabParallelCe, ::testing::Values(97, 90, 256));

TEST(VocabParallel, ShardsCoverThePaddedVocabulary) {
  // Megatron's padding: a multiple of divisible_by x TP.
  EXPECT_EQ(model::tp_padded_vocab_size(50257, 128, 1), 50304);
  EXPECT_EQ(model::tp_padded_vocab_size(50257, 128, 2), 50432);
  EXPECT_EQ(model::tp_padded_vocab_size(50257, 128, 4), 50688);
  EXPECT_EQ(model::tp_padded_vocab_size(256, 16, 4), 256);
  const model::VocabShard last = model::VocabShard::of(90, 128, 3, 4);
  EXPECT_EQ(last.begin, 96);
  EXPECT_EQ(last.end, 128);
  EXPECT_EQ(last.real(), 0);
  EXPECT_EQ(model::VocabShard::of(97, 128, 3, 4).real(), 1);
  EXPECT_EQ(model::VocabShard::of(97, 128, 1, 4).real(), 32);
  EXPECT_THROW(model::VocabShard::of(97, 100, 0, 3), Error);
}

TEST(VocabParallel, BadTargetFailsOnEveryRankBeforeAnyCollective) {
  const int64_t V = 97, Vp = model::tp_padded_vocab_size(V, kDivisibleBy, g_tp->size());
  const model::VocabShard s = model::VocabShard::of(V, Vp, *g_tp);
  std::vector<float> logits(static_cast<size_t>(4 * s.rows())), losses(4), lse(4);
  const std::vector<int32_t> targets = {0, 5, static_cast<int32_t>(V), 1};
  EXPECT_THROW(model::vocab_parallel_cross_entropy_forward(ctx(), *g_tp, losses.data(), lse.data(), logits.data(),
                                                           targets.data(), s, 4),
               Error);
  g_tp->barrier();  // no rank was left inside a collective
}

struct EmbData {
  int64_t V, Vp, N, C;
  std::vector<float> W, dout, dW0;  // [Vp, C], [N, C], [Vp, C] (gradient already accumulated)
  std::vector<int32_t> tokens;
};

EmbData emb_data(int64_t V) {
  EmbData d{.V = V, .Vp = model::tp_padded_vocab_size(V, kDivisibleBy, g_tp->size()), .N = 32, .C = 40};
  RandomStream rng(11, static_cast<uint64_t>(V));
  for (int64_t i = 0; i < d.Vp * d.C; ++i) d.W.push_back(rng.normal(i));
  for (int64_t i = 0; i < d.N * d.C; ++i) d.dout.push_back(rng.normal(i + (1 << 20)));
  for (int64_t i = 0; i < d.Vp * d.C; ++i) d.dW0.push_back(rng.normal(i + (2 << 20)));
  for (int64_t n = 0; n < d.N; ++n) d.tokens.push_back(static_cast<int32_t>(rng.block(3 << 20, n)[0] % V));
  // First and last real ids, and repeats (their gradients add up).
  d.tokens[0] = 0;
  d.tokens[1] = static_cast<int32_t>(V - 1);
  d.tokens[2] = static_cast<int32_t>(V - 1);
  d.tokens[7] = d.tokens[3];
  d.tokens[d.N - 1] = d.tokens[3];
  return d;
}

std::vector<float> rows_of(const std::vector<float>& full, int64_t first, int64_t rows, int64_t C) {
  return {full.begin() + first * C, full.begin() + (first + rows) * C};
}

class VocabParallelEmbedding : public ::testing::TestWithParam<int64_t> {};

TEST_P(VocabParallelEmbedding, ForwardAndWeightGradientEqualSingleRank) {
  const EmbData d = emb_data(GetParam());
  const int64_t N = d.N, C = d.C;
  std::vector<float> ref_out(N * C), ref_dW(d.dW0);
  kernels::embedding_forward(ctx(), ref_out.data(), d.tokens.data(), d.W.data(), static_cast<const float*>(nullptr),
                             1, N, C);
  kernels::embedding_backward(ctx(), ref_dW.data(), static_cast<float*>(nullptr), d.dout.data(), d.tokens.data(), 1,
                              N, C);

  const model::VocabShard s = model::VocabShard::of(d.V, d.Vp, *g_tp);
  const std::vector<float> W = rows_of(d.W, s.begin, s.rows(), C);
  std::vector<float> out(N * C, -1.0f), dW = rows_of(d.dW0, s.begin, s.rows(), C);
  model::vocab_parallel_embedding_forward(ctx(), *g_tp, out.data(), d.tokens.data(), W.data(), s, N, C);
  EXPECT_EQ(out, ref_out);
  model::vocab_parallel_embedding_backward(ctx(), dW.data(), d.dout.data(), d.tokens.data(), s, N, C);
  EXPECT_EQ(gather_columns(dW, 1, s.rows() * C), ref_dW);  // [Vl, C] blocks in rank order
}

TEST_P(VocabParallelEmbedding, SequenceParallelFormsHoldThisRanksRows) {
  const EmbData d = emb_data(GetParam());
  const int64_t N = d.N, C = d.C, rows = N / g_tp->size(), first = g_tp->rank() * rows;
  std::vector<float> ref_out(N * C), ref_dW(d.dW0);
  kernels::embedding_forward(ctx(), ref_out.data(), d.tokens.data(), d.W.data(), static_cast<const float*>(nullptr),
                             1, N, C);
  kernels::embedding_backward(ctx(), ref_dW.data(), static_cast<float*>(nullptr), d.dout.data(), d.tokens.data(), 1,
                              N, C);

  const model::VocabShard s = model::VocabShard::of(d.V, d.Vp, *g_tp);
  const std::vector<float> W = rows_of(d.W, s.begin, s.rows(), C);
  const std::vector<float> want = rows_of(ref_out, first, rows, C);
  std::vector<float> work(N * C), piece(rows * C);
  model::vocab_parallel_embedding_forward_sp(ctx(), *g_tp, piece.data(), work.data(), d.tokens.data(), W.data(), s,
                                             N, C);
  EXPECT_EQ(piece, want);
  // In place: the piece lands at the start of the work buffer.
  model::vocab_parallel_embedding_forward_sp(ctx(), *g_tp, work.data(), work.data(), d.tokens.data(), W.data(), s, N,
                                             C);
  EXPECT_EQ(rows_of(work, 0, rows, C), want);

  // Backward from this rank's piece of the gradient (out of place, then in
  // place at its slot of the work buffer): each gives the full gradient.
  const std::vector<float> dpiece = rows_of(d.dout, first, rows, C);
  std::vector<float> dW = rows_of(d.dW0, s.begin, s.rows(), C);
  model::vocab_parallel_embedding_backward_sp(ctx(), *g_tp, dW.data(), work.data(), dpiece.data(), d.tokens.data(),
                                              s, N, C);
  EXPECT_EQ(gather_columns(dW, 1, s.rows() * C), ref_dW);
  std::fill(work.begin(), work.end(), 0.0f);
  std::copy(dpiece.begin(), dpiece.end(), work.begin() + first * C);
  dW = rows_of(d.dW0, s.begin, s.rows(), C);
  model::vocab_parallel_embedding_backward_sp(ctx(), *g_tp, dW.data(), work.data(), work.data() + first * C,
                                              d.tokens.data(), s, N, C);
  EXPECT_EQ(gather_columns(dW, 1, s.rows() * C), ref_dW);
}

INSTANTIATE_TEST_SUITE_P(Vocab, VocabParallelEmbedding, ::testing::Values(97, 90, 256));

}  // namespace
}  // namespace claw

int main(int argc, char** argv) {
  std::unique_ptr<claw::comm::World> world = claw::testing_mpi::init(argc, argv);
  claw::g_tp = world->world_group();
  const int rc = claw::testing_mpi::run_all_tests_on_every_rank(*world);
  claw::g_tp.reset();
  return rc;
}
