#include "claw/train/evaluator.h"

#include <algorithm>
#include <vector>

#include "claw/ckpt/safetensors.h"
#include "claw/core/error.h"
#include "claw/core/log.h"
#include "claw/data/sample_source.h"
#include "claw/train/run_data.h"
#include "claw/train/step.h"

namespace claw::train {

Evaluator::Evaluator(model::ModelConfig model, TrainConfig train, DataConfig data, ParallelConfig parallel,
                     comm::World& world, const CheckpointConfig& ckpt)
    : model_cfg_(std::move(model)), cfg_(train) {
  cfg_.resolve_and_validate(comm::RankGrid::make(world.size(), parallel.sizes).dp);
  ckpt.validate();
  runtime_ = std::make_unique<runtime::Runtime>(runtime_config(model_cfg_, cfg_, parallel, /*training=*/false), world);
  RunData d = open_run_data(data, cfg_, model_cfg_, runtime_->parallel_state(), runtime_->cpu().num_threads);
  train_data_ = std::move(d.train);
  batch_ = std::move(d.batch);
  runtime_->check_memory(nullptr);
  const runtime::LoadedCheckpoint c = runtime_->load_checkpoint(
      {.root = ckpt.load, .step = ckpt.ckpt_step, .fallback = ckpt.load_fallback, .optimizer = false}, nullptr);
  if (!c.loaded) fail("--load {}: no checkpoint there", ckpt.load);
  log::info("ckpt", "loaded {} (iteration {}) for evaluation", c.dir, c.iteration);
}

Evaluator::~Evaluator() = default;

double Evaluator::evaluate_train_split(int64_t iters) {
  return mean_eval_loss(runtime_->model(), runtime_->cpu(), *batch_, *train_data_, 0, iters, cfg_.global_batch_size,
                        cfg_.seed);
}

void Evaluator::write_logits(const std::string& path) {
  comm::ParallelState& ps = runtime_->parallel_state();
  if (ps.pp().size() > 1 || ps.tp().size() > 1)
    fail("--logits-file needs --tensor-model-parallel-size 1 and --pipeline-model-parallel-size 1 (it writes the "
         "whole vocabulary's logits of one rank)");
  const int64_t B = cfg_.micro_batch_size, T = cfg_.seq_length, V = model_cfg_.vocab_size;
  const int64_t Vp = model_cfg_.padded_vocab_size(1);
  batch_->load(*train_data_, 0);
  std::vector<float> logits(static_cast<size_t>(B * T * Vp));
  eval_logits(runtime_->model().first(), runtime_->cpu(), *batch_, cfg_.seed, logits.data());
  if (runtime_->world().rank() != 0) return;
  std::vector<float> real(static_cast<size_t>(B * T * V));
  for (int64_t r = 0; r < B * T; ++r) std::copy_n(&logits[r * Vp], V, &real[r * V]);
  const MicroBatch mb = batch_->micro(0);
  ckpt::write_safetensors(path, {{"tokens", DType::i32, {B, T}, mb.tokens}, {"logits", DType::f32, {B, T, V}, real.data()}});
  log::info("eval", "wrote the logits of the first micro-batch ({} x {} tokens, vocabulary {}) to {}", B, T, V, path);
}

}  // namespace claw::train
