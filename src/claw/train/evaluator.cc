#include "claw/train/evaluator.h"

#include <algorithm>
#include <vector>

#include <nlohmann/json.hpp>

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

void Evaluator::write_gradients(const std::string& path) {
  if (runtime_->world().size() != 1)
    fail("--grads-file needs one rank (it writes every trainable parameter whole); run claw eval without mpirun");
  const int64_t M = batch_->micro_batches(), B = cfg_.micro_batch_size, T = cfg_.seq_length;
  batch_->load(*train_data_, 0);
  const double loss = loss_gradients(runtime_->model(), runtime_->cpu(), *batch_, 0, cfg_.seed, 0);
  std::vector<int32_t> tokens(static_cast<size_t>(M * B * T)), targets(tokens.size());
  for (int64_t k = 0; k < M; ++k) {
    const MicroBatch mb = batch_->micro(k);
    std::copy_n(mb.tokens, B * T, tokens.data() + k * B * T);
    std::copy_n(mb.targets, B * T, targets.data() + k * B * T);
  }
  const double loss64 = loss;
  std::vector<ckpt::TensorView> views = {{"tokens", DType::i32, {M * B, T}, tokens.data()},
                                         {"targets", DType::i32, {M * B, T}, targets.data()},
                                         {"loss", DType::f64, {1}, &loss64}};
  std::vector<std::string> names;
  for (model::Param* p : runtime_->model().first().store().params())
    if (p->spec.trainable) names.push_back("grad." + p->spec.name);
  // Each tensor's Hugging Face name, for oracles: the name, [name, dim,
  // begin, end] for a slice of a fused tensor (Phi-3's qkv_proj), or [name
  // with "{}", "stack", E] for experts stacked along dimension 0 (Mixtral's
  // experts.{}.w1); none for a transposed GPT-2 weight.
  nlohmann::json hf_names = nlohmann::json::object();
  size_t i = 0;
  for (model::Param* p : runtime_->model().first().store().params()) {
    if (!p->spec.trainable) continue;
    const model::HfRef& hf = p->spec.hf;
    if (hf.name.empty() || hf.transpose) {
    } else if (hf.stack > 0) {
      hf_names[p->spec.name] = nlohmann::json::array({hf.name, "stack", hf.stack});
    } else {
      hf_names[p->spec.name] = hf.slice_dim < 0 ? nlohmann::json(hf.name)
                                                : nlohmann::json::array({hf.name, hf.slice_dim, hf.begin, hf.end});
    }
    const Shape s = p->spec.local_shape();
    std::vector<int64_t> dims;
    for (int d = 0; d < s.ndim(); ++d) dims.push_back(s[d]);
    views.push_back({names[i++], DType::f32, dims, p->gdata()});
  }
  ckpt::write_safetensors(path, views, {{"hf_names", hf_names.dump()}});
  log::info("eval", "wrote the loss ({:.6f}) and the gradients of {} trainable tensors on the first global batch "
            "({} x {} tokens) to {}", loss, names.size(), M * B, T, path);
}

}  // namespace claw::train
