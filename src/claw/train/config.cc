#include "claw/train/config.h"

#include <cmath>

#include "claw/core/error.h"

namespace claw::train {

void TrainConfig::resolve_and_validate(int dp) {
  if (micro_batch_size <= 0) fail("--micro-batch-size must be positive, got {}", micro_batch_size);
  if (global_batch_size == 0) global_batch_size = micro_batch_size * dp;
  if (global_batch_size < 0 || global_batch_size % micro_batch_size != 0)
    fail("--global-batch-size {} must be a positive multiple of --micro-batch-size {}", global_batch_size,
         micro_batch_size);
  if (global_batch_size % (micro_batch_size * dp) != 0)
    fail("--global-batch-size {} must be a multiple of --micro-batch-size {} x data-parallel size {} = {} (each "
         "data-parallel rank runs whole micro-batches)",
         global_batch_size, micro_batch_size, dp, micro_batch_size * dp);
  if (seq_length <= 0) fail("--seq-length must be positive, got {}", seq_length);
  if (train_iters < 0) fail("--train-iters must be >= 0, got {}", train_iters);
  if (eval_interval < 0) fail("--eval-interval must be >= 0 (0 disables evaluation), got {}", eval_interval);
  if (eval_iters < 0) fail("--eval-iters must be >= 0, got {}", eval_iters);
  if (log_interval <= 0) fail("--log-interval must be positive, got {}", log_interval);
  if (straggler_report_interval < 0)
    fail("--straggler-report-interval must be >= 0 (0: off), got {}", straggler_report_interval);
  watchdog.validate();
  sdc.validate();
  if (!(straggler_threshold > 0 && straggler_threshold <= 1))
    fail("--straggler-threshold must be in (0, 1] (a speed relative to the median rank), got {}", straggler_threshold);
  if (num_threads < 0) fail("--num-threads must be >= 0 (0: all available), got {}", num_threads);
  if (peak_gflops < 0) fail("--peak-gflops must be >= 0 (0: measure), got {}", peak_gflops);
  if (recompute_granularity == "selective")
    fail("--recompute-granularity selective recomputes the attention score matrix, which claw's flash-style "
         "attention never stores; use --recompute-granularity full (with --recompute-num-layers)");
  if (!recompute_granularity.empty() && recompute_granularity != "full")
    fail("--recompute-granularity '{}' is not valid; use full (or leave it unset for no recompute)",
         recompute_granularity);
  if (recompute_method != "block")
    fail("--recompute-method '{}' is not supported; use block (recompute the first --recompute-num-layers blocks)",
         recompute_method);
  if (recompute_num_layers < 0) fail("--recompute-num-layers must be >= 0, got {}", recompute_num_layers);
  if (recompute_num_layers > 0 && recompute_granularity.empty())
    fail("--recompute-num-layers {} needs --recompute-granularity full", recompute_num_layers);
  if (dpo.enabled) {
    dpo.type();
    if (!(dpo.beta > 0) || !std::isfinite(dpo.beta)) fail("--dpo-beta must be positive, got {}", dpo.beta);
    if (micro_batch_size % 2 != 0)
      fail("--dpo: --micro-batch-size {} must be even (a micro-batch holds whole pairs: chosen, rejected)",
           micro_batch_size);
    if (device != "cpu") fail("--dpo runs on the CPU backend for now (--device cpu, not {})", device);
  }
  if (fp16) loss_scaling.validate();
}

DpoLossType DpoConfig::type() const {
  if (loss_type == "sigmoid") return DpoLossType::sigmoid;
  if (loss_type == "ipo") return DpoLossType::ipo;
  if (loss_type == "hinge") return DpoLossType::hinge;
  fail("--dpo-loss-type '{}' is not one of sigmoid (DPO), ipo, hinge", loss_type);
}

void CheckpointConfig::validate() const {
  if (save_interval < 0) fail("--save-interval must be >= 0 (0: save only at the end), got {}", save_interval);
  if (save_interval > 0 && save.empty()) fail("--save-interval needs --save DIR");
  if (async_save && save.empty()) fail("--async-save needs --save DIR");
  if (exit_interval < 0) fail("--exit-interval must be >= 0, got {}", exit_interval);
  if (ckpt_step >= 0 && load.empty()) fail("--ckpt-step needs --load DIR");
  if (finetune && load.empty()) fail("--finetune needs --load DIR (or --load-hf DIR): the weights to start from");
}

int64_t TrainConfig::recomputed_layers(int64_t num_layers) const {
  if (recompute_granularity.empty()) return 0;
  return recompute_num_layers == 0 ? num_layers : recompute_num_layers;
}

runtime::RuntimeConfig runtime_config(const model::ModelConfig& model, const TrainConfig& t, const ParallelConfig& p,
                                      bool training) {
  return {.model = model, .parallel = p, .micro_batch_size = t.micro_batch_size,
          .global_batch_size = t.global_batch_size, .seq_length = t.seq_length,
          .recompute_layers = t.recomputed_layers(model.num_layers), .seed = t.seed, .num_threads = t.num_threads,
          .device = t.device, .allow_tf32 = t.allow_tf32, .training = training, .freeze = t.freeze};
}

}  // namespace claw::train
