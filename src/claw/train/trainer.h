// The training loop: micro-batches with gradient accumulation, global-norm
// clipping, AdamW with a warmup + decay schedule, periodic validation, a
// progress line and a JSONL metrics stream.
//
// Launched by mpirun/srun, every rank runs this loop on its data-parallel
// slice of each global batch; rank 0 logs and writes the metrics. The model,
// its parallel groups and engines are the runtime's (runtime/runtime.h); the
// trainer adds the data, the optimizer, the loop and the training state
// (iteration, consumed samples, optimizer steps) that checkpoints carry.
//
// One step (global batch = grad_accumulation_steps micro-batches per rank):
//   zero grads
//   for each micro-batch: forward (loss, LM-head grads) + backward; grads accumulate
//   norm = sqrt(sum of squared grads); coef = min(1, clip / norm)
//   AdamW(lr(step), grads * coef)
// The loss is the mean over every token of the global batch, so the result
// does not depend on how the batch is cut into micro-batches.
//
// A non-finite loss or gradient norm stops the run with the step number and
// the first tensor (parameter, activation or gradient) that is not finite.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include <nlohmann/json.hpp>

#include "claw/model/config.h"
#include "claw/optim/adamw.h"
#include "claw/optim/loss_scaler.h"
#include "claw/optim/lr_schedule.h"
#include "claw/runtime/runtime.h"
#include "claw/train/batch.h"
#include "claw/train/config.h"
#include "claw/train/job.h"
#include "claw/train/observers.h"

namespace claw::ckpt {
class Saver;
}
namespace claw::data {
class SampleSource;
}

namespace claw::train {

class DpoLoss;

struct TrainResult {
  int64_t steps = 0;
  int stopped_by = 0;  // SIGTERM/SIGUSR1 stopped the run after `steps` (saved if --save): ExitCode::stopped
  double final_loss = 0;
  double final_val_loss = -1;  // < 0: no validation ran
  double seconds = 0;
};

class Trainer {
 public:
  // `world`: this process's place in the job (World::single() for one rank).
  Trainer(model::ModelConfig model, TrainConfig train, optim::LrSchedule lr, optim::AdamWConfig adam, DataConfig data,
          ParallelConfig parallel, comm::World& world, CheckpointConfig ckpt = {});
  ~Trainer();

  TrainResult run();
  // The iteration training starts from (0, or the loaded checkpoint's).
  int64_t start_iteration() const { return start_iteration_; }

 private:
  // --load: reads the checkpoint into the model and optimizer (the runtime's
  // load_checkpoint) and restores the step, the data position and the
  // optimizer's step count.
  void load_checkpoint();
  void setup_checkpointing();
  // The configs as train/job.h builds from them.
  JobConfig job_config() const;
  void save_checkpoint(int64_t iteration);
  // --fp8-layer-selection auto: calibrates on the first batches (or takes
  // the checkpoint's choice) and keeps the worst blocks out of FP8.
  void select_fp8_layers();
  // --dpo: the reference log-probabilities (cached or computed with the
  // model as loaded) and the losses over the splits.
  void setup_dpo();
  // The DPO metrics of the pairs `loss` saw since the last call, summed over
  // the data-parallel ranks and pipeline stages, into rec under `prefix`.
  void moe_metrics(nlohmann::json& rec);
  void dpo_metrics(DpoLoss& loss, const std::string& prefix, nlohmann::json& rec);

  // The step observers of run() (train/observers.h), in order; `ckpt` is
  // set to the checkpoint cadence when there is a saver.
  const Throughput& add_observers(std::vector<std::unique_ptr<StepObserver>>& out, Sections& sections,
                                  SdcMonitor& sdc, CheckpointCadence*& ckpt);
  // The step's DPO, MoE and loss-scaling metrics.
  void objective_metrics(StepState& s);
  // Validation every --eval-interval steps and at the end.
  void evaluation_step(StepState& s, Sections& sections);
  void log_stop(const StepState& s) const;

  // Mean validation loss over --eval-iters global batches from position `first`.
  double evaluate(int64_t first);
  parallel::DataParallel& first_dp() { return runtime_->first_dp(); }

  model::ModelConfig model_cfg_;
  std::optional<std::vector<int64_t>> fp8_checkpoint_choice_;
  std::unique_ptr<optim::LossScaler> loss_scaler_;  // --fp16  // auto selection read from a checkpoint
  TrainConfig cfg_;
  optim::LrSchedule lr_;
  optim::AdamWConfig adam_cfg_;
  DataConfig data_cfg_;
  ParallelConfig par_cfg_;
  comm::World& world_;
  // Groups, this rank's model chunks, their engines and the executor.
  std::unique_ptr<runtime::Runtime> runtime_;
  std::unique_ptr<data::SampleSource> train_data_;
  std::unique_ptr<data::SampleSource> valid_data_;  // null: no validation
  std::unique_ptr<optim::AdamW> optimizer_;
  std::unique_ptr<GlobalBatch> batch_;
  CheckpointConfig ckpt_cfg_;
  std::unique_ptr<ckpt::Saver> saver_;
  int64_t start_iteration_ = 0;
  std::string loaded_dir_;     // the checkpoint --load read ("": none)
  std::string dpo_reference_;  // --dpo: the reference cache file (recorded in checkpoints)
  std::unique_ptr<DpoLoss> dpo_train_, dpo_valid_;
  int64_t consumed_train_samples_ = 0, consumed_valid_samples_ = 0;
};

}  // namespace claw::train
