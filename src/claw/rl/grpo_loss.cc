#include "claw/rl/grpo_loss.h"

#include <algorithm>
#include <cmath>

#include "claw/core/error.h"

namespace claw::rl {

LossAgg GrpoConfig::agg() const {
  if (loss_agg_mode == "token-mean") return LossAgg::token_mean;
  if (loss_agg_mode == "seq-mean-token-mean") return LossAgg::seq_mean_token_mean;
  fail("--loss-agg-mode {}: expected token-mean or seq-mean-token-mean", loss_agg_mode);
}

void GrpoConfig::validate() const {
  agg();
  if (num_generations < 2)
    fail("--num-generations {}: GRPO compares completions of a prompt; use 2 or more", num_generations);
  if (!(clip_eps_low >= 0 && clip_eps_low < 1)) fail("--clip-eps-low {}: expected a value in [0, 1)", clip_eps_low);
  if (!(clip_eps_high >= 0)) fail("--clip-eps-high {}: expected a value >= 0", clip_eps_high);
  if (!(kl_beta >= 0)) fail("--kl-beta {}: expected a value >= 0 (0: no reference model)", kl_beta);
  if (!(is_truncation >= 1)) fail("--is-truncation {}: expected a value >= 1", is_truncation);
}

std::vector<double> group_advantages(const std::vector<double>& rewards, int64_t group, bool no_std,
                                     const std::vector<bool>* valid) {
  const int64_t n = static_cast<int64_t>(rewards.size());
  CLAW_CHECK(group >= 2 && n % group == 0, "{} rewards in groups of {}", n, group);
  CLAW_CHECK(!valid || static_cast<int64_t>(valid->size()) == n, "{} validity flags for {} rewards", valid->size(), n);
  auto ok = [&](int64_t i) { return !valid || (*valid)[static_cast<size_t>(i)]; };
  std::vector<double> adv(rewards.size(), 0.0);
  for (int64_t g = 0; g < n; g += group) {
    double mean = 0, m = 0;
    for (int64_t i = g; i < g + group; ++i)
      if (ok(i)) mean += rewards[i], m += 1;
    if (m < 2) continue;
    mean /= m;
    double var = 0;
    for (int64_t i = g; i < g + group; ++i)
      if (ok(i)) var += (rewards[i] - mean) * (rewards[i] - mean);
    const double std = std::sqrt(var / (m - 1));
    for (int64_t i = g; i < g + group; ++i)
      if (ok(i)) adv[i] = no_std ? rewards[i] - mean : (rewards[i] - mean) / (std + 1e-4);
  }
  return adv;
}

int64_t PolicySample::token_at(int64_t t) const {
  if (positions.empty()) {
    const int64_t j = t - (prompt_len - 1);
    return j >= 0 && j < static_cast<int64_t>(behaviour.size()) ? j : -1;
  }
  const auto it = std::lower_bound(positions.begin(), positions.end(), static_cast<int32_t>(t));
  return it != positions.end() && *it == t ? static_cast<int64_t>(it - positions.begin()) : -1;
}

GrpoLoss::GrpoLoss(GrpoConfig cfg) : cfg_(std::move(cfg)), agg_(cfg_.agg()) { cfg_.validate(); }

void GrpoLoss::set_batch(int64_t first, const std::vector<PolicySample>* samples) {
  first_ = first;
  samples_ = samples;
  double tokens = 0;
  for (const PolicySample& s : *samples) tokens += static_cast<double>(s.behaviour.size());
  token_scale_ = tokens > 0 ? static_cast<double>(samples->size()) / tokens : 1.0;
}

double GrpoLoss::apply(const model::StepCtx& ctx, const float* losses, const int32_t* targets, float* weights) {
  CLAW_CHECK(samples_ != nullptr, "GrpoLoss::apply before set_batch");
  const int64_t T = ctx.T;
  const double lo = 1.0 - cfg_.clip_eps_low, hi = 1.0 + cfg_.clip_eps_high, beta = cfg_.kl_beta;
  const bool corrected = cfg_.importance_correction;
  std::fill_n(weights, ctx.B * T, 0.0f);
  double total = 0;
  for (int64_t row = 0; row < ctx.B; ++row) {
    const int64_t index = static_cast<int64_t>(ctx.sample0) + row - first_;
    CLAW_CHECK(index >= 0 && index < static_cast<int64_t>(samples_->size()), "sample {} is not in the batch",
               index + first_);
    const PolicySample& s = (*samples_)[static_cast<size_t>(index)];
    const int64_t n = static_cast<int64_t>(s.behaviour.size());
    CLAW_CHECK(s.prompt_len >= 1 && (n == 0 || s.position(n - 1) < T),
               "completion of {} tokens after a {}-token prompt in {}", n, s.prompt_len, T);
    CLAW_CHECK(s.positions.empty() || static_cast<int64_t>(s.positions.size()) == n, "{} positions for {} tokens",
               s.positions.size(), n);
    CLAW_CHECK(!corrected || static_cast<int64_t>(s.proximal.size()) == n, "no proximal log-probabilities");
    CLAW_CHECK(beta == 0 || static_cast<int64_t>(s.reference.size()) == n, "no reference log-probabilities");
    // d loss / d l_t for this completion's tokens.
    const double norm = agg_ == LossAgg::token_mean ? token_scale_ : 1.0 / std::max<double>(static_cast<double>(n), 1);
    const double A = s.advantage;
    double seq_loss = 0;
    for (int64_t j = 0; j < n; ++j) {
      const int64_t t = s.position(j);
      CLAW_CHECK(targets[row * T + t] >= 0, "completion token {} of sample {} has no target", j, index + first_);
      const double lp = -static_cast<double>(losses[row * T + t]);
      const double beh = s.behaviour[j];
      if (s.on_policy) {
        const double d = std::abs(lp - beh);
        sums_.mismatch_tokens += 1;
        sums_.mismatch_sum += d;
        sums_.mismatch_max = std::max(sums_.mismatch_max, d);
        sums_.mismatch_over += d > 1e-5;
      }
      const double old = corrected ? s.proximal[j] : beh;
      double w = 1;
      if (corrected) {
        w = std::exp(old - beh);
        if (w > cfg_.is_truncation) {
          w = cfg_.is_truncation;
          sums_.is_truncated += 1;
        }
      }
      const double rho = std::exp(lp - old);
      const double unclipped = rho * A, clipped = std::clamp(rho, lo, hi) * A;
      // min(unclipped, clipped): the gradient flows through the unclipped
      // term unless the clipped one is smaller (then it is a constant).
      const bool flat = clipped < unclipped;
      const double surrogate = flat ? clipped : unclipped;
      const double dsurr_dlp = flat ? 0.0 : rho * A;
      double l = -w * surrogate, dl_dlp = -w * dsurr_dlp;
      if (beta > 0) {
        const double d = s.reference[j] - lp, e = std::exp(d);
        const double k3 = e - d - 1;
        l += beta * k3;
        dl_dlp += beta * (1 - e);
        sums_.kl += k3;
      }
      seq_loss += l;
      // token loss = -lp: d loss / d token loss = -d loss / d lp.
      weights[row * T + t] = static_cast<float>(-dl_dlp * norm);
      sums_.clipped += flat;
      sums_.ratio += rho;
      sums_.is_weight += w;
    }
    total += seq_loss * norm;
    sums_.sequences += 1;
    sums_.tokens += static_cast<double>(n);
    sums_.loss += seq_loss * norm;
  }
  return total;
}

GrpoSums GrpoLoss::take() {
  GrpoSums s = sums_;
  sums_ = {};
  return s;
}

double TokenLogps::apply(const model::StepCtx& ctx, const float* losses, const int32_t* targets, float* weights) {
  std::fill_n(weights, ctx.B * ctx.T, 0.0f);
  for (int64_t row = 0; row < ctx.B; ++row)
    for (int64_t t = 0; t < ctx.T; ++t)
      if (targets[row * ctx.T + t] >= 0)
        sink_(static_cast<int64_t>(ctx.sample0) + row, t, -losses[row * ctx.T + t]);
  return 0;
}

}  // namespace claw::rl
