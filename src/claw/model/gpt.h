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
//
// Pipeline parallelism: a GPT can be one stage of the model (PipelineStage):
// a run of consecutive blocks, plus the embedding on the first stage and the
// final norm and output layer on the last. A stage's micro-batch:
//   stage.forward_stage(ctx, tokens, input, targets, dloss_scale, &loss);  // input: previous stage_output()
//   ... send stage_output() on, receive d(stage_output()) ...
//   stage.backward_stage(ctx, tokens, output_grad);                        // then send stage_input_grad() back
// forward()/backward() are the one-stage case.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "claw/core/arena.h"
#include "claw/model/attention.h"
#include "claw/model/block.h"
#include "claw/model/config.h"
#include "claw/model/embedding.h"
#include "claw/model/hf_names.h"
#include "claw/model/kv_cache.h"
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

// The part of the model one pipeline stage holds (Megatron's pre_process /
// post_process): blocks [first_layer, first_layer + num_layers) keeping their
// global layer indices (names "layers.<global>..."; init is keyed by name, so
// a stage's parameters equal the whole model's), the embedding if
// pre_process, the final norm and output layer if post_process. With tied
// embeddings a post_process stage without the embedding holds its own copy of
// "embedding.word_embeddings.weight" (same spec and init; keeping the copies
// equal, by all-reducing their gradients, is the pipeline engine's job).
// The default is the whole model.
struct PipelineStage {
  int64_t first_layer = 0;
  int64_t num_layers = -1;  // -1: through the last layer
  bool pre_process = true;
  bool post_process = true;
  // num_layers made explicit; throws claw::Error when the stage does not fit
  // the model (pre_process needs first_layer 0, post_process the last layer).
  PipelineStage resolved(const ModelConfig& cfg) const;
  bool whole(const ModelConfig& cfg) const;
};

// Everything one micro-batch saves, plus the shared scratch.
// Sizes are one tensor-parallel rank's (model/tensor_parallel.h).
struct Activations {
  // [R, C] the stage's input: x_0, the embedding's output, on the first
  // stage, else the previous stage's output (R: rows of the residual stream held)
  float* input = nullptr;
  std::vector<Block::Saved> blocks;  // the stage's blocks
  NormLayer::Saved final_norm;       // post_process only
  OutputLayer::Saved output;         // post_process only
  Scratch scratch;
  // Internals of the block being recomputed, shared by all recomputed blocks.
  Block::Saved recompute_region;
  // 16-bit activations (ModelConfig::activation_dtype, bf16 or f16): a
  // stored block's large saved tensors (norm outputs, q, k, v, attention
  // output, x_mid, MLP pre-activations) are in `half_work` while the block
  // runs, shared by all blocks like the recompute region, and in 16-bit
  // copies between its forward and its backward: packed[k] lists block k's
  // (working buffer, copy, elements). Their values are 16-bit values
  // already, so the copies are exact.
  struct PackedTensor {
    float* work;
    uint16_t* bits;
    int64_t n;
  };
  Block::Saved half_work;
  std::vector<std::vector<PackedTensor>> packed;
  // shared: another set whose scratch and recompute region this one uses
  // (micro-batches in flight run one at a time) instead of laying out its own.
  void layout(ArenaLayout& L, const ModelConfig& cfg, int64_t B, int64_t T, Recompute recompute, TpDims tp,
              PipelineStage stage = {}, const Activations* shared = nullptr);
  float* out() const { return blocks.empty() ? input : blocks.back().out; }
  // Inference: nothing is kept for backward. One block region serves every
  // layer, whose outputs alternate between two buffers.
  void layout_inference(ArenaLayout& L, const ModelConfig& cfg, int64_t B, int64_t T, TpDims tp);
};

// The activation arena layout of one rank for micro-batches of [B, T] (pure).
// `slots` activation sets sharing one scratch (slot k > 0 named "slot<k>.").
ArenaPlan plan_activations(const ModelConfig& cfg, int64_t B, int64_t T, Recompute recompute = {}, TpDims tp = {},
                           PipelineStage stage = {}, int slots = 1);

class GPT {
 public:
  // tp: the tensor-parallel group (and KV-replica group) this rank belongs
  // to; default one rank. With storage.allocate false the model is a shape
  // only (specs, units, store layout; no values, nothing runs): the planner
  // builds one per pipeline stage with comm::ShapeGroup groups. Throws claw::Error naming the flags when the model
  // does not split over it (validate_tensor_parallel). stage: the part of
  // the model this rank holds (default: all of it).
  explicit GPT(ModelConfig cfg, StoreOptions storage = {}, TensorParallel tp = {}, PipelineStage stage = {});
  GPT(const GPT&) = delete;
  GPT& operator=(const GPT&) = delete;

