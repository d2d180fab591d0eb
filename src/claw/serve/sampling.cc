#include "claw/serve/sampling.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "claw/core/error.h"
#include "claw/core/philox.h"

namespace claw::serve {
namespace {

// One uniform draw in [0, 1) with 53 random bits, for step `step` of the
// request seeded with `seed`.
double uniform(uint64_t seed, uint64_t step) {
  const Philox::Block b = RandomStream(seed, hash_name("sampling")).block(step);
  const uint64_t bits = (static_cast<uint64_t>(b[0] >> 5) << 26) | (b[1] >> 6);
  return static_cast<double>(bits) * (1.0 / 9007199254740992.0);
}

double log_softmax_at(const float* logits, int64_t V, int32_t token) {
  double m = -std::numeric_limits<double>::infinity();
  for (int64_t i = 0; i < V; ++i) m = std::max(m, static_cast<double>(logits[i]));
  double s = 0;
  for (int64_t i = 0; i < V; ++i) s += std::exp(static_cast<double>(logits[i]) - m);
  return static_cast<double>(logits[token]) - m - std::log(s);
}

}  // namespace

void SamplingParams::validate() const {
  if (!(temperature >= 0.0 && temperature <= 2.0))
    fail("temperature must be between 0 and 2 (0 is greedy), got {}", temperature);
  if (top_k < -1) fail("top_k must be -1 or 0 (no limit) or a positive count, got {}", top_k);
  if (!(top_p > 0.0 && top_p <= 1.0)) fail("top_p must be in (0, 1], got {}", top_p);
  if (!(min_p >= 0.0 && min_p <= 1.0)) fail("min_p must be in [0, 1], got {}", min_p);
}

SampledToken sample_token(const float* logits, int64_t V, const SamplingParams& p, uint64_t step) {
  CLAW_CHECK(V > 0, "sampling from an empty vocabulary");
  SampledToken out;
  if (p.greedy()) {
    out.token = static_cast<int32_t>(std::max_element(logits, logits + V) - logits);  // first maximum
    out.logprob = log_softmax_at(logits, V, out.token);
    return out;
  }
  // Candidates by (logit desc, id asc); only the first top_k need ordering.
  std::vector<int32_t> ids(static_cast<size_t>(V));
  std::iota(ids.begin(), ids.end(), 0);
  // A NaN logit ranks below every number (a strict weak order even then).
  const auto key = [&](int32_t i) {
    return std::isnan(logits[i]) ? -std::numeric_limits<float>::infinity() : logits[i];
  };
  const auto before = [&](int32_t a, int32_t b) { return key(a) > key(b) || (key(a) == key(b) && a < b); };
  const int64_t k = p.top_k > 0 ? std::min<int64_t>(p.top_k, V) : V;
  std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), before);
  ids.resize(static_cast<size_t>(k));
  // Softmax of logits / temperature over the top k, in that order.
  std::vector<double> prob(ids.size());
  const double top = static_cast<double>(key(ids[0])) / p.temperature;
  if (!std::isfinite(top)) fail("cannot sample: the largest logit is {}", logits[ids[0]]);
  double total = 0;
  for (size_t i = 0; i < ids.size(); ++i)
    total += prob[i] = std::exp(static_cast<double>(key(ids[i])) / p.temperature - top);
  for (double& q : prob) q /= total;
  // Top-p: the shortest prefix whose mass reaches top_p (at least one token).
  size_t keep = ids.size();
  if (p.top_p < 1.0) {
    double cum = 0;
    for (size_t i = 0; i < ids.size(); ++i) {
      cum += prob[i];
      if (cum >= p.top_p) {
        keep = i + 1;
        break;
      }
    }
  }
  // Min-p: tokens at least min_p times as likely as the most likely one
  // (relative to the renormalised distribution, so the ratio is unchanged).
  if (p.min_p > 0.0)
    while (keep > 1 && prob[keep - 1] < p.min_p * prob[0]) --keep;
  double mass = 0;
  for (size_t i = 0; i < keep; ++i) mass += prob[i];
  // Inverse CDF in candidate order.
  const double u = uniform(p.seed, step) * mass;
  double cum = 0;
  size_t pick = keep - 1;
  for (size_t i = 0; i < keep; ++i) {
    cum += prob[i];
    if (u < cum) {
      pick = i;
      break;
    }
  }
  out.token = ids[pick];
  out.logprob = log_softmax_at(logits, V, out.token);
  return out;
}

}  // namespace claw::serve
