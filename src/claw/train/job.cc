#include "claw/train/job.h"

#include "claw/core/arena.h"
#include "claw/core/error.h"
#include "claw/core/log.h"

namespace claw::train {

void validate_job(const JobConfig& c) {
  if (const int64_t h = c.parallel.dp.diloco_inner_steps; h > 0) {
    if (c.train.fp16)
      fail("--diloco-inner-steps with --fp16: dynamic loss scaling skips steps on one instance and not another, and "
           "the outer steps would fall out of step; use --bf16");
    if (c.adam.main_params_dtype != DType::f32)
      fail("--diloco-inner-steps keeps its anchor and outer momentum in fp32; use --main-params-dtype fp32");
    if (c.model.moe.enabled())
      fail("--diloco-inner-steps with --num-experts: the experts' gradients reduce over their own group across the "
           "instances every step; not available yet");
    if (c.ckpt.save_interval % h != 0)
      fail("--save-interval {} must be a multiple of --diloco-inner-steps {}: between outer steps the instances "
           "hold different weights, and a checkpoint holds one instance's",
           c.ckpt.save_interval, h);
  }
  c.adam.validate();
  c.ckpt.validate();
}

runtime::RuntimeConfig training_runtime_config(const JobConfig& c) {
  runtime::RuntimeConfig rt = runtime_config(c.model, c.train, c.parallel, /*training=*/true);
  rt.parallel.dp.optimizer_bytes_per_element = optim::AdamW::bytes_per_element(c.adam);
  rt.parallel.dp.optimizer_fp8_moments = optim::AdamW::fp8_moments(c.adam);
  rt.parallel.dp.optimizer_fp8_block = optim::AdamW::kFp8Block;
  rt.main_params_dtype = c.adam.main_params_dtype;
  return rt;
}

TrainingJob build_training_job(const JobConfig& c, runtime::RuntimeConfig runtime_config, comm::World& world) {
  TrainingJob job;
  job.runtime = std::make_unique<runtime::Runtime>(std::move(runtime_config), world);
  job.optimizer = std::make_unique<optim::AdamW>(job.runtime->model().optimizer_segments(), c.adam,
                                                 job.runtime->memory());
  job.runtime->check_memory(job.optimizer.get());
  if (c.train.fp16) job.loss_scaler = std::make_unique<optim::LossScaler>(c.train.loss_scaling);
  return job;
}

std::unique_ptr<ckpt::Saver> make_saver(const JobConfig& c, runtime::Runtime& runtime, const optim::AdamW& optimizer) {
  if (c.ckpt.save.empty()) return nullptr;
  auto saver = std::make_unique<ckpt::Saver>(runtime.parallel_state().world(),
                                             ckpt::SaveConfig{.root = c.ckpt.save, .async = c.ckpt.async_save,
                                                              .keep_last = c.ckpt.keep_last, .faults = c.ckpt.faults});
  // The snapshot buffer is host memory beyond the planned arenas: as large
  // as what this rank writes (its share of parameters and moments).
  if (c.ckpt.async_save)
    log::info("ckpt", "--async-save: {} snapshot buffer on this rank",
              format_bytes(static_cast<double>(saver->prepare(runtime.checkpoint_shards(&optimizer)))));
  return saver;
}

}  // namespace claw::train