  const ModelConfig& config() const { return cfg_; }
  const TensorParallel& tp() const { return tp_; }
  // The FP8 state of the blocks' linear layers that run in FP8, in order.
  std::vector<Fp8Linear*> fp8_layers() const;
  const PipelineStage& stage() const { return stage_; }  // resolved
  // Parameters held, in canonical order (embedding, blocks, final norm, output).
  std::vector<Param*> params();
  ParamStore& store() { return *store_; }
  const ParamStore& store() const { return *store_; }
  void init_weights(const CpuCtx& ctx, uint64_t seed) { store_->init(ctx, seed); }

  // Units held, in forward order (see unit_hooks.h; a stage numbers its own
  // from 0), and the order in which one micro-batch uses their values and
  // writes their gradients.
  const std::vector<Unit>& units() const { return units_; }
  std::vector<int> use_order(bool training) const;
  struct GradEvent {
    bool begin;
    int unit;
  };
  std::vector<GradEvent> grad_order() const;
  // Installs (or removes, with null) the hooks of a data-parallel engine.
  void set_hooks(UnitHooks* hooks) { hooks_ = hooks; }

  // MoE layers: the expert-bias step after an optimizer step (loads summed
  // over `group`), and the routing statistics since the last take.
  void update_expert_bias(comm::Group* group);
  void take_moe_stats(MoeStats& stats);

  // Context parallelism: the CP group this rank's sequence pieces are split
  // over and the attention method (model/context_parallel.h); B x T in
  // reserve() and every StepCtx are then the local tokens. Throws
  // claw::Error naming the flags when the heads do not split (a2a).
  void set_context_parallel(comm::Group* group, CpCommType type);
  comm::Group* cp_group() const { return cp_group_; }

  // Allocates activations for micro-batches of B sequences of T tokens.
  // `slots` sets of saved activations (micro-batches in flight at once under a
  // pipeline schedule; the scratch is shared), selected with use_slot().
  void reserve(int64_t B, int64_t T, Recompute recompute = {}, int slots = 1);
  int slots() const { return static_cast<int>(slots_.size()); }
  // The activation set the next forward_stage/backward_stage use.
  void use_slot(int k);
  int64_t reserved_B() const { return B_; }
  int64_t reserved_T() const { return T_; }
  size_t activation_bytes() const { return act_arena_.size(); }

  // Runs the forward pass and returns the sum of token losses (targets < 0
  // are ignored). dloss_scale != 0: also prepares backward (the LM head's
  // gradient is computed here, see OutputLayer).
  double forward(const StepCtx& ctx, const int32_t* tokens, const int32_t* targets, double dloss_scale);
  // Accumulates parameter gradients for the last forward (which must have had dloss_scale != 0).
  void backward(const StepCtx& ctx, const int32_t* tokens);

  // What crosses the model's boundary (stage inputs and outputs, their
  // gradients, hidden states) is a Tensor [R, C] of this dtype, R =
  // tp().rows(ctx.tokens()) (the sequence-parallel piece under SP). Pipeline
  // transfers and generation read shape and dtype from it.
  DType activation_dtype() const { return DType::f32; }

  // One pipeline stage's forward. input: the previous stage's stage_output()
  // (undefined on the first stage). targets and loss_sum (the sum of token
  // losses) are used on the last stage only. dloss_scale != 0: a
  // backward_stage follows (on the last stage: d total_loss / d token_loss).
  void forward_stage(const StepCtx& ctx, const int32_t* tokens, const Tensor& input, const int32_t* targets,
                     double dloss_scale, double* loss_sum);
  // The last block's output after forward_stage: the next stage's input.
  Tensor stage_output(const StepCtx& ctx) { return boundary(ctx, acts().out()); }
  // The current slot's input buffer (forward_stage copies its input here
  // unless it already is here: a receive can land in it directly).
  Tensor stage_input(const StepCtx& ctx) { return boundary(ctx, acts().input); }
  // One pipeline stage's backward. output_grad: the gradient w.r.t.
  // stage_output() from the next stage's stage_input_grad() (undefined on the
  // last stage).
  void backward_stage(const StepCtx& ctx, const int32_t* tokens, const Tensor& output_grad);
  // The gradient w.r.t. the stage's input after backward_stage, to send to
  // the previous stage (not on the first stage, whose embedding consumes
  // it). Valid until the next forward_stage or backward_stage.
  Tensor stage_input_grad(const StepCtx& ctx) const { return boundary(ctx, acts().scratch.dres); }
  // Logits [B*T, Vp] of the last forward's final hidden states (TP = 1 only).
  void logits(const StepCtx& ctx, float* out) const;

  // Inference with a KV cache (the whole model, no sequence parallelism):
  // runs the ctx.B x ctx.T new tokens of each cache row through the model,
  // appending their keys and values to `cache`, and returns their final
  // hidden states [B*T, C] (after the final norm; valid until the next call).
  // Positions are the cache's lengths onward. Activations come from an
  // inference arena that saves nothing for backward, grown to the largest
  // B x T seen. With ctx.B = 1 the T tokens may belong to many sequences:
  // the cache knows which (the serving engine's flattened steps).
  Tensor forward_cached(const StepCtx& ctx, const int32_t* tokens, AttentionCache& cache);
  // Logits over the real vocabulary [N, V] (fp32) of hidden states [N, C]
  // (from forward_cached) at any tensor-parallel size: a collective over the
  // TP group.
  void full_logits(const StepCtx& ctx, const Tensor& hidden, float* out) const;

