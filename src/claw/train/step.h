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
#pragma once

#include <cstdint>
#include <functional>

#include "claw/model/gpt.h"
#include "claw/optim/adamw.h"
#include "claw/parallel/data_parallel.h"
#include "claw/parallel/pipeline_executor.h"
#include "claw/train/batch.h"

namespace claw::train {

struct StepResult {
  double loss = 0;       // mean token loss over the global batch
  double grad_norm = 0;  // before clipping
};

// With a DataParallel engine (`dp`), the batch is this rank's slice; the
// target count, the loss and the gradient norm are summed over the group and
// gradients are reduced as DataParallel says. Under tensor parallelism
// (model.tp()) the loss is already whole on every TP rank and the gradient
// norm adds the TP shards (replicated copies counted once). `step` is 0-based; sample0 is the global index of the step's first sample
// (dropout counters). Throws claw::Error naming the step and the first
// non-finite tensor if the loss or the gradient norm is not finite.
// `before_update`, if set, sees the accumulated gradients before AdamW runs.
StepResult train_step(model::GPT& model, optim::AdamW& optimizer, const CpuCtx& cpu, const GlobalBatch& batch,
                      int64_t step, double lr, uint64_t seed, uint64_t sample0,
                      const std::function<void(const StepResult&)>& before_update = {},
                      parallel::DataParallel* dp = nullptr);

// Pipeline parallelism: this rank is one stage, holding `chunks` (its model
// chunks, in order) run by `exec`'s schedule over the batch's micro-batches.
// Tied word embeddings (a copy on the first and on the last stage) get their
// gradients summed over `embedding` (the first and last stage) so both copies
// take the same update; the loss (computed on the last stage) and the
// gradient norm are summed over `pp`, so every stage returns the same result.
// `optimizer` holds the segments of every chunk. With data parallelism,
// `dps` has each chunk's engine (ZeRO 0 or 1, no overlap: gradients are
// reduced after the pipeline's last backward) and the batch is this rank's
// slice. `before_update`, if set, runs just before AdamW.
StepResult train_step_pipeline(parallel::PipelineExecutor& exec, const std::vector<model::GPT*>& chunks,
                               optim::AdamW& optimizer, const CpuCtx& cpu, const GlobalBatch& batch, int64_t step,
                               double lr, uint64_t seed, uint64_t sample0, comm::Group& pp, comm::Group& embedding,
                               const std::vector<parallel::DataParallel*>& dps = {},
                               const std::function<void(const StepResult&)>& before_update = {});
// Mean loss over a batch through the pipeline, without gradients.
double eval_loss_pipeline(parallel::PipelineExecutor& exec, const CpuCtx& cpu, const GlobalBatch& batch,
                          uint64_t seed, comm::Group& pp, parallel::DataParallel* dp = nullptr);

// Mean loss over a batch without gradients (evaluation).
double eval_loss(model::GPT& model, const CpuCtx& cpu, const GlobalBatch& batch, uint64_t seed,
                 parallel::DataParallel* dp = nullptr);

// Logits [B*T, Vp] of the batch's first micro-batch (TP = 1).
void eval_logits(model::GPT& model, const CpuCtx& cpu, const GlobalBatch& batch, uint64_t seed, float* out);

}  // namespace claw::train
