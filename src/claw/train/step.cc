#include "claw/train/step.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include <fmt/format.h>

#include "claw/core/error.h"
#include "claw/core/log.h"

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
                      model::SequenceLoss* sequence_loss, optim::LossScaler* scaler, const FaultInjector* faults,
                      SdcMonitor* sdc) {
  CLAW_CHECK(batch.micro_batches() == model.micro_batches(), "a batch of {} micro-batches for a schedule of {}",
             batch.micro_batches(), model.micro_batches());
  const double scale = scaler ? scaler->scale() : 1.0;
  // The injected faults (tests): an overflow every time the step runs, a
  // flipped bit in one rank's reduced gradients the first time only.
  const auto inject = [&](bool first_run) {
    if (!faults) return;
    if (faults->inf_grad(step + 1))  // one gradient element becomes inf
      for (model::Param* p : model.first().params())
        if (p->grad.defined()) {
          p->gdata()[0] = std::numeric_limits<float>::infinity();
          break;
        }
    const int world_rank = model.pp().world_ranks()[model.pp().rank()];
    if (const double factor = faults->grad_scale(world_rank, step + 1); factor != 1) {
      for (const model::Segment& seg : optimizer.segments()) {
        float* g = const_cast<float*>(seg.grad);
        for (int64_t i = 0; g && i < seg.n; ++i) g[i] = static_cast<float>(g[i] * factor);
      }
      log::warn("fault", "step {}: --test-fault scale-grad: this rank's gradients scaled by {}", step + 1, factor);
    }
    if (first_run && sdc && faults->bit_flip(sdc->world().rank(), step + 1))
      for (const model::Segment& seg : optimizer.segments())
        if (seg.n > 0 && seg.param->spec.primary) {
          float* g = const_cast<float*>(seg.grad);
          uint32_t bits;
          std::memcpy(&bits, g, 4);
          bits ^= 1u << 30;  // the exponent's top bit
          std::memcpy(g, &bits, 4);
          log::warn("fault", "step {}: --test-fault bit-flip: flipped bit 30 of {}'s first gradient element on this "
                    "rank", step + 1, seg.param->spec.name);
          break;
        }
  };
  // This rank's own sums of squares (its fingerprint of the gradients it
  // holds), then the global norm over the groups the gradients are split on.
  const auto run = [&](bool first_run, uint64_t& fingerprint) {
    const double loss = loss_gradients(model, cpu, batch, step, seed, sample0, sequence_loss, scale);
    inject(first_run);
    const double local = optimizer.grad_sum_squares(cpu, "dp"), expert = optimizer.grad_sum_squares(cpu, "expert_dp");
    fingerprint = bits_of(local) * 0x9e3779b97f4a7c15ULL ^ bits_of(expert);
    // Experts reduced over their own group add their squares over it (ModelChunks).
    return StepResult{loss, std::sqrt(model.reduce_grad_sum_squares(local, expert)) / scale, scale};
  };
  uint64_t fingerprint = 0;
  StepResult r = run(true, fingerprint);
  // Loss scaling: an overflow (the global norm holds it, so every rank
  // agrees) skips the update and moves the scale; the next step's
  // begin_step zeroes the gradients.
  if (scaler && !scaler->update(!std::isfinite(r.grad_norm)) && std::isfinite(r.loss)) {
    r.skipped = true;
    return r;
  }
  if (sdc && sdc->suspect(r.loss, r.grad_norm)) {
    const bool rank0 = sdc->world().rank() == 0;
    if (rank0)
      log::warn("sdc", "step {}: loss {:.6g}, gradient norm {:.6g} {}: running the step again to see whether it "
                "reproduces", step + 1, r.loss, r.grad_norm,
                std::isfinite(r.loss) && std::isfinite(r.grad_norm)
                    ? fmt::format("(over {:g} x the recent maximum on some rank)", sdc->config().spiky_factor)
                    : std::string("(not finite on some rank)"));
    uint64_t again = 0;
    const StepResult r2 = run(false, again);
    const std::vector<int> differ = sdc->unreproduced(fingerprint, again);
    if (!differ.empty()) {
      const std::string who = describe_ranks(sdc->world(), differ).description;
      if (rank0)
        log::error("sdc", "step {}: silent data corruption: the re-run's gradients differ from the first run's on {} "
                   "(every other rank reproduced its own bit for bit): a transient fault on that rank; the step goes "
                   "on with the re-run's gradients", step + 1, who);
      r = r2;
    } else {
      const bool non_finite_anywhere =
          sdc->world().all_reduce_value<int32_t>(!std::isfinite(r2.loss) || !std::isfinite(r2.grad_norm),
                                                 comm::ReduceOp::max) != 0;
      if (non_finite_anywhere)
        fail<ReproducedNonFinite>("step {}: gradient norm {} (loss {:.4f}), reproduced bit for bit by a re-run on "
                                  "every rank (not a hardware fault); first non-finite tensor: {}", step + 1,
                                  non_finite(r2.grad_norm), r2.loss, model.first_non_finite_grad(cpu));
      if (rank0)
        log::warn("sdc", "step {}: the spike reproduces bit for bit on every rank: it comes from the data or the "
                  "model, not the hardware; training goes on", step + 1);
    }
  }
  if (!std::isfinite(r.loss) || !std::isfinite(r.grad_norm))
    fail<NonFiniteError>("step {}: gradient norm is {} (loss {:.4f}); first non-finite tensor: {}{}", step + 1,
                         non_finite(r.grad_norm), r.loss,
         model.first_non_finite_grad(cpu),
         model.pp().size() > 1 ? fmt::format(" (on pipeline stage {})", model.pp().rank()) : "");
  if (sdc) sdc->observe(r.loss, r.grad_norm);
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