  // Generation weights: every linear layer's weight and the output layer's
  // in type t, read by the batch-invariant steps of forward_cached and
  // full_logits (f32: the parameters themselves, nothing is copied). Each is
  // taken from `given` (canonical parameter name -> this rank's matrix, in
  // whatever type: a GGUF file's blocks, unchanged) or else converted from
  // this rank's fp32 values; t a type claw reads but does not make
  // (q4_k...) leaves the others fp32. A layer whose input width is not
  // whole blocks of t stays fp32. The word embeddings are rounded to t's
  // values in place for bf16/f16/q8_0/q4_0 (as llama.cpp holds
  // token_embd in the model's type; a GGUF file's dequantized table is then
  // left as it is).
  // release_fp32 hands the
  // pages of the replaced fp32 weights back to the OS and unbinds them: an
  // inference-only model, which must not train or save afterwards (the tied
  // word embeddings stay: the embedding reads them).
  struct InferenceWeights {
    int64_t converted = 0, kept_f32 = 0;  // matrices
    size_t bytes = 0;                     // of every matrix a token reads (converted or fp32)
  };
  // Folds every LoRA adapter into its weight (Linear::merge_lora): the
  // adapters stay in the store but no longer take part in forward.
  void merge_lora(const CpuCtx& ctx);
  // After every weight was overwritten with unmerged values (base and
  // adapters, an RL weight sync): folds the adapters in again.
  void remerge_lora(const CpuCtx& ctx);
  // LoRA adapters are merged into their weights first (merge_lora).
  InferenceWeights set_inference_weights(const CpuCtx& ctx, kernels::WeightType t,
                                         const std::map<std::string, kernels::WeightMatrix>* given = nullptr,
                                         bool release_fp32 = false);

  // The first non-finite tensor, in forward order (parameters of a layer,
  // then what it saved), as "name (kind)"; empty if all are finite.
  std::string first_non_finite(const CpuCtx& ctx) const;
  // Same over parameter gradients.
  std::string first_non_finite_grad(const CpuCtx& ctx) const;

 private:
  std::vector<Linear*> linears() const;  // every block's, in order
  ModelConfig cfg_;
  PipelineStage stage_;
  std::unique_ptr<comm::Group> own_tp_, own_kv_;  // one-rank groups when none is given
  TensorParallel tp_;
  HfNames hf_;
  RopeTables rope_;
  RopeTables rope_local_;  // --local-rotary-base: the windowed layers' (empty: none)
  Embedding embedding_;
  std::vector<std::unique_ptr<Block>> blocks_;
  NormLayer final_norm_;
  OutputLayer output_;
  std::unique_ptr<ParamStore> store_;
  std::vector<Unit> units_;
  UnitHooks* hooks_ = nullptr;
  // Unit indices: -1 for a part not held.
  int emb_unit_ = -1, block_unit0_ = 0, norm_unit_ = -1, out_unit_ = -1;
  // The output layer uses the embedding unit's word matrix (tied, both held).
  bool tied_here() const { return cfg_.tied() && stage_.pre_process && stage_.post_process; }
  int output_value_unit() const { return tied_here() ? emb_unit_ : out_unit_; }
  void collect_output(std::vector<Param*>& out);
  int num_blocks() const { return static_cast<int>(blocks_.size()); }

  int64_t B_ = 0, T_ = 0;
  Recompute recompute_;
  comm::Group* cp_group_ = nullptr;
  CpCommType cp_type_ = CpCommType::p2p;
  std::unique_ptr<CpAttention> cp_attention_;  // made by reserve() for its B x T
  ArenaPlan act_plan_{"activations"};
  Arena act_arena_;
  // One set of saved activations per micro-batch in flight (pipeline
  // schedules); all share slot 0's scratch.
  std::vector<Activations> slots_{1};
  int slot_ = 0;
  // forward_cached's activations.
  int64_t inf_tokens_ = 0;  // tokens the inference arena holds
  ArenaPlan inf_plan_{"inference"};
  Arena inf_arena_;
  Activations inf_;
  Activations& acts() { return slots_[slot_]; }
  // A boundary buffer as the Tensor [rows(ctx.tokens()), C] it holds.
  Tensor boundary(const StepCtx& ctx, const float* p) const {
    return Tensor(const_cast<float*>(p), activation_dtype(), {tp_.rows(ctx.tokens()), cfg_.hidden_size});
  }
  const Activations& acts() const { return slots_[slot_]; }
};

}  // namespace claw::model
