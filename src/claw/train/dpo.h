// Direct Preference Optimization (Rafailov et al. 2023) on `claw preprocess
// --dpo` pairs (data/dpo_dataset.h): the policy is trained so that, against
// a frozen reference (the model DPO starts from), it raises the chosen
// reply's log-probability more than the rejected one's.
//
// Per pair, with l = sum of the reply's token log-probabilities under the
// policy and r under the reference,
//   h = (l_chosen - r_chosen) - (l_rejected - r_rejected)
//   sigmoid (DPO):  loss = -log sigmoid(beta h)
//   ipo:            loss = (h - 1 / (2 beta))^2, with l and r each the mean
//                   over the reply's tokens (Azar et al. 2023; as TRL does)
//   hinge:          loss = max(0, 1 - beta h)           (SLiC)
// and the step's loss is the mean over the global batch's pairs. It is a
// model::SequenceLoss: the output layer hands it every token's loss
// (-log p), and it returns per-token weights d loss / d token loss
// (-dloss/dh on the chosen side, +dloss/dh on the rejected, over the
// reply's length for ipo), so every parallel layout runs it unchanged.
//
// Metrics, as TRL names them: rewards/chosen = beta (l - r) of the chosen
// reply (mean over pairs), rewards/rejected, rewards/margins (their
// difference) and rewards/accuracies (the fraction with chosen > rejected).
//
// Reference log-probabilities are computed once, by a forward pass of the
// starting model over every pair of the splits used, and cached next to the
// dataset as <prefix>_dpo_ref_<key>.npy (float64, one per stored sequence;
// key: a hash of the reference checkpoint, the sequence length and the
// dataset). A resumed run reads the cache its first run wrote (the
// checkpoint records its name): the reference stays the starting model.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "claw/data/dpo_dataset.h"
#include "claw/model/step.h"
#include "claw/runtime/runtime.h"
#include "claw/train/batch.h"
#include "claw/train/config.h"

namespace claw::train {

// Sums over this rank's pairs since the last take().
struct DpoSums {
  double pairs = 0, loss = 0, chosen_reward = 0, rejected_reward = 0, correct = 0;
};

// Samples 2j and 2j + 1 of the run's sample sequence (StepCtx::sample0 +
// row) are pair j's chosen and rejected sides.
class DpoLoss final : public model::SequenceLoss {
 public:
  // reference(sample): the reference log-probability of that sample's
  // sequence, summed over its learned tokens.
  using Reference = std::function<double(int64_t sample)>;
  DpoLoss(const DpoConfig& cfg, Reference reference);
  double apply(const model::StepCtx& ctx, const float* losses, const int32_t* targets, float* weights) override;
  int64_t units(int64_t sequences) const override { return sequences / 2; }
  DpoSums take();

 private:
  DpoLossType type_;
  double beta_;
  Reference reference_;
  DpoSums sums_;
};

// Forward only: hands each sample's summed log-probability (over its
// learned tokens) to `sink`; no loss. The reference pass.
class SequenceLogps final : public model::SequenceLoss {
 public:
  explicit SequenceLogps(std::function<void(int64_t sample, double logp)> sink) : sink_(std::move(sink)) {}
  double apply(const model::StepCtx& ctx, const float* losses, const int32_t* targets, float* weights) override;
  int64_t units(int64_t sequences) const override { return sequences / 2; }

 private:
  std::function<void(int64_t, double)> sink_;
};

// The reference log-probabilities of every stored sequence of `sources`'
// dataset (one dataset, its splits), from the cache `cache_path` when it
// exists, else computed with `runtime`'s current model (forward only, at its
// layout) and written there by world rank 0. Every rank returns them all.
std::shared_ptr<const std::vector<double>> dpo_reference_logps(runtime::Runtime& runtime, GlobalBatch& batch,
                                                               const std::vector<const data::DpoDataset*>& sources,
                                                               const std::string& cache_path, uint64_t seed);

// The cache file for a reference: <prefix>_dpo_ref_<hash of key>.npy.
std::string dpo_reference_cache(const std::string& prefix, const std::string& key);

}  // namespace claw::train
