#include "claw/train/step.h"

#include <algorithm>
#include <cmath>

#include "claw/core/error.h"

namespace claw::train {

namespace {
model::StepCtx micro_ctx(const CpuCtx& cpu, const GlobalBatch& batch, int64_t k, bool training, uint64_t seed,
                         uint64_t sample0) {
  const MicroBatch mb = batch.micro(k);
  return {.cpu = cpu, .B = batch.B(), .T = batch.T(), .training = training, .seed = seed,
          .sample0 = sample0 + static_cast<uint64_t>(batch.sample_offset(k)), .positions = mb.positions,
          .seg_start = mb.seg_start};
}
}  // namespace

StepResult train_step(model::GPT& model, optim::AdamW& optimizer, const CpuCtx& cpu, const GlobalBatch& batch,
                      int64_t step, double lr, uint64_t seed, uint64_t sample0,
                      const std::function<void(const StepResult&)>& before_update, parallel::DataParallel* dp) {
  const auto global_sum = [&](double v) { return dp ? dp->all_reduce_sum(v) : v; };
  const int64_t counted = static_cast<int64_t>(global_sum(static_cast<double>(batch.valid_targets())));
  if (counted == 0) fail("step {}: every target of the global batch is masked; nothing to learn from", step + 1);
  if (dp)
    dp->begin_step();
  else
    model.store().zero_grads();
  double loss_sum = 0;
  for (int64_t k = 0; k < batch.micro_batches(); ++k) {
    if (dp) dp->begin_micro_batch(k + 1 == batch.micro_batches());
    const model::StepCtx ctx = micro_ctx(cpu, batch, k, true, seed, sample0);
    const MicroBatch mb = batch.micro(k);
    double mb_loss = model.forward(ctx, mb.tokens, mb.targets, 1.0 / static_cast<double>(counted));
    if (!std::isfinite(mb_loss)) {
      std::string where = model.first_non_finite(cpu);
      fail<NonFiniteError>("step {}: loss is {} (micro-batch {}); first non-finite tensor: {}", step + 1, mb_loss, k,
           where.empty() ? "none (overflow in the loss sum)" : where);
    }
    model.backward(ctx, mb.tokens);
    loss_sum += mb_loss;
  }
  if (dp) dp->finish_grad_sync();
  // Each rank's squared norm covers its own shard under ZeRO (one
  // all-reduce); without sharding the reduced gradients are whole everywhere.
  double sum_squares = optimizer.grad_sum_squares(cpu);
  if (dp && dp->sharded_optimizer()) sum_squares = dp->all_reduce_sum(sum_squares);
  // Tensor-parallel shards hold disjoint parts; replicated copies count on one rank.
  if (comm::Group& tp = *model.tp().group; tp.size() > 1) sum_squares = tp.all_reduce_value(sum_squares);
  StepResult r{global_sum(loss_sum) / static_cast<double>(counted), std::sqrt(sum_squares)};
  if (!std::isfinite(r.grad_norm))
    fail<NonFiniteError>("step {}: gradient norm is {} (loss {:.4f}); first non-finite tensor: {}", step + 1, r.grad_norm, r.loss,
         model.first_non_finite_grad(cpu));
  if (before_update) before_update(r);
  optimizer.step(cpu, lr, optimizer.clip_coefficient(r.grad_norm));
  if (dp) dp->after_optimizer_step();
  return r;
}

StepResult train_step_pipeline(parallel::PipelineExecutor& exec, const std::vector<model::GPT*>& chunks,
                               optim::AdamW& optimizer, const CpuCtx& cpu, const GlobalBatch& batch, int64_t step,
                               double lr, uint64_t seed, uint64_t sample0, comm::Group& pp, comm::Group& embedding,
                               const std::vector<parallel::DataParallel*>& dps,
                               const std::function<void(const StepResult&)>& before_update) {
  parallel::DataParallel* dp = dps.empty() ? nullptr : dps.front();
  const auto global_sum = [&](double v) { return dp ? dp->all_reduce_sum(v) : v; };
  const int64_t counted = static_cast<int64_t>(global_sum(static_cast<double>(batch.valid_targets())));
  if (counted == 0) fail("step {}: every target of the global batch is masked; nothing to learn from", step + 1);
  if (dps.empty())
    for (model::GPT* m : chunks) m->store().zero_grads();
  for (parallel::DataParallel* d : dps) d->begin_step();
  const double loss_sum = exec.run(
      [&](int k) {
        const MicroBatch mb = batch.micro(k);
        return parallel::PipelineMicroBatch{.ctx = micro_ctx(cpu, batch, k, true, seed, sample0),
                                            .tokens = mb.tokens,
                                            .targets = mb.targets};
      },
      1.0 / static_cast<double>(counted));
  // Tied embeddings: the first stage's word embeddings and the last stage's
  // copy each got part of the gradient (lookup, output layer).
  if (embedding.size() > 1)
    for (model::GPT* m : chunks)
      if (model::Param* w = m->store().find("embedding.word_embeddings.weight"); w && m->config().tied())
        embedding.all_reduce(w->gdata(), w->spec.local_shape().numel(), DType::f32);
  for (parallel::DataParallel* d : dps) d->finish_grad_sync();
  double sum_squares = optimizer.grad_sum_squares(cpu);
  if (dp && dp->sharded_optimizer()) sum_squares = dp->all_reduce_sum(sum_squares);
  sum_squares = pp.all_reduce_value(sum_squares);
  if (comm::Group& tp = *chunks.front()->tp().group; tp.size() > 1) sum_squares = tp.all_reduce_value(sum_squares);
  StepResult r{global_sum(pp.all_reduce_value(loss_sum)) / static_cast<double>(counted), std::sqrt(sum_squares)};
  if (!std::isfinite(r.loss) || !std::isfinite(r.grad_norm))
    fail<NonFiniteError>("step {}: loss {} and gradient norm {} (pipeline stage {}); first non-finite gradient here: {}", step + 1,
         r.loss, r.grad_norm, pp.rank(), chunks.front()->first_non_finite_grad(cpu));
  if (before_update) before_update(r);
  optimizer.step(cpu, lr, optimizer.clip_coefficient(r.grad_norm));
  for (parallel::DataParallel* d : dps) d->after_optimizer_step();
  return r;
}

double eval_loss_pipeline(parallel::PipelineExecutor& exec, const CpuCtx& cpu, const GlobalBatch& batch,
                          uint64_t seed, comm::Group& pp, parallel::DataParallel* dp) {
  double total = exec.run_forward(
      [&](int k) {
        const MicroBatch mb = batch.micro(k);
        return parallel::PipelineMicroBatch{.ctx = micro_ctx(cpu, batch, k, false, seed, 0),
                                            .tokens = mb.tokens,
                                            .targets = mb.targets};
      },
      static_cast<int>(batch.micro_batches()));
  total = pp.all_reduce_value(total);
  double count = static_cast<double>(batch.valid_targets());
  if (dp) {
    total = dp->all_reduce_sum(total);
    count = dp->all_reduce_sum(count);
  }
  return total / std::max(1.0, count);
}

double eval_loss(model::GPT& model, const CpuCtx& cpu, const GlobalBatch& batch, uint64_t seed,
                 parallel::DataParallel* dp) {
  double total = 0;
  for (int64_t k = 0; k < batch.micro_batches(); ++k) {
    const MicroBatch mb = batch.micro(k);
    total += model.forward(micro_ctx(cpu, batch, k, false, seed, 0), mb.tokens, mb.targets, 0.0);
  }
  double count = static_cast<double>(batch.valid_targets());
  if (dp) {
    total = dp->all_reduce_sum(total);
    count = dp->all_reduce_sum(count);
  }
  return total / std::max(1.0, count);
}

void eval_logits(model::GPT& model, const CpuCtx& cpu, const GlobalBatch& batch, uint64_t seed, float* out) {
  const MicroBatch mb = batch.micro(0);
  const model::StepCtx ctx = micro_ctx(cpu, batch, 0, false, seed, 0);
  model.forward(ctx, mb.tokens, mb.targets, 0.0);
  model.logits(ctx, out);
}

}  // namespace claw::train
