// One optimizer step over a global batch of micro-batches: the unit the
// trainer loops over and the parity tests drive directly.
//
//   zero grads
//   for mb in micro-batches: loss += forward(mb); backward(mb)     (grads accumulate)
//   norm = sqrt(sum of squared grads); coef = min(1, clip / (norm + 1e-6))
//   AdamW(lr, grads * coef)
// dloss_scale = 1 / (positions with a target in the global batch), so the
// loss and gradients are those of the mean over the whole batch however it
// is cut into micro-batches (Megatron's sum(loss * mask) / sum(mask)).
//
// The micro-batch loop is the pipeline executor's (runtime/model_chunks.h):
// without pipeline parallelism a one-stage schedule, forward k then backward
// k, so there is one step function whatever the layout.
#pragma once

#include <cstdint>
#include <functional>

#include "claw/model/gpt.h"
#include "claw/core/fault_injector.h"
#include "claw/optim/adamw.h"
#include "claw/optim/loss_scaler.h"
#include "claw/data/sample_source.h"
#include "claw/runtime/model_chunks.h"
#include "claw/train/batch.h"
#include "claw/train/sdc.h"

namespace claw::train {

struct StepResult {
  double loss = 0;       // mean token loss over the global batch
  double grad_norm = 0;  // before clipping (unscaled: the loss scale divided out)
  double loss_scale = 1;  // the scale this step's gradients carried
  bool skipped = false;   // loss scaling: the gradients overflowed, the parameters did not move
};

// `model`: this rank's pipeline stage (the whole model without pipeline
// parallelism) with its data-parallel engines, if any; the batch is this
// rank's slice and has the schedule's micro-batch count. The target count,
// the loss and the gradient norm are summed over the data-parallel group;
// the loss (computed on the last stage) over the stages, so every rank
// returns the same result; the gradient norm over the groups the parameters
// are split across (ModelChunks::reduce_grad_sum_squares). Under tensor
// parallelism the loss is already whole on every TP rank. Tied word
// embeddings held by two stages get their gradients summed so both copies
// take the same update. `optimizer` holds the segments of every chunk.
// `step` is 0-based; sample0 is the global index of the step's first sample
// (dropout counters). Throws claw::Error naming the step and the first
// non-finite tensor if a micro-batch's loss or the gradient norm is not
// finite. `before_update`, if set, sees the accumulated gradients before
// AdamW runs. `sdc`, if set, re-runs a suspect step (train/sdc.h): a
// transient fault is named and the step goes on with the re-run's result; a
// non-finite result that reproduces throws ReproducedNonFinite on every rank.
StepResult train_step(runtime::ModelChunks& model, optim::AdamW& optimizer, const CpuCtx& cpu,
                      const GlobalBatch& batch, int64_t step, double lr, uint64_t seed, uint64_t sample0,
                      const std::function<void(const StepResult&)>& before_update = {},
                      model::SequenceLoss* sequence_loss = nullptr, optim::LossScaler* scaler = nullptr,
                      const FaultInjector* faults = nullptr, SdcMonitor* sdc = nullptr);

// train_step's first half: the mean loss over the global batch, with its
// gradients accumulated (and reduced over data parallelism) in the
// trainable parameters' gradient buffers; nothing is updated.
double loss_gradients(runtime::ModelChunks& model, const CpuCtx& cpu, const GlobalBatch& batch, int64_t step,
                      uint64_t seed, uint64_t sample0, model::SequenceLoss* sequence_loss = nullptr,
                      double loss_scale = 1.0);

// Mean loss over a batch without gradients (evaluation), summed as train_step sums.
// sample0: the global index of the batch's first sample (as train_step's).
double eval_loss(runtime::ModelChunks& model, const CpuCtx& cpu, const GlobalBatch& batch, uint64_t seed,
                 uint64_t sample0 = 0, model::SequenceLoss* sequence_loss = nullptr);

// Mean of eval_loss over `iters` global batches of `source` from sample
// `first` (each `global_batch_size` samples, loaded into `batch`).
double mean_eval_loss(runtime::ModelChunks& model, const CpuCtx& cpu, GlobalBatch& batch,
                      const data::SampleSource& source, int64_t first, int64_t iters, int64_t global_batch_size,
                      uint64_t seed, model::SequenceLoss* sequence_loss = nullptr);

// Logits [B*T, Vp] of the batch's first micro-batch (TP = PP = 1).
void eval_logits(model::GPT& model, const CpuCtx& cpu, const GlobalBatch& batch, uint64_t seed, float* out);

}  // namespace claw::train
