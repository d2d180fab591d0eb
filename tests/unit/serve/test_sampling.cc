// Sampling: greedy is the first maximum; seeded draws are reproducible and
// independent of anything but (seed, step); the filters keep exactly the
// tokens their definitions name; the draws follow the filtered distribution.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <vector>

#include "claw/core/error.h"
#include "claw/serve/sampling.h"

namespace claw::serve {
namespace {

// Probabilities 0.4, 0.3, 0.15, 0.1, 0.05 (as logits), listed out of order.
const std::vector<int32_t> kOrder = {3, 0, 4, 1, 2};  // token with the i-th largest probability
const std::vector<double> kProb = {0.4, 0.3, 0.15, 0.1, 0.05};
std::vector<float> logits() {
  std::vector<float> l(5);
  for (size_t i = 0; i < 5; ++i) l[kOrder[i]] = static_cast<float>(std::log(kProb[i]));
  return l;
}

std::map<int32_t, double> frequencies(const SamplingParams& p, int draws) {
  const std::vector<float> l = logits();
  std::map<int32_t, double> f;
  for (int s = 0; s < draws; ++s) f[sample_token(l.data(), 5, p, static_cast<uint64_t>(s)).token] += 1.0 / draws;
  return f;
}

TEST(Sampling, GreedyIsTheFirstMaximum) {
  const std::vector<float> l = {0.5f, 2.0f, -1.0f, 2.0f};
  const SampledToken t = sample_token(l.data(), 4, {}, 0);
  EXPECT_EQ(t.token, 1);
  double z = 0;
  for (float x : l) z += std::exp(static_cast<double>(x));
  EXPECT_NEAR(t.logprob, 2.0 - std::log(z), 1e-7);  // fp32 exp terms (kernels::LogSoftmaxRow)
  // top_k = 1 is greedy at any temperature.
  EXPECT_EQ(sample_token(l.data(), 4, {.temperature = 1.5, .top_k = 1, .seed = 9}, 3).token, 1);
}

TEST(Sampling, SeededDrawsDependOnlyOnSeedAndStep) {
  const std::vector<float> l = logits();
  const SamplingParams p{.temperature = 1.0, .seed = 1234};
  std::vector<int32_t> first, again;
  for (uint64_t s = 0; s < 200; ++s) first.push_back(sample_token(l.data(), 5, p, s).token);
  // Interleaved with another request's draws, in reverse order: the same tokens.
  for (uint64_t s = 200; s-- > 0;) {
    sample_token(l.data(), 5, {.temperature = 0.7, .seed = 99}, s);
    again.insert(again.begin(), sample_token(l.data(), 5, p, s).token);
  }
  EXPECT_EQ(first, again);
  std::vector<int32_t> other;
  for (uint64_t s = 0; s < 200; ++s) other.push_back(sample_token(l.data(), 5, {.temperature = 1.0, .seed = 1235}, s).token);
  EXPECT_NE(first, other);
}

TEST(Sampling, DrawsFollowTheDistribution) {
  const auto f = frequencies({.temperature = 1.0, .seed = 7}, 40000);
  for (size_t i = 0; i < 5; ++i) EXPECT_NEAR(f.at(kOrder[i]), kProb[i], 0.01) << "token " << kOrder[i];
  // Temperature 0.5 squares the probabilities (then renormalises).
  double z = 0;
  for (double q : kProb) z += q * q;
  const auto g = frequencies({.temperature = 0.5, .seed = 7}, 40000);
  for (size_t i = 0; i < 5; ++i) EXPECT_NEAR(g.count(kOrder[i]) ? g.at(kOrder[i]) : 0.0, kProb[i] * kProb[i] / z, 0.01);
}

TEST(Sampling, FiltersKeepWhatTheyName) {
  // top_k = 2: the two most likely, renormalised (0.4, 0.3) / 0.7.
  auto f = frequencies({.temperature = 1.0, .top_k = 2, .seed = 3}, 20000);
  EXPECT_EQ(f.size(), 2u);
  EXPECT_NEAR(f[kOrder[0]], 0.4 / 0.7, 0.015);
  // top_p = 0.7: 0.4 + 0.3 reaches it, so two tokens; 0.71 needs a third.
  EXPECT_EQ(frequencies({.temperature = 1.0, .top_p = 0.7, .seed = 3}, 5000).size(), 2u);
  EXPECT_EQ(frequencies({.temperature = 1.0, .top_p = 0.71, .seed = 3}, 5000).size(), 3u);
  // min_p = 0.3: tokens with p >= 0.12 (0.4, 0.3, 0.15).
  f = frequencies({.temperature = 1.0, .min_p = 0.3, .seed = 3}, 20000);
  EXPECT_EQ(f.size(), 3u);
  EXPECT_NEAR(f[kOrder[2]], 0.15 / 0.85, 0.015);
  // The log-probability stays the model's, whatever the filters.
  const std::vector<float> l = logits();
  const SampledToken t = sample_token(l.data(), 5, {.temperature = 0.3, .top_k = 2, .seed = 5}, 0);
  EXPECT_NEAR(t.logprob, l[t.token], 1e-6);  // the logits are already log-probabilities
}

TEST(Sampling, BadParametersNameTheField) {
  auto message = [](SamplingParams p) {
    try {
      p.validate();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(message({.temperature = -0.1}).find("temperature must be between 0 and 2"), std::string::npos);
  EXPECT_NE(message({.temperature = 2.5}).find("temperature"), std::string::npos);
  EXPECT_NE(message({.top_k = -2}).find("top_k"), std::string::npos);
  EXPECT_NE(message({.top_p = 0.0}).find("top_p must be in (0, 1]"), std::string::npos);
  EXPECT_NE(message({.min_p = 1.5}).find("min_p"), std::string::npos);
  EXPECT_EQ(message({.temperature = 0.7, .top_k = -1, .top_p = 0.9, .min_p = 0.05}), "");
}

TEST(Sampling, NanLogitsRankLast) {
  const std::vector<float> l = {std::nanf(""), 1.0f, 0.0f};
  for (uint64_t s = 0; s < 50; ++s) EXPECT_NE(sample_token(l.data(), 3, {.temperature = 1.0, .seed = 2}, s).token, 0);
}

}  // namespace
}  // namespace claw::serve
