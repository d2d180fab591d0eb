// `claw eval`: a checkpoint's loss on a dataset, at any layout the launched
// ranks allow. The runtime (model, groups, engines) with the checkpoint's
// parameters and the data, without an optimizer: no AdamW state is
// allocated, nothing is trained.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "claw/comm/world.h"
#include "claw/model/config.h"
#include "claw/runtime/runtime.h"
#include "claw/train/batch.h"
#include "claw/train/config.h"

namespace claw::data {
class SampleSource;
}

namespace claw::train {

class Evaluator {
 public:
  // Loads the parameters of ckpt.load (a checkpoint directory or a root of
  // them; ckpt.ckpt_step picks an iteration). `train`: the batch shape and
  // train.train_iters global batches of the training split's samples to read.
  Evaluator(model::ModelConfig model, TrainConfig train, DataConfig data, ParallelConfig parallel, comm::World& world,
            const CheckpointConfig& ckpt);
  ~Evaluator();

  // Mean loss over the first `iters` global batches of the training split.
  double evaluate_train_split(int64_t iters);
  // Writes the tokens and logits (real vocabulary) of the first micro-batch
  // of the training split as safetensors (TP = PP = 1).
  void write_logits(const std::string& path);
  // Writes the first global batch's tokens and targets, its mean loss, and
  // the loss gradient of every trainable parameter ("grad.<name>"; with
  // LoRA, the adapters') as safetensors (one rank). Dropout is on, as in
  // training.
  void write_gradients(const std::string& path);

 private:
  model::ModelConfig model_cfg_;
  TrainConfig cfg_;
  std::unique_ptr<runtime::Runtime> runtime_;
  std::unique_ptr<data::SampleSource> train_data_;
  std::unique_ptr<GlobalBatch> batch_;
};

}  // namespace claw::train
