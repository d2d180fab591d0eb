// MoE routing and permutation kernels (kernels/cpu/moe.h): choices and
// weights on hand-made logits, the bias changing choices only, DeepSeek-V3's
// group-limited top-k and scaling, capacity
// under both drop policies, the router's backward (combine weights, load
// balancing and z-loss terms) by central differences, and the dispatch
// round trip and grouped GEMMs against plain loops (the fixed-order one
// also row by row against itself).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "claw/core/error.h"
#include "claw/kernels/cpu/moe.h"

namespace claw::kernels {
namespace {

std::vector<float> randn(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(g);
  return v;
}

TEST(MoeRoute, SoftmaxPicksTheLargestLogitsAndNormalisesOverThem) {
  const std::vector<float> logits = {1, 3, 2, 0};
  MoeRouting r;
  moe_route(logits.data(), nullptr, 1, 4, 2, MoeScore::softmax, 0, MoeDrop::probs, r);
  EXPECT_EQ(r.expert, (std::vector<int32_t>{1, 2}));
  const double p1 = 1 / (1 + std::exp(-1.0));
  EXPECT_NEAR(r.prob[0], p1, 1e-7);
  EXPECT_NEAR(r.prob[1], 1 - p1, 1e-7);
  const double z = std::exp(1.0) + std::exp(3.0) + std::exp(2.0) + 1;
  EXPECT_NEAR(r.score[1], std::exp(3.0) / z, 1e-7);
  EXPECT_NEAR(r.lse[0], std::log(z), 1e-6);
  EXPECT_EQ(r.routed, (std::vector<int64_t>{0, 1, 1, 0}));
  EXPECT_EQ(r.offsets, (std::vector<int64_t>{0, 0, 1, 2, 2}));
}

TEST(MoeRoute, SigmoidWeightsAreTheChosenScoresOverTheirSum) {
  const std::vector<float> logits = {0.5f, -1, 2, 1};
  MoeRouting r;
  moe_route(logits.data(), nullptr, 1, 4, 2, MoeScore::sigmoid, 0, MoeDrop::probs, r);
  EXPECT_EQ(r.expert, (std::vector<int32_t>{2, 3}));
  const double s2 = 1 / (1 + std::exp(-2.0)), s3 = 1 / (1 + std::exp(-1.0));
  EXPECT_NEAR(r.prob[0], s2 / (s2 + s3), 1e-7);
  EXPECT_NEAR(r.prob[1], s3 / (s2 + s3), 1e-7);
  MoeRouting one;  // k = 1: the score itself
  moe_route(logits.data(), nullptr, 1, 4, 1, MoeScore::sigmoid, 0, MoeDrop::probs, one);
  EXPECT_NEAR(one.prob[0], s2, 1e-7);
}

TEST(MoeRoute, ExpertBiasChangesTheChoiceNotTheWeight) {
  const std::vector<float> logits = {0.5f, -1, 2, 1};
  const std::vector<float> bias = {0, 5, 0, 0};  // pulls expert 1 in
  for (MoeScore score : {MoeScore::softmax, MoeScore::sigmoid}) {
    MoeRouting r;
    moe_route(logits.data(), bias.data(), 1, 4, 2, score, 0, MoeDrop::probs, r);
    EXPECT_EQ(r.expert, (std::vector<int32_t>{1, 2}));
    double want1, want2;
    if (score == MoeScore::softmax) {
      want1 = std::exp(-1.0) / (std::exp(-1.0) + std::exp(2.0));
      want2 = 1 - want1;
    } else {
      const double s1 = 1 / (1 + std::exp(1.0)), s2 = 1 / (1 + std::exp(-2.0));
      want1 = s1 / (s1 + s2), want2 = s2 / (s1 + s2);
    }
    EXPECT_NEAR(r.prob[0], want1, 1e-7);
    EXPECT_NEAR(r.prob[1], want2, 1e-7);
    EXPECT_EQ(r.routed, (std::vector<int64_t>{0, 0, 1, 1}));  // the aux loss counts choices without the bias
  }
}

TEST(MoeRoute, GroupsLimitTheChoiceToTheBestGroupsByTheirTopTwoSum) {
  // Three groups of two: {0, 1} sums 3 + 0 = 3, {2, 3} 2.5 + 2.5 = 5, {4, 5} 2.8 + 1 = 3.8.
  const std::vector<float> logits = {3, 0, 2.5f, 2.5f, 2.8f, 1};
  MoeRouting plain, grouped, one;
  moe_route(logits.data(), nullptr, 1, 6, 2, MoeScore::softmax, 0, MoeDrop::probs, plain);
  EXPECT_EQ(plain.expert, (std::vector<int32_t>{0, 4}));  // the best expert's group is not the best group
  moe_route(logits.data(), nullptr, 1, 6, 2, MoeScore::softmax, 0, MoeDrop::probs, grouped, {3, 2, 2.5});
  EXPECT_EQ(grouped.expert, (std::vector<int32_t>{4, 2}));  // groups {2, 3} and {4, 5}
  EXPECT_NEAR(grouped.prob[0], 2.5 / (1 + std::exp(-0.3)), 1e-6);  // softmax over the chosen two, times 2.5
  EXPECT_NEAR(grouped.prob[0] + grouped.prob[1], 2.5, 1e-6);
  EXPECT_EQ(grouped.routed, plain.routed);  // the aux loss counts the plain top k
  moe_route(logits.data(), nullptr, 1, 6, 2, MoeScore::softmax, 0, MoeDrop::probs, one, {3, 1, 1.0});
  EXPECT_EQ(one.expert, (std::vector<int32_t>{2, 3}));  // one group: both of {2, 3}, ties to the lower index
}

TEST(MoeRoute, BadGroupsAreErrorsNamingTheFlag) {
  const std::vector<float> logits(12, 0.0f);
  MoeRouting r;
  const auto route = [&](int64_t k, MoeTopK t) {
    moe_route(logits.data(), nullptr, 1, 12, k, MoeScore::sigmoid, 0, MoeDrop::probs, r, t);
  };
  EXPECT_THROW(route(2, {5, 1, 1.0}), Error);   // 5 groups do not divide 12 experts
  EXPECT_THROW(route(2, {12, 1, 1.0}), Error);  // groups of 1
  EXPECT_THROW(route(2, {4, 0, 1.0}), Error);   // no group kept
  EXPECT_THROW(route(2, {4, 5, 1.0}), Error);   // more groups kept than there are
  EXPECT_THROW(route(7, {4, 2, 1.0}), Error);   // 7 choices from 2 groups of 3
  try {
    route(2, {5, 1, 1.0});
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--moe-router-num-groups 5"), std::string::npos) << e.what();
  }
  route(6, {4, 2, 1.0});  // exactly the 6 experts of the 2 groups
  EXPECT_EQ(r.expert.size(), 6u);
}

TEST(MoeRoute, CapacityDropsByWeightOrByPosition) {
  // Four tokens, all preferring expert 0 (E = 2, k = 1, factor 1: capacity 2).
  const std::vector<float> logits = {1.0f, -1, 3.0f, -1, 2.0f, -1, 0.5f, -1};
  MoeRouting probs, position;
  moe_route(logits.data(), nullptr, 4, 2, 1, MoeScore::sigmoid, 1.0, MoeDrop::probs, probs);
  EXPECT_EQ(probs.kept, (std::vector<uint8_t>{0, 1, 1, 0}));  // the two largest weights: tokens 1 and 2
  EXPECT_EQ(probs.prob[0], 0.0f);
  EXPECT_EQ(probs.load, (std::vector<int64_t>{2, 0}));
  EXPECT_EQ(probs.order, (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(probs.routed, (std::vector<int64_t>{4, 0}));  // before capacity
  moe_route(logits.data(), nullptr, 4, 2, 1, MoeScore::sigmoid, 1.0, MoeDrop::position, position);
  EXPECT_EQ(position.kept, (std::vector<uint8_t>{1, 1, 0, 0}));
  EXPECT_EQ(position.order, (std::vector<int32_t>{0, 1}));
  EXPECT_THROW(parse_moe_drop("random"), Error);
  EXPECT_THROW(parse_moe_score("relu"), Error);
}

// L = sum_tj w_tj prob_tj + sum_te a_e score_te + z sum_t lse_t^2, in double from the kernel's forward.
double objective(const std::vector<float>& logits, const std::vector<float>& bias, int64_t N, int64_t E, int64_t k,
                 MoeScore score, double cap, const std::vector<float>& w, const std::vector<double>& a, double z) {
  MoeRouting r;
  moe_route(logits.data(), bias.empty() ? nullptr : bias.data(), N, E, k, score, cap, MoeDrop::probs, r);
  double L = 0;
  for (int64_t i = 0; i < N * k; ++i) L += w[static_cast<size_t>(i)] * r.prob[static_cast<size_t>(i)];
  for (int64_t t = 0; t < N; ++t)
    for (int64_t e = 0; e < E; ++e) L += a[static_cast<size_t>(e)] * r.score[static_cast<size_t>(t * E + e)];
  for (int64_t t = 0; t < N; ++t) L += z * r.lse[static_cast<size_t>(t)] * r.lse[static_cast<size_t>(t)];
  return L;
}

TEST(MoeRoute, BackwardMatchesCentralDifferences) {
  const int64_t N = 6, E = 5;
  for (MoeScore score : {MoeScore::softmax, MoeScore::sigmoid})
    for (int64_t k : {1, 2, 3})
      for (double cap : {0.0, 1.0}) {
        const auto logits = randn(static_cast<size_t>(N * E), 11 + static_cast<uint32_t>(k));
        const auto bias = randn(static_cast<size_t>(E), 5, 0.3f);
        const auto w = randn(static_cast<size_t>(N * k), 3);
        std::vector<double> a(static_cast<size_t>(E));
        for (int64_t e = 0; e < E; ++e) a[static_cast<size_t>(e)] = 0.1 * (e + 1);
        const double z = 0.05;
        MoeRouting r;
        moe_route(logits.data(), bias.data(), N, E, k, score, cap, MoeDrop::probs, r);
        std::vector<float> dl(static_cast<size_t>(N * E));
        moe_route_backward(logits.data(), r, score, w.data(), a.data(), z, dl.data());
        for (int64_t i = 0; i < N * E; ++i) {
          const float eps = 1e-3f;
          auto lp = logits, lm = logits;
          lp[static_cast<size_t>(i)] += eps;
          lm[static_cast<size_t>(i)] -= eps;
          const double num = (objective(lp, bias, N, E, k, score, cap, w, a, z) -
                              objective(lm, bias, N, E, k, score, cap, w, a, z)) /
                             (2.0 * eps);
          EXPECT_NEAR(dl[static_cast<size_t>(i)], num, 2e-3 * std::max(1.0, std::abs(num)))
              << (score == MoeScore::softmax ? "softmax" : "sigmoid") << " k " << k << " capacity " << cap
              << " logit " << i;
        }
      }
}

TEST(MoeRoute, AuxLossIsCoeffTimesExpertsTimesSumOfLoadTimesMeanScore) {
  const int64_t N = 7, E = 4, k = 2;
  const auto logits = randn(static_cast<size_t>(N * E), 9);
  MoeRouting r;
  moe_route(logits.data(), nullptr, N, E, k, MoeScore::softmax, 0, MoeDrop::probs, r);
  std::vector<double> ssum(static_cast<size_t>(E), 0.0);
  for (int64_t t = 0; t < N; ++t)
    for (int64_t e = 0; e < E; ++e) ssum[static_cast<size_t>(e)] += r.score[static_cast<size_t>(t * E + e)];
  double want = 0;
  for (int64_t e = 0; e < E; ++e)
    want += (static_cast<double>(r.routed[static_cast<size_t>(e)]) / (N * k)) * (ssum[static_cast<size_t>(e)] / N);
  EXPECT_NEAR(moe_aux_loss(0.01, r.routed.data(), ssum.data(), N, E, k), 0.01 * E * want, 1e-12);
}

TEST(MoeDispatch, GatherCombineAndTheirAdjointsAgreeWithLoops) {
  const int64_t N = 9, E = 4, k = 2, C = 3;
  const CpuCtx ctx{2};
  const auto logits = randn(static_cast<size_t>(N * E), 21);
  MoeRouting r;
  moe_route(logits.data(), nullptr, N, E, k, MoeScore::softmax, 0.75, MoeDrop::probs, r);
  const int64_t M = static_cast<int64_t>(r.order.size());
  ASSERT_LT(M, N * k);  // the capacity dropped something
  const auto x = randn(static_cast<size_t>(N * C), 22);
  std::vector<float> rows(static_cast<size_t>(M * C));
  moe_gather(ctx, r, x.data(), C, rows.data());
  for (int64_t m = 0; m < M; ++m) {
    const int64_t e = std::upper_bound(r.offsets.begin(), r.offsets.end(), m) - r.offsets.begin() - 1;
    EXPECT_EQ(r.expert[static_cast<size_t>(r.order[static_cast<size_t>(m)])], e) << "row " << m;
    for (int64_t c = 0; c < C; ++c) EXPECT_EQ(rows[m * C + c], x[r.order[m] / k * C + c]);
  }
  // combine: y = sum of kept choices' prob x row
  const auto out = randn(static_cast<size_t>(M * C), 23);
  std::vector<float> y(static_cast<size_t>(N * C));
  moe_combine(ctx, r, out.data(), C, y.data(), false);
  std::vector<double> want(static_cast<size_t>(N * C), 0.0);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t c = 0; c < C; ++c)
      want[r.order[m] / k * C + c] += r.prob[static_cast<size_t>(r.order[m])] * out[m * C + c];
  for (int64_t i = 0; i < N * C; ++i) EXPECT_NEAR(y[i], want[i], 1e-6);
  // Adjoints: <dy, combine(out)> = <combine^T(dy), out>, and dprob.
  const auto dy = randn(static_cast<size_t>(N * C), 24);
  std::vector<float> drows(static_cast<size_t>(M * C)), dprob(static_cast<size_t>(N * k));
  moe_combine_backward(ctx, r, dy.data(), out.data(), C, drows.data(), dprob.data());
  double lhs = 0, rhs = 0;
  for (int64_t i = 0; i < N * C; ++i) lhs += static_cast<double>(dy[i]) * y[i];
  for (int64_t i = 0; i < M * C; ++i) rhs += static_cast<double>(drows[i]) * out[i];
  EXPECT_NEAR(lhs, rhs, 1e-5);
  for (int64_t m = 0; m < M; ++m) {
    double dot = 0;
    for (int64_t c = 0; c < C; ++c) dot += static_cast<double>(dy[r.order[m] / k * C + c]) * out[m * C + c];
    EXPECT_NEAR(dprob[r.order[m]], dot, 1e-6);
  }
  for (int64_t i = 0; i < N * k; ++i) {
    if (!r.kept[static_cast<size_t>(i)]) {
      EXPECT_EQ(dprob[i], 0.0f);
    }
  }
  // scatter_add is gather's adjoint: <gather(x), g> = <x, scatter(g)>.
  const auto g = randn(static_cast<size_t>(M * C), 25);
  std::vector<float> dx(static_cast<size_t>(N * C), 0.0f);
  moe_scatter_add(ctx, r, g.data(), C, dx.data());
  lhs = rhs = 0;
  for (int64_t i = 0; i < M * C; ++i) lhs += static_cast<double>(rows[i]) * g[i];
  for (int64_t i = 0; i < N * C; ++i) rhs += static_cast<double>(x[i]) * dx[i];
  EXPECT_NEAR(lhs, rhs, 1e-5);
}

// Expert parallelism: rows arrive grouped by source rank, each source's by
// local expert; expert-major order puts every source's rows of expert 0
// first. Rows are tagged (source, expert, index) to check where each lands.
TEST(MoeDispatch, ReceivedRowsPermuteToExpertMajorAndBack) {
  const int64_t ranks = 3, El = 2, C = 2;
  const std::vector<int64_t> counts = {1, 2, 0, 3, 2, 1};  // [source][expert]
  std::vector<float> in;
  for (int64_t q = 0; q < ranks; ++q)
    for (int64_t e = 0; e < El; ++e)
      for (int64_t i = 0; i < counts[q * El + e]; ++i) in.insert(in.end(), {float(100 * q + 10 * e + i), float(e)});
  const CpuCtx ctx{2};
  std::vector<float> out(in.size()), back(in.size());
  std::vector<int64_t> off(El + 1);
  EXPECT_EQ(moe_permute_received(ctx, counts.data(), ranks, El, C, in.data(), out.data(), true, off.data()), 9);
  EXPECT_EQ(off, (std::vector<int64_t>{0, 3, 9}));  // expert 0: 1 + 0 + 2 rows; expert 1: 2 + 3 + 1
  std::vector<float> tags;
  for (int64_t m = 0; m < 9; ++m) tags.push_back(out[m * C]);
  EXPECT_EQ(tags, (std::vector<float>{0, 200, 201, 10, 11, 110, 111, 112, 210}));
  for (int64_t m = 0; m < 9; ++m) EXPECT_EQ(out[m * C + 1], m < 3 ? 0.0f : 1.0f);
  moe_permute_received(ctx, counts.data(), ranks, El, C, out.data(), back.data(), false);
  EXPECT_EQ(back, in);
}

TEST(MoeGroupedGemm, RowKernelGivesEachRowTheSameBitsAloneOrInItsGroup) {
  const int64_t E = 3, N = 37, K = 70;  // widths off the kernel's tiles
  const std::vector<int64_t> offsets = {0, 5, 5, 7};
  const int64_t M = offsets.back();
  const CpuCtx ctx{2};
  const auto X = randn(static_cast<size_t>(M * K), 41), W = randn(static_cast<size_t>(E * N * K), 42);
  std::vector<float> Y(static_cast<size_t>(M * N)), Y_blas(Y.size());
  grouped_rowwise_linear(ctx, offsets.data(), E, N, K, X.data(), W.data(), Y.data());
  grouped_gemm(ctx, offsets.data(), E, N, K, X.data(), W.data(), 0.0f, Y_blas.data());
  for (int64_t i = 0; i < M * N; ++i) EXPECT_NEAR(Y[i], Y_blas[i], 1e-5 * std::max(1.0f, std::abs(Y_blas[i])));
  // Each row alone in its expert's group (a decode step's one-row group) gives the same bits.
  for (int64_t e = 0; e < E; ++e)
    for (int64_t m = offsets[e]; m < offsets[e + 1]; ++m) {
      std::vector<int64_t> one(static_cast<size_t>(E + 1), 0);
      for (int64_t q = e + 1; q <= E; ++q) one[static_cast<size_t>(q)] = 1;
      std::vector<float> y(static_cast<size_t>(N));
      grouped_rowwise_linear(ctx, one.data(), E, N, K, X.data() + m * K, W.data(), y.data());
      for (int64_t n = 0; n < N; ++n) ASSERT_EQ(y[n], Y[m * N + n]) << "expert " << e << " row " << m << " output " << n;
    }
}

TEST(MoeGroupedGemm, EachGroupIsItsExpertsProduct) {
  const int64_t E = 4, N = 5, K = 3;
  const std::vector<int64_t> offsets = {0, 3, 3, 7, 8};  // expert 1 has no rows
  const int64_t M = offsets.back();
  const CpuCtx ctx{2};
  const auto X = randn(static_cast<size_t>(M * K), 31), W = randn(static_cast<size_t>(E * N * K), 32),
             dY = randn(static_cast<size_t>(M * N), 33);
  std::vector<float> Y(static_cast<size_t>(M * N)), dX(static_cast<size_t>(M * K)), dW(static_cast<size_t>(E * N * K), 7.0f);
  grouped_gemm(ctx, offsets.data(), E, N, K, X.data(), W.data(), 0.0f, Y.data());
  grouped_gemm_dx(ctx, offsets.data(), E, N, K, dY.data(), W.data(), 0.0f, dX.data());
  grouped_gemm_dw(ctx, offsets.data(), E, N, K, dY.data(), X.data(), 0.0f, dW.data());
  for (int64_t e = 0; e < E; ++e) {
    const float* w = W.data() + e * N * K;
    for (int64_t m = offsets[e]; m < offsets[e + 1]; ++m) {
      for (int64_t n = 0; n < N; ++n) {
        double y = 0;
        for (int64_t q = 0; q < K; ++q) y += static_cast<double>(X[m * K + q]) * w[n * K + q];
        EXPECT_NEAR(Y[m * N + n], y, 1e-5);
      }
      for (int64_t q = 0; q < K; ++q) {
        double d = 0;
        for (int64_t n = 0; n < N; ++n) d += static_cast<double>(dY[m * N + n]) * w[n * K + q];
        EXPECT_NEAR(dX[m * K + q], d, 1e-5);
      }
    }
    for (int64_t n = 0; n < N; ++n)
      for (int64_t q = 0; q < K; ++q) {
        double d = 0;
        for (int64_t m = offsets[e]; m < offsets[e + 1]; ++m) d += static_cast<double>(dY[m * N + n]) * X[m * K + q];
        EXPECT_NEAR(dW[e * N * K + n * K + q], d, 1e-5) << "expert " << e;  // expert 1: zeroed (beta 0)
      }
  }
}

}  // namespace
}  // namespace claw::kernels
