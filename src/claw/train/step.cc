#include "claw/train/step.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "claw/core/error.h"

namespace claw::train {

namespace {
model::StepCtx micro_ctx(const CpuCtx& cpu, const GlobalBatch& batch, int64_t k, bool training, uint64_t seed,
                         uint64_t sample0, model::SequenceLoss* sequence_loss = nullptr) {
  const MicroBatch mb = batch.micro(k);
  return {.cpu = cpu, .B = batch.B(), .T = batch.T(), .training = training, .seed = seed,
          .sample0 = sample0 + static_cast<uint64_t>(batch.sample_offset(k)), .cp_size = batch.cp_size(),
          .cp_rank = batch.cp_rank(), .positions = mb.positions,
          .seg_start = mb.seg_start, .batch_invariant = sequence_loss && sequence_loss->batch_invariant(),
          .moe_aux_scale = 1.0 / static_cast<double>(batch.micro_batches() * batch.dp_size()),
          .sequence_loss = sequence_loss};
}

std::function<parallel::PipelineMicroBatch(int)> micro_batches(const CpuCtx& cpu, const GlobalBatch& batch,
                                                               bool training, uint64_t seed, uint64_t sample0,
                                                               model::SequenceLoss* sequence_loss) {
  return [&cpu, &batch, training, seed, sample0, sequence_loss](int k) {
    const MicroBatch mb = batch.micro(k);
    return parallel::PipelineMicroBatch{.ctx = micro_ctx(cpu, batch, k, training, seed, sample0, sequence_loss),
                                        .tokens = mb.tokens,
                                        .targets = mb.targets};
  };
}

// A non-finite value as "nan", "inf" or "-inf" (a NaN's sign bit, which
// fmt would print, depends on the operation that made it).
std::string non_finite(double v) { return std::isnan(v) ? "nan" : fmt::format("{}", v); }

// What a batch's loss is the mean over: its targets, or the sequence loss's units.
double loss_count(const GlobalBatch& batch, const model::SequenceLoss* sequence_loss) {
  return static_cast<double>(sequence_loss ? sequence_loss->units(batch.micro_batches() * batch.B())
                                           : batch.valid_targets());
}
}  // namespace

double loss_gradients(runtime::ModelChunks& model, const CpuCtx& cpu, const GlobalBatch& batch, int64_t step,
                      uint64_t seed, uint64_t sample0, model::SequenceLoss* sequence_loss, double loss_scale) {
  const int64_t counted = static_cast<int64_t>(model.dp_sum(loss_count(batch, sequence_loss)));
  if (counted == 0) fail("step {}: every target of the global batch is masked; nothing to learn from", step + 1);
  model.begin_step();
  const double loss_sum = model.executor().run(
      micro_batches(cpu, batch, true, seed, sample0, sequence_loss), loss_scale / static_cast<double>(counted),
      [&](int k, double mb_loss) {
        if (std::isfinite(mb_loss)) return;
        std::string where = model.last().first_non_finite(cpu);
        fail<NonFiniteError>("step {}: loss is {} (micro-batch {}); first non-finite tensor: {}", step + 1,
                             non_finite(mb_loss), k,
             where.empty() ? "none (overflow in the loss sum)" : where);
      });
  model.finish_grad_sync();
  model.fp8_step_end();
  return model.dp_sum(model.pp_sum(loss_sum)) / static_cast<double>(counted);
}

StepResult train_step(runtime::ModelChunks& model, optim::AdamW& optimizer, const CpuCtx& cpu,
                      const GlobalBatch& batch, int64_t step, double lr, uint64_t seed, uint64_t sample0,
                      const std::function<void(const StepResult&)>& before_update,
                      model::SequenceLoss* sequence_loss, optim::LossScaler* scaler, const FaultInjector* faults) {
  CLAW_CHECK(batch.micro_batches() == model.micro_batches(), "a batch of {} micro-batches for a schedule of {}",
             batch.micro_batches(), model.micro_batches());
  const double scale = scaler ? scaler->scale() : 1.0;
  const double loss = loss_gradients(model, cpu, batch, step, seed, sample0, sequence_loss, scale);
  if (faults && faults->inf_grad(step + 1))  // the injected overflow: one gradient element becomes inf
    for (model::Param* p : model.first().params())
      if (p->grad.defined()) {
        p->gdata()[0] = std::numeric_limits<float>::infinity();
        break;
      }
  // Experts reduced over their own group add their squares over it (ModelChunks).
  const double sum_squares = model.reduce_grad_sum_squares(optimizer.grad_sum_squares(cpu, "dp"),
                                                           optimizer.grad_sum_squares(cpu, "expert_dp"));
  StepResult r{loss, std::sqrt(sum_squares) / scale, scale};
  // Loss scaling: an overflow (the global norm holds it, so every rank
  // agrees) skips the update and moves the scale; the next step's
  // begin_step zeroes the gradients.
  if (scaler && !scaler->update(!std::isfinite(r.grad_norm)) && std::isfinite(r.loss)) {
    r.skipped = true;
    return r;
  }
  if (!std::isfinite(r.loss) || !std::isfinite(r.grad_norm))
    fail<NonFiniteError>("step {}: gradient norm is {} (loss {:.4f}); first non-finite tensor: {}{}", step + 1,
                         non_finite(r.grad_norm), r.loss,
         model.first_non_finite_grad(cpu),
         model.pp().size() > 1 ? fmt::format(" (on pipeline stage {})", model.pp().rank()) : "");
  if (before_update) before_update(r);
  optimizer.step(cpu, lr, optimizer.clip_coefficient(r.grad_norm) / scale);
  model.after_optimizer_step(cpu);
  return r;
}

double eval_loss(runtime::ModelChunks& model, const CpuCtx& cpu, const GlobalBatch& batch, uint64_t seed,
                 uint64_t sample0, model::SequenceLoss* sequence_loss) {
  double total = model.executor().run_forward(micro_batches(cpu, batch, false, seed, sample0, sequence_loss),
                                              static_cast<int>(batch.micro_batches()));
  total = model.pp_sum(total);
  double count = loss_count(batch, sequence_loss);
  if (model.dp()) {
    total = model.dp_sum(total);
    count = model.dp_sum(count);
  }
  return total / std::max(1.0, count);
}

double mean_eval_loss(runtime::ModelChunks& model, const CpuCtx& cpu, GlobalBatch& batch,
                      const data::SampleSource& source, int64_t first, int64_t iters, int64_t global_batch_size,
                      uint64_t seed, model::SequenceLoss* sequence_loss) {
  double total = 0;
  for (int64_t i = 0; i < iters; ++i) {
    batch.load(source, first + i * global_batch_size);
    total += eval_loss(model, cpu, batch, seed, static_cast<uint64_t>(first + i * global_batch_size), sequence_loss);
  }
  return total / static_cast<double>(std::max<int64_t>(1, iters));
}

void eval_logits(model::GPT& model, const CpuCtx& cpu, const GlobalBatch& batch, uint64_t seed, float* out) {
  const MicroBatch mb = batch.micro(0);
  const model::StepCtx ctx = micro_ctx(cpu, batch, 0, false, seed, 0);
  model.forward(ctx, mb.tokens, mb.targets, 0.0);
  model.logits(ctx, out);
}

}  // namespace claw::train
