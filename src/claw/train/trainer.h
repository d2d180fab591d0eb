// The training loop: micro-batches with gradient accumulation, global-norm
// clipping, AdamW with a warmup + decay schedule, periodic validation, a
// progress line and a JSONL metrics stream.
//
// One step (global batch = grad_accumulation_steps micro-batches):
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

#include "claw/model/config.h"
#include "claw/optim/adamw.h"
#include "claw/optim/lr_schedule.h"
#include "claw/train/batch.h"
#include "claw/train/config.h"

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
  Trainer(model::ModelConfig model, TrainConfig train, optim::LrSchedule lr, optim::AdamWConfig adam, DataConfig data);
  ~Trainer();

  TrainResult run();

 private:
  // Mean validation loss over --eval-iters global batches from position `first`.
  double evaluate(int64_t first);

  model::ModelConfig model_cfg_;
  TrainConfig cfg_;
  optim::LrSchedule lr_;
  optim::AdamWConfig adam_cfg_;
  DataConfig data_cfg_;
  CpuCtx cpu_;
  std::unique_ptr<data::SampleSource> train_data_;
  std::unique_ptr<data::SampleSource> valid_data_;  // null: no validation
  std::unique_ptr<model::GPT> model_;
  std::unique_ptr<optim::AdamW> optimizer_;
  std::unique_ptr<GlobalBatch> batch_;
};

}  // namespace claw::train
