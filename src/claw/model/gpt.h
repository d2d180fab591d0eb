// GPT: the decoder-only transformer, assembled from a ModelConfig.
//
//   x_0 = embedding(tokens)                  (+ learned positions, dropout)
//   x_l = block_l(x_{l-1}),  l = 1..L
//   loss = cross_entropy(norm_f(x_L) W_out^T, targets)
//
// Memory is planned: parameters and gradients live in a ParamStore (two flat
// buffers); activations for micro-batches of [B, T] in one arena whose layout
// is the pure function layout_activations(), which the memory report calls
// too. Nothing is allocated during a step.
//
// One training micro-batch (see Recompute for trading compute for memory):
//   double loss_sum = model.forward(ctx, tokens, targets, dloss_scale);  // also the LM-head backward
//   model.backward(ctx, tokens);                                        // grads += d loss / d params
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "claw/core/arena.h"
#include "claw/model/attention.h"
#include "claw/model/block.h"
#include "claw/model/config.h"
#include "claw/model/embedding.h"
#include "claw/model/hf_names.h"
#include "claw/model/norm.h"
#include "claw/model/output_layer.h"
#include "claw/model/param.h"
#include "claw/model/scratch.h"
#include "claw/model/step.h"
#include "claw/model/tensor_parallel.h"
#include "claw/model/unit_hooks.h"

namespace claw::model {

// Activation recompute (Megatron's --recompute-granularity full with
// --recompute-method block): the first `layers` blocks keep only their output
// (the next block's input); backward re-runs such a block's forward, with the
// same dropout masks, into one region shared by all of them, then runs its
// backward. Costs one extra block forward per recomputed block but the last
// (whose values are still in the shared region); saves (saved bytes per block
// - output bytes) x (layers - 1).
struct Recompute {
  int64_t layers = 0;
};

// Everything one micro-batch saves, plus the shared scratch.
// Sizes are one tensor-parallel rank's (model/tensor_parallel.h).
struct Activations {
  float* embedding = nullptr;  // [R, C] x_0 (R: rows of the residual stream held)
  std::vector<Block::Saved> blocks;
  NormLayer::Saved final_norm;
  OutputLayer::Saved output;
  Scratch scratch;
  void layout(ArenaLayout& L, const ModelConfig& cfg, int64_t B, int64_t T, Recompute recompute, TpDims tp);
};

// The activation arena layout of one rank for micro-batches of [B, T] (pure).
ArenaPlan plan_activations(const ModelConfig& cfg, int64_t B, int64_t T, Recompute recompute = {}, TpDims tp = {});

class GPT {
 public:
  // tp: the tensor-parallel group (and KV-replica group) this rank belongs
  // to; default one rank. Throws claw::Error naming the flags when the model
  // does not split over it (validate_tensor_parallel).
  explicit GPT(ModelConfig cfg, StoreOptions storage = {}, TensorParallel tp = {});
  GPT(const GPT&) = delete;
  GPT& operator=(const GPT&) = delete;

  const ModelConfig& config() const { return cfg_; }
  const TensorParallel& tp() const { return tp_; }
  // Parameters in canonical order (embedding, blocks, final norm, output).
  std::vector<Param*> params();
  ParamStore& store() { return *store_; }
  void init_weights(const CpuCtx& ctx, uint64_t seed) { store_->init(ctx, seed); }

  // Units in forward order (see unit_hooks.h) and the order in which one
  // micro-batch uses their values and writes their gradients.
  const std::vector<Unit>& units() const { return units_; }
  std::vector<int> use_order(bool training) const;
  struct GradEvent {
    bool begin;
    int unit;
  };
  std::vector<GradEvent> grad_order() const;
  // Installs (or removes, with null) the hooks of a data-parallel engine.
  void set_hooks(UnitHooks* hooks) { hooks_ = hooks; }

  // Allocates activations for micro-batches of B sequences of T tokens.
  void reserve(int64_t B, int64_t T, Recompute recompute = {});
  int64_t reserved_B() const { return B_; }
  int64_t reserved_T() const { return T_; }
  size_t activation_bytes() const { return act_arena_.size(); }

  // Runs the forward pass and returns the sum of token losses (targets < 0
  // are ignored). dloss_scale != 0: also prepares backward (the LM head's
  // gradient is computed here, see OutputLayer).
  double forward(const StepCtx& ctx, const int32_t* tokens, const int32_t* targets, double dloss_scale);
  // Accumulates parameter gradients for the last forward (which must have had dloss_scale != 0).
  void backward(const StepCtx& ctx, const int32_t* tokens);
  // Logits [B*T, Vp] of the last forward's final hidden states (TP = 1 only).
  void logits(const StepCtx& ctx, float* out) const;

  // The first non-finite tensor, in forward order (parameters of a layer,
  // then what it saved), as "name (kind)"; empty if all are finite.
  std::string first_non_finite(const CpuCtx& ctx) const;
  // Same over parameter gradients.
  std::string first_non_finite_grad(const CpuCtx& ctx) const;

 private:
  ModelConfig cfg_;
  std::unique_ptr<comm::Group> own_tp_, own_kv_;  // one-rank groups when none is given
  TensorParallel tp_;
  HfNames hf_;
  RopeTables rope_;
  Embedding embedding_;
  std::vector<std::unique_ptr<Block>> blocks_;
  NormLayer final_norm_;
  OutputLayer output_;
  std::unique_ptr<ParamStore> store_;
  std::vector<Unit> units_;
  UnitHooks* hooks_ = nullptr;
  int output_unit() const { return cfg_.num_layers + 2; }
  int output_value_unit() const { return cfg_.tied() ? 0 : output_unit(); }

  int64_t B_ = 0, T_ = 0;
  Recompute recompute_;
  ArenaPlan act_plan_{"activations"};
  Arena act_arena_;
  Activations acts_;
};

}  // namespace claw::model
