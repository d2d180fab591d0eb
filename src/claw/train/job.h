// One way to build what a training loop runs on. `claw train` (its DPO mode
// too) and GRPO's learner (rl/grpo_trainer.cc) take their runtime, optimizer,
// loss scaler and saver from here, so a training choice (the optimizer's
// state dtypes, fp16 masters, --fp16 loss scaling, checkpoint saving) means
// the same in every loop and none can silently drop one.
#pragma once

#include <memory>
#include <string>

#include "claw/ckpt/checkpoint.h"
#include "claw/comm/world.h"
#include "claw/model/config.h"
#include "claw/optim/adamw.h"
#include "claw/optim/loss_scaler.h"
#include "claw/runtime/runtime.h"
#include "claw/train/config.h"

namespace claw::train {

// What the loop trains with, checked before anything is allocated.
struct JobConfig {
  model::ModelConfig model;
  TrainConfig train;
  optim::AdamWConfig adam;
  ParallelConfig parallel;
  CheckpointConfig ckpt;
  std::string command = "claw train";  // names the loop in errors
};

// Throws claw::Error naming the flag for a combination no loop runs
// (--fp16 with DiLoCo or fp16 masters' DiLoCo, --save-interval across outer
// steps, ...); the checks every loop shares.
void validate_job(const JobConfig& c);

// The runtime's configuration for training: the model, layout and batch of
// runtime_config() plus the optimizer's storage (state bytes per element,
// FP8 moments, master dtype), which the memory plan counts.
runtime::RuntimeConfig training_runtime_config(const JobConfig& c);

// The pieces, built in order on this rank: the runtime (parallel groups,
// model chunks, memory plan checked against the allocation), AdamW over its
// trainable segments and the loss scaler (--fp16).
struct TrainingJob {
  std::unique_ptr<runtime::Runtime> runtime;
  std::unique_ptr<optim::AdamW> optimizer;
  std::unique_ptr<optim::LossScaler> loss_scaler;  // null without --fp16
};
// `runtime_config`: training_runtime_config(c), resolved (the caller may have
// adjusted it, e.g. the learners' data-parallel size).
TrainingJob build_training_job(const JobConfig& c, runtime::RuntimeConfig runtime_config, comm::World& world);

// The saver of --save (null without it), made once --load has been read so
// that a run that cannot start leaves no directory behind.
std::unique_ptr<ckpt::Saver> make_saver(const JobConfig& c, runtime::Runtime& runtime, const optim::AdamW& optimizer);

}  // namespace claw::train
