// The model's flags (Megatron's spelling): one table that `claw train`,
// `claw plan` and `claw rl` bind to their command lines (each flag overrides
// a field of the --model preset's ModelConfig), and that a checkpoint's
// metadata records the model in ({flag: value}), read back by every loader.
#pragma once

#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "claw/core/flag.h"
#include "claw/core/error.h"
#include "claw/model/config.h"

namespace claw::model {

// A comma-separated list of numbers (longrope's factors), printed back so
// that it reads the same (fmt's shortest round trip).
template <typename A, typename Field>
Flag<A> factor_list_flag(const std::string& name, const std::string& help, Field field) {
  return Flag<A>{name, help, false,
                 [name, field](A& a, const std::string& v) {
                   std::vector<double>& out = field(a);
                   out.clear();
                   for (const std::string& x : split_names(v)) out.push_back(parse_double(name, x));
                 },
                 [field](const A& a) {
                   std::string s;
                   for (double x : field(const_cast<A&>(a))) s += (s.empty() ? "" : ",") + fmt::format("{}", x);
                   return s;
                 },
                 "X[,X...]"};
}

// The options the Hugging Face families bring (Qwen, Mistral, Phi-3, Gemma,
// Llama 3.1's RoPE scaling): part of model_shape_flags.
template <typename A, typename Get>
std::vector<Flag<A>> model_family_flags(Get cfg_of) {
  using F = Flag<A>;
  return {
      F{"rope-scaling-type", "RoPE frequency scaling: none, linear, llama3, yarn or longrope (Hugging Face's rope_scaling)",
        false,
        [cfg_of](A& a, const std::string& v) { cfg_of(a).rope_scaling.type = v == "none" ? "" : v; },
        [cfg_of](const A& a) {
          const std::string& t = cfg_of(const_cast<A&>(a)).rope_scaling.type;
          return t.empty() ? std::string("none") : t;
        },
        "{none,linear,llama3,yarn,longrope}"},
      double_flag<A>("rope-scaling-factor", "RoPE scaling: how much longer the context gets",
                     [cfg_of](A& a) -> auto& { return cfg_of(a).rope_scaling.factor; }),
      double_flag<A>("rope-scaling-low-freq-factor", "llama3 RoPE scaling: low_freq_factor",
                     [cfg_of](A& a) -> auto& { return cfg_of(a).rope_scaling.low_freq_factor; }),
      double_flag<A>("rope-scaling-high-freq-factor", "llama3 RoPE scaling: high_freq_factor",
                     [cfg_of](A& a) -> auto& { return cfg_of(a).rope_scaling.high_freq_factor; }),
      int_flag<A>("rope-scaling-original-max-position-embeddings",
                  "llama3 and yarn RoPE scaling: the context the model was trained on",
                  [cfg_of](A& a) -> auto& { return cfg_of(a).rope_scaling.original_max_position_embeddings; }),
      double_flag<A>("rope-scaling-beta-fast", "yarn RoPE scaling: rotations above which a frequency is kept",
                     [cfg_of](A& a) -> auto& { return cfg_of(a).rope_scaling.beta_fast; }),
      double_flag<A>("rope-scaling-beta-slow", "yarn RoPE scaling: rotations below which a frequency is interpolated",
                     [cfg_of](A& a) -> auto& { return cfg_of(a).rope_scaling.beta_slow; }),
      double_flag<A>("rope-scaling-attention-factor", "yarn RoPE scaling: cos/sin multiplier (0: from the factor)",
                     [cfg_of](A& a) -> auto& { return cfg_of(a).rope_scaling.attention_factor; }),
      double_flag<A>("rope-scaling-mscale", "yarn RoPE scaling: DeepSeek's mscale (0: none)",
                     [cfg_of](A& a) -> auto& { return cfg_of(a).rope_scaling.mscale; }),
      double_flag<A>("rope-scaling-mscale-all-dim", "yarn RoPE scaling: DeepSeek's mscale_all_dim (0: none)",
                     [cfg_of](A& a) -> auto& { return cfg_of(a).rope_scaling.mscale_all_dim; }),
      F{"rope-scaling-truncate", "yarn RoPE scaling: round the ramp's ends to whole dimensions", false,
        [cfg_of](A& a, const std::string& v) { cfg_of(a).rope_scaling.truncate = parse_bool("rope-scaling-truncate", v); },
        [cfg_of](const A& a) {
          return std::string(cfg_of(const_cast<A&>(a)).rope_scaling.truncate ? "true" : "false");
        },
        "{true,false}"},
      factor_list_flag<A>("rope-scaling-short-factor", "longrope: each rotated pair's divisor up to the original context",
                          [cfg_of](A& a) -> auto& { return cfg_of(a).rope_scaling.short_factor; }),
      factor_list_flag<A>("rope-scaling-long-factor", "longrope: each rotated pair's divisor past the original context",
                          [cfg_of](A& a) -> auto& { return cfg_of(a).rope_scaling.long_factor; }),
      F{"geglu", "use a GeGLU MLP (tanh GELU gate, Gemma's) instead of GELU", true,
        [cfg_of](A& a, const std::string& v) {
          if (parse_bool("geglu", v)) cfg_of(a).mlp = Mlp::geglu;
          else if (cfg_of(a).mlp == Mlp::geglu) cfg_of(a).mlp = Mlp::gelu;
        },
        [cfg_of](const A& a) { return std::string(cfg_of(const_cast<A&>(a)).mlp == Mlp::geglu ? "true" : "false"); }},
      switch_flag<A>("apply-layernorm-1p", "norms scale by (1 + weight), the weight starting at 0 (Gemma)",
                     [cfg_of](A& a) -> auto& { return cfg_of(a).apply_layernorm_1p; }),
      switch_flag<A>("post-sublayer-norm", "also a norm on the attention and MLP outputs before each residual add "
                     "(Gemma 2/3)",
                     [cfg_of](A& a) -> auto& { return cfg_of(a).post_sublayer_norm; }),
      switch_flag<A>("no-pre-sublayer-norm", "with --post-sublayer-norm: no norm on the sublayers' inputs (OLMo 2)",
                     [cfg_of](A& a) -> auto& { return cfg_of(a).pre_sublayer_norm; }, false),
      switch_flag<A>("scale-embedding", "word embeddings times sqrt(hidden-size) (Gemma)",
                     [cfg_of](A& a) -> auto& { return cfg_of(a).scale_embedding; }),
      double_flag<A>("softmax-scale", "attention score scale (0: 1/sqrt(head dim); Gemma: query_pre_attn_scalar^-0.5)",
                     [cfg_of](A& a) -> auto& { return cfg_of(a).softmax_scale; }),
      double_flag<A>("local-rotary-base", "RoPE theta of the sliding-window layers, unscaled (0: --rotary-base)",
                     [cfg_of](A& a) -> auto& { return cfg_of(a).local_rotary_base; }),
      double_flag<A>("attn-logit-softcapping", "attention scores become c tanh(s / c) (Gemma 2; 0: none)",
                     [cfg_of](A& a) -> auto& { return cfg_of(a).attn_logit_softcapping; }),
      double_flag<A>("final-logit-softcapping", "logits become c tanh(z / c) (Gemma 2; 0: none)",
                     [cfg_of](A& a) -> auto& { return cfg_of(a).final_logit_softcapping; }),
      int_flag<A>("window-attn-skip-freq", "with --window-size: every N-th layer attends to all keys (0: none)",
                  [cfg_of](A& a) -> auto& { return cfg_of(a).window_attn_skip_freq; }),
      switch_flag<A>("disable-bias-linear", "no biases in linear layers",
                     [cfg_of](A& a) -> auto& { return cfg_of(a).add_bias_linear; }, false),
      switch_flag<A>("add-qkv-bias", "biases on the q/k/v projections even with --disable-bias-linear (Qwen 2)",
                     [cfg_of](A& a) -> auto& { return cfg_of(a).add_qkv_bias; }),
      switch_flag<A>("qk-layernorm", "RMSNorm over each head's queries and keys before RoPE (Qwen 3)",
                     [cfg_of](A& a) -> auto& { return cfg_of(a).qk_layernorm; }),
      switch_flag<A>("qk-layernorm-full-width",
                     "with --qk-layernorm: one RMSNorm over all heads' queries and one over all keys (OLMo 2)",
                     [cfg_of](A& a) -> auto& { return cfg_of(a).qk_layernorm_full_width; }),
      int_flag<A>("window-size", "sliding-window attention: keys a query sees, itself included (0: full causal)",
                  [cfg_of](A& a) -> auto& { return cfg_of(a).window_size; }),
      string_flag<A>("hf-architecture",
                     "the Hugging Face class ckpt export --format hf writes (ckpt import records it; empty: the one "
                     "the model's options imply)",
                     [cfg_of](A& a) -> auto& { return cfg_of(a).hf_architecture; }),
  };
}

// The shape flags claw was born with (GPT-2, Llama, Mixtral; LoRA, MoE).
template <typename A, typename Get>
std::vector<Flag<A>> model_base_flags(Get cfg_of) {
  using F = Flag<A>;
  return {
      int_flag<A>("num-layers", "transformer blocks", [cfg_of](A& a) -> auto& { return cfg_of(a).num_layers; }),
      int_flag<A>("hidden-size", "model width", [cfg_of](A& a) -> auto& { return cfg_of(a).hidden_size; }),
      int_flag<A>("num-attention-heads", "query heads", [cfg_of](A& a) -> auto& { return cfg_of(a).num_attention_heads; }),
      int_flag<A>("num-query-groups", "key/value heads for grouped-query attention (0: one per head)",
                  [cfg_of](A& a) -> auto& { return cfg_of(a).num_query_groups; }),
      int_flag<A>("kv-channels", "head dimension (0: hidden-size / num-attention-heads)",
                  [cfg_of](A& a) -> auto& { return cfg_of(a).kv_channels; }),
      int_flag<A>("ffn-hidden-size", "MLP width (0: 4 x hidden-size)",
                  [cfg_of](A& a) -> auto& { return cfg_of(a).ffn_hidden_size; }),
      int_flag<A>("vocab-size", "vocabulary size before padding", [cfg_of](A& a) -> auto& { return cfg_of(a).vocab_size; }),
      int_flag<A>("make-vocab-size-divisible-by", "pad the vocabulary to a multiple of this",
                  [cfg_of](A& a) -> auto& { return cfg_of(a).make_vocab_size_divisible_by; }),
      int_flag<A>("max-position-embeddings", "longest sequence the model supports",
                  [cfg_of](A& a) -> auto& { return cfg_of(a).max_position_embeddings; }),
      F{"normalization", "LayerNorm or RMSNorm", false,
        [cfg_of](A& a, const std::string& v) {
          if (v == "LayerNorm") cfg_of(a).normalization = Norm::layernorm;
          else if (v == "RMSNorm") cfg_of(a).normalization = Norm::rmsnorm;
          else fail("--normalization '{}' is not one of: LayerNorm, RMSNorm", v);
        },
        [cfg_of](const A& a) { return std::string(to_string(cfg_of(const_cast<A&>(a)).normalization)); }, "{LayerNorm,RMSNorm}"},
      double_flag<A>("norm-epsilon", "epsilon of the norms", [cfg_of](A& a) -> auto& { return cfg_of(a).norm_epsilon; }),
      F{"position-embedding-type", "learned_absolute or rope", false,
        [cfg_of](A& a, const std::string& v) {
          if (v == "learned_absolute") cfg_of(a).position_embedding_type = Position::learned;
          else if (v == "rope") cfg_of(a).position_embedding_type = Position::rope;
          else fail("--position-embedding-type '{}' is not one of: learned_absolute, rope", v);
        },
        [cfg_of](const A& a) { return std::string(to_string(cfg_of(const_cast<A&>(a)).position_embedding_type)); },
        "{learned_absolute,rope}"},
      double_flag<A>("rotary-base", "RoPE theta", [cfg_of](A& a) -> auto& { return cfg_of(a).rotary_base; }),
      double_flag<A>("rotary-percent", "share of each head's dimensions RoPE rotates (partial_rotary_factor)",
                     [cfg_of](A& a) -> auto& { return cfg_of(a).rotary_percent; }),
      F{"swiglu", "use a SwiGLU MLP instead of GELU", true,
        [cfg_of](A& a, const std::string& v) {
          if (parse_bool("swiglu", v)) cfg_of(a).mlp = Mlp::swiglu;
          else if (cfg_of(a).mlp == Mlp::swiglu) cfg_of(a).mlp = Mlp::gelu;
        },
        [cfg_of](const A& a) { return std::string(cfg_of(const_cast<A&>(a)).mlp == Mlp::swiglu ? "true" : "false"); }},
      switch_flag<A>("untie-embeddings-and-output-weights", "separate output-layer weights",
                     [cfg_of](A& a) -> auto& { return cfg_of(a).untie_embeddings_and_output_weights; }),
      double_flag<A>("hidden-dropout", "dropout after embedding, attention and MLP outputs",
                     [cfg_of](A& a) -> auto& { return cfg_of(a).hidden_dropout; }),
      double_flag<A>("init-method-std", "std of the normal initialisation",
                     [cfg_of](A& a) -> auto& { return cfg_of(a).init_method_std; }),
      int_flag<A>("lora-rank", "LoRA adapters of this rank on the target layers; only they train (0: none)",
                  [cfg_of](A& a) -> auto& { return cfg_of(a).lora.rank; }),
      double_flag<A>("lora-alpha", "LoRA scale alpha / rank (alpha / sqrt(rank) with --lora-rslora)",
                     [cfg_of](A& a) -> auto& { return cfg_of(a).lora.alpha; }),
      double_flag<A>("lora-dropout", "dropout on the LoRA adapters' input",
                     [cfg_of](A& a) -> auto& { return cfg_of(a).lora.dropout; }),
      F{"lora-target-modules",
        "layers with adapters: all-linear, Megatron's linear_qkv linear_proj linear_fc1 linear_fc2, or Hugging Face "
        "module names (q_proj ... down_proj; GPT-2: c_attn c_proj c_fc; Mixtral's experts: w1 w3 w2, each expert "
        "its own adapter; routers have none); space- or comma-separated",
        false, [cfg_of](A& a, const std::string& v) { cfg_of(a).lora.target_modules = split_names(v); },
        [cfg_of](const A& a) { return join_names(cfg_of(const_cast<A&>(a)).lora.target_modules); },
        "NAME[,NAME...]"},
      F{"lora-modules-to-save",
        "base parameters that train beside the adapters (glob patterns over canonical names, e.g. "
        "'embedding.word_embeddings.*': the tied embeddings and output layer); PEFT's modules_to_save",
        false, [cfg_of](A& a, const std::string& v) { cfg_of(a).lora.modules_to_save = split_names(v); },
        [cfg_of](const A& a) { return join_names(cfg_of(const_cast<A&>(a)).lora.modules_to_save); },
        "PATTERN[,PATTERN...]"},
      switch_flag<A>("lora-rslora", "rank-stabilised LoRA: scale alpha / sqrt(rank)",
                     [cfg_of](A& a) -> auto& { return cfg_of(a).lora.rslora; }),
      int_flag<A>("num-experts", "experts of each MoE layer (0: dense MLPs)",
                  [cfg_of](A& a) -> auto& { return cfg_of(a).moe.num_experts; }),
      int_flag<A>("moe-router-topk", "experts each token runs",
                  [cfg_of](A& a) -> auto& { return cfg_of(a).moe.router_topk; }),
      string_flag<A>("moe-router-score-function", "softmax (over the chosen k logits) or sigmoid",
                     [cfg_of](A& a) -> auto& { return cfg_of(a).moe.router_score_function; }),
      double_flag<A>("moe-aux-loss-coeff", "load-balancing loss: coeff x E x sum_i f_i x P_i",
                     [cfg_of](A& a) -> auto& { return cfg_of(a).moe.aux_loss_coeff; }),
      double_flag<A>("moe-z-loss-coeff", "router z-loss: coeff x mean logsumexp(logits)^2",
                     [cfg_of](A& a) -> auto& { return cfg_of(a).moe.z_loss_coeff; }),
      switch_flag<A>("moe-router-enable-expert-bias",
                     "balance by a per-expert bias that changes only which experts are chosen (no auxiliary loss)",
                     [cfg_of](A& a) -> auto& { return cfg_of(a).moe.router_enable_expert_bias; }),
      double_flag<A>("moe-router-bias-update-rate", "the expert bias's step toward the mean load, per step",
                     [cfg_of](A& a) -> auto& { return cfg_of(a).moe.router_bias_update_rate; }),
      double_flag<A>("moe-expert-capacity-factor", "tokens an expert takes: N k / E x this (0: dropless)",
                     [cfg_of](A& a) -> auto& { return cfg_of(a).moe.expert_capacity_factor; }),
      string_flag<A>("moe-token-drop-policy", "over capacity, keep the largest weights (probs) or the first tokens "
                     "(position)",
                     [cfg_of](A& a) -> auto& { return cfg_of(a).moe.token_drop_policy; }),
      int_flag<A>("moe-ffn-hidden-size", "an expert's FFN width (0: --ffn-hidden-size)",
                  [cfg_of](A& a) -> auto& { return cfg_of(a).moe.ffn_hidden_size; }),
      int_flag<A>("moe-shared-expert-intermediate-size", "width of the shared expert every token runs (0: none)",
                  [cfg_of](A& a) -> auto& { return cfg_of(a).moe.shared_expert_intermediate_size; }),
      string_flag<A>("moe-layer-freq", "k: layers 0, k, 2k, ... have experts; or one 0/1 per layer, comma-separated",
                     [cfg_of](A& a) -> auto& { return cfg_of(a).moe.layer_freq; })
  };
}

// cfg_of: Args& -> ModelConfig& (the config the flags write).
// DeepSeek-V3's options: multi-head latent attention and the group-limited router.
template <typename A, typename Get>
std::vector<Flag<A>> model_deepseek_flags(Get cfg_of) {
  return {
      switch_flag<A>("multi-latent-attention", "keys and values from one compressed latent per token (DeepSeek-V2/V3)",
                     [cfg_of](A& a) -> auto& { return cfg_of(a).mla.enabled; }),
      int_flag<A>("q-lora-rank", "MLA: queries through a bottleneck of this rank with its RMSNorm (0: none)",
                  [cfg_of](A& a) -> auto& { return cfg_of(a).mla.q_lora_rank; }),
      int_flag<A>("kv-lora-rank", "MLA: the latent's width, what a token's keys and values are made from",
                  [cfg_of](A& a) -> auto& { return cfg_of(a).mla.kv_lora_rank; }),
      int_flag<A>("qk-head-dim", "MLA: a head's query/key dimensions without RoPE",
                  [cfg_of](A& a) -> auto& { return cfg_of(a).mla.qk_head_dim; }),
      int_flag<A>("qk-pos-emb-head-dim", "MLA: a head's query/key dimensions RoPE rotates (the key's shared by heads)",
                  [cfg_of](A& a) -> auto& { return cfg_of(a).mla.qk_pos_emb_head_dim; }),
      int_flag<A>("v-head-dim", "MLA: a head's value dimensions",
                  [cfg_of](A& a) -> auto& { return cfg_of(a).mla.v_head_dim; }),
      switch_flag<A>("rotary-interleaved", "RoPE turns neighbouring dimension pairs (2i, 2i+1) (DeepSeek-V3's "
                     "rope_interleave; with --multi-latent-attention)",
                     [cfg_of](A& a) -> auto& { return cfg_of(a).rotary_interleaved; }),
      int_flag<A>("moe-router-num-groups", "experts form this many groups; a token chooses among its best groups "
                  "(DeepSeek-V3's n_group; 0: none)",
                  [cfg_of](A& a) -> auto& { return cfg_of(a).moe.router_num_groups; }),
      int_flag<A>("moe-router-group-topk", "groups a token chooses its experts from (DeepSeek-V3's topk_group)",
                  [cfg_of](A& a) -> auto& { return cfg_of(a).moe.router_group_topk; }),
      double_flag<A>("moe-router-topk-scaling-factor", "the routed experts' weights times this "
                     "(DeepSeek-V3's routed_scaling_factor)",
                     [cfg_of](A& a) -> auto& { return cfg_of(a).moe.router_topk_scaling_factor; }),
  };
}

template <typename A, typename Get>
std::vector<Flag<A>> model_shape_flags(Get cfg_of) {
  return concat(concat(model_base_flags<A>(cfg_of), model_family_flags<A>(cfg_of)), model_deepseek_flags<A>(cfg_of));
}

// The FP8 flags (Megatron's names): how the linear layers compute, not the
// model's shape, so a checkpoint's "model" section does not carry them.
template <typename A, typename Get>
std::vector<Flag<A>> fp8_flags(Get cfg_of) {
  return {
      string_flag<A>("fp8-format", "FP8 linear layers: e4m3, or hybrid (E4M3 forward, E5M2 gradients); off if unset",
                     [cfg_of](A& a) -> auto& { return cfg_of(a).fp8.format; }),
      string_flag<A>("fp8-recipe", "delayed (scales from the amax history), tensorwise (current amax), mxfp8 "
                     "(blocks of 32, E8M0 scales), blockwise (1x128 and 128x128, power-of-two scales) or nvfp4",
                     [cfg_of](A& a) -> auto& { return cfg_of(a).fp8.recipe; }),
      Flag<A>{"fp4", "NVFP4 linear layers: E2M1 in blocks of 16 with E4M3 scales (--fp8-recipe nvfp4)", true,
              [cfg_of](A& a, const std::string& v) {
                if (!parse_bool("fp4", v)) return;
                cfg_of(a).fp8.recipe = "nvfp4";
                if (cfg_of(a).fp8.format.empty()) cfg_of(a).fp8.format = "hybrid";
              },
              [cfg_of](const A& a) {
                return std::string(cfg_of(const_cast<A&>(a)).fp8.recipe == "nvfp4" ? "true" : "false");
              }},
      int_flag<A>("fp8-amax-history-len", "steps of amax history (delayed scaling)",
                  [cfg_of](A& a) -> auto& { return cfg_of(a).fp8.amax_history_len; }),
      string_flag<A>("fp8-amax-compute-algo", "max (over the history) or most_recent",
                     [cfg_of](A& a) -> auto& { return cfg_of(a).fp8.amax_compute_algo; }),
      int_flag<A>("fp8-margin", "scales are divided by 2^margin", [cfg_of](A& a) -> auto& { return cfg_of(a).fp8.margin; }),
      string_flag<A>("fp8-layer-selection", "manual (every block, or --first-last-layers-bf16), or auto: calibrate "
                     "on the first batches and keep the blocks FP8 moves most out of FP8",
                     [cfg_of](A& a) -> auto& { return cfg_of(a).fp8.layer_selection; }),
      int_flag<A>("fp8-bf16-layer-budget", "blocks --fp8-layer-selection auto keeps out of FP8",
                  [cfg_of](A& a) -> auto& { return cfg_of(a).fp8.bf16_layer_budget; }),
      int_flag<A>("fp8-calibration-batches", "global batches the auto selection measures on",
                  [cfg_of](A& a) -> auto& { return cfg_of(a).fp8.calibration_batches; }),
      switch_flag<A>("first-last-layers-bf16", "keep the first and last transformer blocks out of FP8",
                     [cfg_of](A& a) -> auto& { return cfg_of(a).fp8.first_last_layers_bf16; }),
      int_flag<A>("num-layers-at-start-in-bf16", "blocks at the start kept out of FP8 (--first-last-layers-bf16)",
                  [cfg_of](A& a) -> auto& { return cfg_of(a).fp8.num_layers_at_start_in_bf16; }),
      int_flag<A>("num-layers-at-end-in-bf16", "blocks at the end kept out of FP8 (--first-last-layers-bf16)",
                  [cfg_of](A& a) -> auto& { return cfg_of(a).fp8.num_layers_at_end_in_bf16; }),
  };
}

// A model's shape as {flag: value} (what a checkpoint records in its "model"
// section, with the preset name under "model"), and back.
inline const std::vector<Flag<ModelConfig>>& model_config_flags() {
  using M = ModelConfig;
  static const std::vector<Flag<M>> flags = model_shape_flags<M>([](M& m) -> M& { return m; });
  return flags;
}
inline nlohmann::json model_flags_json(const ModelConfig& m) {
  nlohmann::json j = {{"model", m.name}};
  for (const auto& f : model_config_flags()) j[f.name] = f.get(m);
  return j;
}
// Model flags added after checkpoints were first written: a checkpoint
// without one has the flag's default (the option off).
inline bool added_after_first_checkpoints(const std::string& name) {
  static const std::set<std::string> later = {
      "add-qkv-bias",       "qk-layernorm",          "qk-layernorm-full-width", "window-size", "hf-architecture",
      "rotary-percent",
      "geglu",              "apply-layernorm-1p",    "post-sublayer-norm", "no-pre-sublayer-norm", "scale-embedding",
      "softmax-scale",      "local-rotary-base",     "attn-logit-softcapping", "final-logit-softcapping",
      "window-attn-skip-freq", "multi-latent-attention", "q-lora-rank", "kv-lora-rank", "qk-head-dim",
      "qk-pos-emb-head-dim", "v-head-dim", "rotary-interleaved", "moe-router-num-groups", "moe-router-group-topk",
      "moe-router-topk-scaling-factor"};
  return later.count(name) > 0 || name.starts_with("rope-scaling-");
}

// `context` names the source in errors (e.g. "checkpoint DIR").
inline ModelConfig model_from_flags_json(const nlohmann::json& j, const std::string& context) {
  if (!j.is_object() || j.empty()) fail("{}: no model configuration recorded", context);
  ModelConfig m;
  if (j.contains("model") && j["model"].is_string()) m.name = j["model"].get<std::string>();
  for (const auto& f : model_config_flags()) {
    if (!j.contains(f.name)) {
      if (f.name.starts_with("lora-")) continue;  // recorded before adapters existed: none
      if (added_after_first_checkpoints(f.name)) continue;  // recorded before they existed: off
      fail("{}: the model configuration has no '{}'", context, f.name);
    }
    if (!j[f.name].is_string()) fail("{}: the model configuration's '{}' is not a string", context, f.name);
    f.set(m, j[f.name].get<std::string>());
  }
  return m;
}

// The model flags that define the network a checkpoint holds (its tensors'
// shapes and what they compute). The others (dropout, initialisation, LoRA,
// MoE's losses and capacity, FP8) are choices of the run that trains it.
inline bool is_architecture_flag(const std::string& name) {
  static const std::set<std::string> arch = {
      "num-layers", "hidden-size", "num-attention-heads", "num-query-groups", "kv-channels", "ffn-hidden-size",
      "vocab-size", "make-vocab-size-divisible-by", "max-position-embeddings", "normalization", "norm-epsilon",
      "position-embedding-type", "rotary-base", "rotary-percent", "swiglu", "disable-bias-linear", "add-qkv-bias", "qk-layernorm", "qk-layernorm-full-width", "window-size", "rope-scaling-type", "rope-scaling-factor",
      "geglu", "apply-layernorm-1p", "post-sublayer-norm", "no-pre-sublayer-norm", "scale-embedding", "softmax-scale", "local-rotary-base",
      "attn-logit-softcapping", "final-logit-softcapping", "window-attn-skip-freq",
      "rope-scaling-low-freq-factor", "rope-scaling-high-freq-factor", "rope-scaling-original-max-position-embeddings",
      "rope-scaling-beta-fast", "rope-scaling-beta-slow", "rope-scaling-attention-factor", "rope-scaling-mscale",
      "rope-scaling-mscale-all-dim", "rope-scaling-truncate", "rope-scaling-short-factor", "rope-scaling-long-factor",
      "untie-embeddings-and-output-weights", "num-experts", "moe-router-topk", "moe-router-score-function",
      "moe-router-enable-expert-bias", "moe-ffn-hidden-size", "moe-shared-expert-intermediate-size",
      "moe-layer-freq", "multi-latent-attention", "q-lora-rank", "kv-lora-rank", "qk-head-dim", "qk-pos-emb-head-dim",
      "v-head-dim", "rotary-interleaved", "moe-router-num-groups", "moe-router-group-topk",
      "moe-router-topk-scaling-factor"};
  return arch.count(name) > 0;
}

// The model of a run that starts from weights (a checkpoint's recorded
// model, a Hugging Face config.json): `given` (what the preset, config file
// and flags made) takes the architecture of `weights`; each other model flag
// keeps its given value where `was_given(name)` says the user set it, else
// takes the weights' (a resumed run trains as it did). An architecture flag
// the user set, or the preset's when `preset` is named, must agree with the
// weights: the error names both values. Fields no model flag covers (--bf16's
// product dtype) stay as given.
template <typename WasGiven>
ModelConfig model_over_weights(const ModelConfig& weights, const ModelConfig& given,
                                      WasGiven was_given, const std::string& preset, const std::string& source) {
  ModelConfig m = given;
  for (const auto& f : model_config_flags()) {
    const std::string have = f.get(weights);
    if (is_architecture_flag(f.name)) {
      const std::string want = f.get(given);
      if (want != have && was_given(f.name))
        fail("--{} {} disagrees with {}, whose model has --{} {}: drop the flag (the model's shape comes from the "
             "weights it starts from)",
             f.name, want, source, f.name, have);
      if (want != have && !preset.empty())
        fail("--model {} has --{} {}, but {} holds a model with --{} {}: drop --model (the model's shape comes from "
             "the weights it starts from)",
             preset, f.name, want, source, f.name, have);
    } else if (was_given(f.name)) {
      continue;
    }
    f.set(m, have);
  }
  m.name = weights.name;
  return m;
}

}  // namespace claw::model
