// The GRPO objective (Shao et al. 2024, DeepSeekMath, eq. 3) with the
// clip-higher of DAPO (Yu et al. 2025) and a truncated importance-sampling
// correction for trajectories sampled by older weights (decoupled PPO,
// Hilton et al. 2022; AReaL).
//
// A step trains on groups of G completions of the same prompt. Completion i
// of a group with rewards r_1..r_G has the advantage
//   A_i = (r_i - mean(r)) / (std(r) + 1e-4)     (std: unbiased, as TRL's)
//   A_i =  r_i - mean(r)                         (--advantage-no-std, Dr. GRPO)
// and each of its tokens t, with lp_t = log pi_theta(token | before), the
// loss
//   l_t = -w_t min(rho_t A_i, clip(rho_t, 1 - eps_low, 1 + eps_high) A_i) + beta k3_t
//   rho_t = exp(lp_t - old_t)
//   k3_t  = exp(ref_t - lp_t) - (ref_t - lp_t) - 1   (Schulman's k3 estimator of KL(pi_theta || pi_ref))
// where old_t and w_t are
//   without the correction:  old_t = beh_t (the generator's log-probability
//                            at sampling time), w_t = 1;
//   with it:                 old_t = prox_t (the learner's own log-
//                            probability at the weights it is about to
//                            update, recomputed), w_t = min(exp(prox_t -
//                            beh_t), C): pi_learner / pi_behaviour,
//                            truncated at C (--is-truncation), no gradient.
// With beta = 0 (--kl-beta 0) no reference model is needed or run.
//
// Aggregation (verl's names, --loss-agg-mode):
//   token-mean            sum over every completion token of the global
//                         batch / their count (DAPO);
//   seq-mean-token-mean   each completion's mean over its tokens, then the
//                         mean over completions (the GRPO paper).
//
// It is a model::SequenceLoss: the output layer hands it every token's loss
// (-lp_t) and it returns d loss / d token loss, so the learner runs at any
// TP/PP/DP layout unchanged. Units are sequences: token-mean scales each
// token by (completions / tokens) of the whole global batch, so the
// trainer's division by the completion count yields the token mean.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "claw/model/step.h"

namespace claw::rl {

enum class LossAgg { token_mean, seq_mean_token_mean };

struct GrpoConfig {
  int64_t num_generations = 8;             // --num-generations: G completions per prompt
  double clip_eps_low = 0.2;               // --clip-eps-low
  double clip_eps_high = 0.2;              // --clip-eps-high (DAPO's clip-higher: 0.28)
  double kl_beta = 0.0;                    // --kl-beta: weight of k3 against the reference (0: no reference)
  bool advantage_no_std = false;           // --advantage-no-std: A = r - mean(r)
  std::string loss_agg_mode = "token-mean";  // --loss-agg-mode token-mean|seq-mean-token-mean
  bool importance_correction = false;      // --importance-correction: old = the learner's recomputed
                                           // log-probabilities, weighted by min(pi_learner / pi_behaviour, C)
  double is_truncation = 2.0;              // --is-truncation: C
  bool learner_batch_invariant = false;    // --learner-batch-invariant: the learners' forward in the engine's
                                           // batch-invariant kernels (not BLAS GEMMs and flash attention)
  LossAgg agg() const;                     // throws naming --loss-agg-mode
  void validate() const;                   // throws naming the flag
};

// Advantages of `rewards`, consecutive groups of `group` completions.
// `valid` (when given) leaves some out: their advantage is 0 and the
// others' mean and std are over the valid ones of the group (an episode
// whose environment failed; a group with fewer than 2 valid gets 0).
std::vector<double> group_advantages(const std::vector<double>& rewards, int64_t group, bool no_std,
                                     const std::vector<bool>* valid = nullptr);

// What the loss needs of one completion. Its learned token j is the target
// of position prompt_len - 1 + j of its row, or of positions[j] when given
// (a multi-turn episode: the policy's turns, not what the environment said
// between them).
struct PolicySample {
  int64_t prompt_len = 0;
  std::vector<int32_t> positions;  // ascending; empty: prompt_len - 1 + j
  int64_t position(int64_t j) const { return positions.empty() ? prompt_len - 1 + j : positions[static_cast<size_t>(j)]; }
  // The j of position t, or -1 when t holds no learned token.
  int64_t token_at(int64_t t) const;
  double advantage = 0;
  std::vector<float> behaviour;  // beh_j: log-probabilities at sampling
  std::vector<float> proximal;   // prox_j (with the correction; else empty)
  std::vector<float> reference;  // ref_j (kl_beta > 0; else empty)
  // Sampled with the learner's current weights: its behaviour log-
  // probabilities are compared with the learner's (GrpoSums::mismatch).
  bool on_policy = false;
};

// Sums over this rank's completions since the last take().
struct GrpoSums {
  double sequences = 0, tokens = 0, loss = 0, kl = 0;
  double clipped = 0;       // tokens whose clipped branch was taken (no gradient)
  double ratio = 0;         // sum of rho_t
  double is_weight = 0;     // sum of w_t
  double is_truncated = 0;  // tokens whose weight hit C
  // |lp_t - beh_t| over the tokens of on-policy samples: what the learner
  // and the generator disagree on at the same weights.
  double mismatch_tokens = 0, mismatch_sum = 0, mismatch_max = 0;
  double mismatch_over = 0;  // of them, those more than 1e-5 apart
};

class GrpoLoss final : public model::SequenceLoss {
 public:
  explicit GrpoLoss(GrpoConfig cfg);
  // The global batch the next steps run on: sample first + i is samples[i]
  // (samples outlive the step). Every learner rank is given the whole batch.
  void set_batch(int64_t first, const std::vector<PolicySample>* samples);
  double apply(const model::StepCtx& ctx, const float* losses, const int32_t* targets, float* weights) override;
  int64_t units(int64_t sequences) const override { return sequences; }
  bool batch_invariant() const override { return cfg_.learner_batch_invariant; }
  GrpoSums take();
  const GrpoConfig& config() const { return cfg_; }

 private:
  GrpoConfig cfg_;
  LossAgg agg_;
  int64_t first_ = 0;
  const std::vector<PolicySample>* samples_ = nullptr;
  double token_scale_ = 1;  // token-mean: completions / tokens of the batch
  GrpoSums sums_;
};

// Forward only: hands each row's per-token log-probabilities of its learned
// targets to `sink` (sample index, position t, lp) for the proximal and
// reference passes (on the last pipeline stage, every TP rank alike); no loss.
class TokenLogps final : public model::SequenceLoss {
 public:
  using Sink = std::function<void(int64_t sample, int64_t t, float lp)>;
  TokenLogps(Sink sink, bool batch_invariant) : sink_(std::move(sink)), batch_invariant_(batch_invariant) {}
  double apply(const model::StepCtx& ctx, const float* losses, const int32_t* targets, float* weights) override;
  int64_t units(int64_t sequences) const override { return sequences; }
  bool batch_invariant() const override { return batch_invariant_; }

 private:
  Sink sink_;
  bool batch_invariant_;
};

}  // namespace claw::rl
