// The GRPO loss (rl/grpo_loss.h): advantages against worked values, and the
// per-token weights it returns against central differences of its own loss
// in each token loss, for every combination of KL, the importance
// correction and both aggregations. (tests/parity checks it against the
// formula written in PyTorch over a whole model.)
#include <algorithm>
#include <cmath>
#include <vector>

#include <gtest/gtest.h>

#include "claw/core/error.h"
#include "claw/rl/grpo_loss.h"

namespace claw::rl {
namespace {

TEST(Grpo, AdvantagesPerGroup) {
  // Group 1: mean 0.5, unbiased std sqrt(1/3); group 2: all equal -> 0.
  const std::vector<double> r = {1, 0, 1, 0, 0.25, 0.25, 0.25, 0.25};
  const std::vector<double> a = group_advantages(r, 4, false);
  const double s = std::sqrt(1.0 / 3.0) + 1e-4;
  EXPECT_DOUBLE_EQ(a[0], 0.5 / s);
  EXPECT_DOUBLE_EQ(a[1], -0.5 / s);
  for (int i = 4; i < 8; ++i) EXPECT_EQ(a[i], 0.0);
  const std::vector<double> b = group_advantages(r, 4, true);
  EXPECT_DOUBLE_EQ(b[0], 0.5);
  EXPECT_DOUBLE_EQ(b[3], -0.5);
}

// Episodes whose environment failed are left out: their advantage is 0 and
// the group's mean and std are over the others; a group with one valid
// member has nothing to compare.
TEST(Grpo, AdvantagesLeaveFailedEpisodesOut) {
  const std::vector<double> r = {1, 0, 0, 0.7, 1, 1, 1, 0};
  const std::vector<bool> valid = {true, true, false, true, true, false, false, false};
  const std::vector<double> a = group_advantages(r, 4, true, &valid);
  const double mean = (1 + 0 + 0.7) / 3;
  EXPECT_DOUBLE_EQ(a[0], 1 - mean);
  EXPECT_DOUBLE_EQ(a[1], 0 - mean);
  EXPECT_EQ(a[2], 0.0);
  EXPECT_DOUBLE_EQ(a[3], 0.7 - mean);
  for (int i = 4; i < 8; ++i) EXPECT_EQ(a[i], 0.0);
  const std::vector<double> all = group_advantages(r, 4, false);
  const std::vector<bool> every(8, true);
  EXPECT_EQ(group_advantages(r, 4, false, &every), all);
}

TEST(Grpo, ConfigErrorsNameTheFlag) {
  auto msg = [](GrpoConfig c) {
    try {
      c.validate();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(msg({.num_generations = 1}).find("--num-generations"), std::string::npos);
  EXPECT_NE(msg({.loss_agg_mode = "mean"}).find("--loss-agg-mode mean"), std::string::npos);
  EXPECT_NE(msg({.kl_beta = -1}).find("--kl-beta"), std::string::npos);
  EXPECT_NE(msg({.is_truncation = 0.5}).find("--is-truncation"), std::string::npos);
}

// Two rows of T = 12: prompts of 3 and 5 tokens, completions of 7 and 5.
struct Case {
  static constexpr int64_t T = 12;
  std::vector<PolicySample> samples;
  std::vector<int32_t> targets = std::vector<int32_t>(2 * T, -1);
  std::vector<float> losses = std::vector<float>(2 * T, 0.0f);
  explicit Case(bool kl, bool corrected) {
    const int64_t prompt[2] = {3, 5}, n[2] = {7, 5};
    const double adv[2] = {0.8, -1.1};
    for (int r = 0; r < 2; ++r) {
      PolicySample s{.prompt_len = prompt[r], .advantage = adv[r]};
      for (int64_t j = 0; j < n[r]; ++j) {
        const int64_t t = prompt[r] - 1 + j;
        targets[r * T + t] = 7;
        // Token losses on a 1/1024 grid (the differences below are exact);
        // behaviour log-probabilities around them so that rho spans both
        // sides of the clip range, away from its edges.
        losses[r * T + t] = static_cast<float>(std::round((0.5 + 0.37 * static_cast<double>((j * 5 + r * 3) % 7)) * 1024) / 1024);
        const double lp = -losses[r * T + t];
        const double shift[7] = {-0.6, -0.1, 0.05, 0.4, -0.35, 0.15, 0.7};
        s.behaviour.push_back(static_cast<float>(lp + shift[(j + r) % 7]));
        if (corrected) s.proximal.push_back(static_cast<float>(lp + 0.5 * shift[(j + 2 * r + 1) % 7]));
        if (kl) s.reference.push_back(static_cast<float>(lp + 0.3 * shift[(j + 3) % 7]));
      }
      samples.push_back(std::move(s));
    }
  }
};

TEST(Grpo, WeightsAreTheLossDerivative) {
  for (bool kl : {false, true})
    for (bool corrected : {false, true})
      for (const char* agg : {"token-mean", "seq-mean-token-mean"}) {
        SCOPED_TRACE(::testing::Message() << "kl " << kl << " corrected " << corrected << " " << agg);
        Case c(kl, corrected);
        GrpoConfig cfg{.num_generations = 2, .clip_eps_low = 0.2, .clip_eps_high = 0.28,
                       .kl_beta = kl ? 0.05 : 0.0, .loss_agg_mode = agg, .importance_correction = corrected,
                       .is_truncation = 1.2};
        GrpoLoss loss(cfg);
        loss.set_batch(10, &c.samples);
        model::StepCtx ctx{.B = 2, .T = Case::T, .sample0 = 10};
        std::vector<float> w(2 * Case::T), scratch(2 * Case::T);
        loss.apply(ctx, c.losses.data(), c.targets.data(), w.data());
        const GrpoSums sums = loss.take();
        EXPECT_EQ(sums.sequences, 2);
        EXPECT_EQ(sums.tokens, 12);
        EXPECT_GT(sums.clipped, 0) << "some tokens on the clipped branch";
        if (corrected) {
          EXPECT_GT(sums.is_truncated, 0) << "some weights truncated";
        }
        const float h = 1.0f / 1024;
        for (int64_t i = 0; i < 2 * Case::T; ++i) {
          if (c.targets[i] < 0) {
            EXPECT_EQ(w[i], 0.0f);
            continue;
          }
          std::vector<float> up = c.losses, down = c.losses;
          up[i] += h;
          down[i] -= h;
          const double fd = (loss.apply(ctx, up.data(), c.targets.data(), scratch.data()) -
                             loss.apply(ctx, down.data(), c.targets.data(), scratch.data())) / (2.0 * h);
          EXPECT_NEAR(w[i], fd, 1e-5 + 1e-4 * std::abs(fd)) << "token " << i;
        }
      }
}

// A multi-turn episode's learned tokens sit at given positions (the
// environment's turn between them is context): the loss is the same and each
// token's weight lands at its position.
TEST(Grpo, PositionsPlaceTheLearnedTokens) {
  Case c(true, true);
  Case moved(true, true);
  const std::vector<int32_t> at = {2, 3, 4, 7, 8, 10, 11};  // row 0: 3 tokens, a gap, 2, a gap, 2
  std::fill(moved.targets.begin(), moved.targets.begin() + Case::T, -1);
  std::fill(moved.losses.begin(), moved.losses.begin() + Case::T, 0.0f);
  for (size_t j = 0; j < at.size(); ++j) {
    const int64_t from = c.samples[0].prompt_len - 1 + static_cast<int64_t>(j);
    moved.targets[at[j]] = c.targets[from];
    moved.losses[at[j]] = c.losses[from];
  }
  moved.samples[0].positions = at;
  for (size_t j = 0; j < at.size(); ++j) EXPECT_EQ(moved.samples[0].token_at(at[j]), static_cast<int64_t>(j));
  EXPECT_EQ(moved.samples[0].token_at(5), -1);
  EXPECT_EQ(c.samples[0].token_at(c.samples[0].prompt_len), 1);
  GrpoConfig cfg{.num_generations = 2, .kl_beta = 0.05, .importance_correction = true, .is_truncation = 1.2};
  model::StepCtx ctx{.B = 2, .T = Case::T, .sample0 = 0};
  std::vector<float> w(2 * Case::T), wm(2 * Case::T);
  GrpoLoss a(cfg), b(cfg);
  a.set_batch(0, &c.samples);
  b.set_batch(0, &moved.samples);
  EXPECT_EQ(a.apply(ctx, c.losses.data(), c.targets.data(), w.data()),
            b.apply(ctx, moved.losses.data(), moved.targets.data(), wm.data()));
  for (size_t j = 0; j < at.size(); ++j) EXPECT_EQ(wm[at[j]], w[c.samples[0].prompt_len - 1 + j]);
  for (int64_t t = 0; t < Case::T; ++t)
    if (moved.targets[t] < 0) EXPECT_EQ(wm[t], 0.0f) << t;
  for (int64_t i = Case::T; i < 2 * Case::T; ++i) EXPECT_EQ(wm[i], w[i]);
}

TEST(Grpo, TokenMeanDividesByTheBatchTokens) {
  // With rho = 1 everywhere and no KL, each token's loss is -A, so the
  // token mean is -(7 A0 + 5 A1) / 12 per sequence-normalised unit: the
  // trainer divides the returned sum by 2 sequences.
  Case c(false, false);
  for (PolicySample& s : c.samples)
    for (int64_t j = 0; j < static_cast<int64_t>(s.behaviour.size()); ++j)
      s.behaviour[j] = -c.losses[(&s - c.samples.data()) * Case::T + s.prompt_len - 1 + j];
  model::StepCtx ctx{.B = 2, .T = Case::T, .sample0 = 0};
  std::vector<float> w(2 * Case::T);
  GrpoLoss token({.num_generations = 2});
  token.set_batch(0, &c.samples);
  EXPECT_NEAR(token.apply(ctx, c.losses.data(), c.targets.data(), w.data()) / 2, -(7 * 0.8 - 5 * 1.1) / 12, 1e-6);
  GrpoLoss seq({.num_generations = 2, .loss_agg_mode = "seq-mean-token-mean"});
  seq.set_batch(0, &c.samples);
  EXPECT_NEAR(seq.apply(ctx, c.losses.data(), c.targets.data(), w.data()) / 2, -(0.8 - 1.1) / 2, 1e-6);
}

}  // namespace
}  // namespace claw::rl
