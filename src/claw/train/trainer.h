// The training loop: micro-batches with gradient accumulation, global-norm
// clipping, AdamW with a warmup + decay schedule, periodic validation, a
// progress line and a JSONL metrics stream.
//
// Launched by mpirun/srun, every rank runs this loop on its data-parallel
// slice of each global batch (ParallelState, DataParallel); rank 0 logs and
// writes the metrics.
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
#include <vector>

#include "claw/comm/parallel_state.h"
#include "claw/model/config.h"
#include "claw/model/tensor_parallel.h"
#include "claw/optim/adamw.h"
#include "claw/optim/lr_schedule.h"
#include "claw/parallel/data_parallel.h"
#include "claw/parallel/pipeline_executor.h"
#include "claw/train/batch.h"
#include "claw/train/config.h"

namespace claw::ckpt {
class Saver;
struct Shard;
}
namespace claw::data {
class SampleSource;
}
namespace claw::model {
class GPT;
}

namespace claw::train {

struct TrainResult {
  int64_t steps = 0;
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
  // Mean loss and token count over the first `iters` global batches of the
  // training split, without updates (`claw eval`).
  double evaluate_train_split(int64_t iters);
  // Writes the tokens and logits (real vocabulary) of the first micro-batch
  // of the training split as safetensors (TP = PP = 1).
  void write_logits(const std::string& path);
  // The iteration training starts from (0, or the loaded checkpoint's).
  int64_t start_iteration() const { return start_iteration_; }

 private:
  // This rank's shards of the checkpoint tensors (ckpt/shards.h).
  std::vector<ckpt::Shard> checkpoint_shards(bool optimizer) const;
  // --load: reads the checkpoint into the model and optimizer and restores
  // the step, the data position and the optimizer's step count.
  void load_checkpoint();
  void setup_checkpointing();
  void save_checkpoint(int64_t iteration);

  // Mean validation loss over --eval-iters global batches from position `first`.
  double evaluate(int64_t first);
  // Mean loss over `iters` global batches of `source` from position `first`.
  double mean_eval_loss(const data::SampleSource& source, int64_t first, int64_t iters);

  model::ModelConfig model_cfg_;
  TrainConfig cfg_;
  optim::LrSchedule lr_;
  optim::AdamWConfig adam_cfg_;
  DataConfig data_cfg_;
  ParallelConfig par_cfg_;
  comm::World& world_;
  std::unique_ptr<comm::ParallelState> pstate_;
  std::unique_ptr<model::TpGroups> tp_groups_;
  CpuCtx cpu_;
  std::unique_ptr<data::SampleSource> train_data_;
  std::unique_ptr<data::SampleSource> valid_data_;  // null: no validation
  // Without pipeline parallelism: the model and its data-parallel engine.
  std::unique_ptr<model::GPT> model_;
  std::unique_ptr<parallel::DataParallel> dp_;
  // With it: this stage's model chunks, their engines, and the schedule's executor.
  std::vector<std::unique_ptr<model::GPT>> chunks_;
  std::vector<std::unique_ptr<parallel::DataParallel>> chunk_dps_;
  std::unique_ptr<parallel::PipelineExecutor> pipeline_;
  parallel::DataParallel& first_dp() { return dp_ ? *dp_ : *chunk_dps_.front(); }
  std::vector<parallel::DataParallel*> dp_pointers() const {
    std::vector<parallel::DataParallel*> out;
    for (const auto& d : chunk_dps_) out.push_back(d.get());
    return out;
  }
  std::unique_ptr<optim::AdamW> optimizer_;
  std::unique_ptr<GlobalBatch> batch_;
  CheckpointConfig ckpt_cfg_;
  std::unique_ptr<ckpt::Saver> saver_;
  int64_t start_iteration_ = 0;
  int64_t consumed_train_samples_ = 0, consumed_valid_samples_ = 0;
};

}  // namespace claw::train
