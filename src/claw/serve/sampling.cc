#include "claw/serve/sampling.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "claw/core/error.h"
#include "claw/core/philox.h"
#include "claw/kernels/cpu/cross_entropy.h"

namespace claw::serve {
namespace {

// One uniform draw in [0, 1) with 53 random bits, for step `step` of the
// request seeded with `seed`.
double uniform(uint64_t seed, uint64_t step) {
  const Philox::Block b = RandomStream(seed, hash_name("sampling")).block(step);
  const uint64_t bits = (static_cast<uint64_t>(b[0] >> 5) << 26) | (b[1] >> 6);
  return static_cast<double>(bits) * (1.0 / 9007199254740992.0);
}

}  // namespace

double log_softmax_at(const float* logits, int64_t V, int32_t token) {
  // kernels::LogSoftmaxRow: sample_token's and score_token's figures agree
  // with each other and with an RL learner's exact loss to the bit.
  return kernels::LogSoftmaxRow(logits, V).logprob(logits[token]);
}

void SamplingParams::validate() const {
  if (!(temperature >= 0.0 && temperature <= 2.0))
    fail("temperature must be between 0 and 2 (0 is greedy), got {}", temperature);
  if (top_k < -1) fail("top_k must be -1 or 0 (no limit) or a positive count, got {}", top_k);
  if (!(top_p > 0.0 && top_p <= 1.0)) fail("top_p must be in (0, 1], got {}", top_p);
  if (!(min_p >= 0.0 && min_p <= 1.0)) fail("min_p must be in [0, 1], got {}", min_p);
}

SampledToken sample_token(const float* logits, int64_t V, const SamplingParams& p, uint64_t step,
                          bool with_logprob) {
  CLAW_CHECK(V > 0, "sampling from an empty vocabulary");
  SampledToken out;
  if (p.greedy()) {
    out.token = static_cast<int32_t>(std::max_element(logits, logits + V) - logits);  // first maximum
    if (with_logprob) out.logprob = log_softmax_at(logits, V, out.token);
    return out;
  }
  // A NaN logit ranks below every number (a strict weak order even then).
  const auto key = [&](int32_t i) {
    return std::isnan(logits[i]) ? -std::numeric_limits<float>::infinity() : logits[i];
  };
  // Candidates in id order, or by (logit desc, id asc) where top-k or top-p
  // needs a ranking: a full sort of a 128K vocabulary costs more than the
  // decoding step's GEMV, so plain sampling does without.
  std::vector<int32_t> ids(static_cast<size_t>(V));
  std::iota(ids.begin(), ids.end(), 0);
  const int64_t k = p.top_k > 0 ? std::min<int64_t>(p.top_k, V) : V;
  const bool ranked = k < V || p.top_p < 1.0;
  if (ranked) {
    const auto before = [&](int32_t a, int32_t b) { return key(a) > key(b) || (key(a) == key(b) && a < b); };
    std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), before);
    ids.resize(static_cast<size_t>(k));
  }
  // Weights exp(logit / temperature - max): the most likely candidate has 1.
  float best = key(ids[0]);
  for (int32_t i : ids) best = std::max(best, key(i));
  const double top = static_cast<double>(best) / p.temperature;
  if (!std::isfinite(top)) fail("cannot sample: the largest logit is {}", best);
  std::vector<double> w(ids.size());
  double total = 0;
  for (size_t i = 0; i < ids.size(); ++i) total += w[i] = std::exp(static_cast<double>(key(ids[i])) / p.temperature - top);
  // Top-p: the shortest ranked prefix whose probability reaches top_p (at least one token).
  if (p.top_p < 1.0) {
    double cum = 0;
    for (size_t i = 0; i < ids.size(); ++i)
      if ((cum += w[i]) >= p.top_p * total) {
        ids.resize(i + 1);
        w.resize(i + 1);
        break;
      }
  }
  // Min-p: tokens at least min_p times as likely as the most likely one
  // (a ratio of probabilities, the same before and after renormalising).
  if (p.min_p > 0.0) {
    size_t kept = 0;
    for (size_t i = 0; i < ids.size(); ++i)
      if (w[i] >= p.min_p) ids[kept] = ids[i], w[kept++] = w[i];
    ids.resize(kept);
    w.resize(kept);
  }
  // Inverse CDF in candidate order.
  double mass = 0;
  for (double x : w) mass += x;
  const double u = uniform(p.seed, step) * mass;
  double cum = 0;
  size_t pick = ids.size() - 1;
  for (size_t i = 0; i < ids.size(); ++i)
    if (u < (cum += w[i])) {
      pick = i;
      break;
    }
  out.token = ids[pick];
  if (with_logprob) out.logprob = log_softmax_at(logits, V, out.token);
  return out;
}

TokenScores score_token(const float* logits, int64_t V, int32_t token, int64_t k) {
  const kernels::LogSoftmaxRow norm(logits, V);
  TokenScores out{.logprob = norm.logprob(logits[token])};
  k = std::min(k, V);
  if (k <= 0) return out;
  std::vector<int32_t> ids(static_cast<size_t>(V));
  std::iota(ids.begin(), ids.end(), 0);
  std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  out.top.resize(static_cast<size_t>(k));
  for (int64_t i = 0; i < k; ++i) out.top[i] = {ids[i], norm.logprob(logits[ids[i]])};
  return out;
}

}  // namespace claw::serve
