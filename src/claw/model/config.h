// ModelConfig: the shape of a decoder-only transformer, as a spec over closed
// choices (STYLE.md #13). Field names follow Megatron's flags
// (--num-layers, --hidden-size, --num-query-groups, ...); validate() names
// the flag to fix.
//
// Presets (model_preset): gpt2-tiny, gpt2-124m, llama-tiny, mixtral-tiny,
// deepseek-tiny, and the full shapes of llama3-8b/70b/405b, gpt3-175b,
// mixtral-8x7b, deepseek-v3, qwen2.5-7b/72b, mistral-7b and phi-3-mini (for
// planning; they need not fit on one CPU).
#pragma once

#include <cstdint>
#include <string>

#include "claw/core/dtype.h"
#include <string_view>
#include <vector>

namespace claw::model {

enum class Norm { layernorm, rmsnorm };
enum class Position { learned, rope };
enum class Mlp { gelu, swiglu, geglu };

std::string_view to_string(Norm n);      // "LayerNorm" / "RMSNorm" (Megatron's spelling)
std::string_view to_string(Position p);  // "learned_absolute" / "rope"
std::string_view to_string(Mlp m);       // "gelu" / "swiglu" / "geglu"

// Bounds of validate(): far past any published model, and small enough that
// every count derived from a shape fits in 64 bits.
inline constexpr int64_t kMaxLayers = 10000;
inline constexpr int64_t kMaxWidth = int64_t{1} << 20;       // hidden size, heads x head dim
inline constexpr int64_t kMaxVocab = (int64_t{1} << 31) - 1;  // token ids are int32
inline constexpr int64_t kMaxPositions = int64_t{1} << 24;

// LoRA adapters (Hu et al. 2021) on linear layers: y = x W^T + b +
// s (dropout(x) A^T) B^T with A [r, in], B [out, r], s = alpha / r
// (rsLoRA: alpha / sqrt(r)); A starts as PEFT's Kaiming-uniform (a = sqrt(5):
// U(-1/sqrt(in), 1/sqrt(in))), B at zero. With adapters on, only they train.
// Targets name layers as Megatron does (linear_qkv, linear_proj, linear_fc1,
// linear_fc2), as Hugging Face modules do (q_proj, k_proj, v_proj, o_proj,
// gate_proj, up_proj, down_proj; GPT-2's c_attn, c_proj, c_fc), or
// all-linear (every linear layer but the output layer).
struct LoraConfig {
  int64_t rank = 0;                 // --lora-rank (0: no adapters)
  double alpha = 8.0;               // --lora-alpha
  double dropout = 0.0;             // --lora-dropout: on the adapter's input
  std::vector<std::string> target_modules{"all-linear"};  // --lora-target-modules
  bool rslora = false;              // --lora-rslora: s = alpha / sqrt(r)
  // --lora-modules-to-save: glob patterns over canonical parameter names
  // that train beside the adapters (PEFT's modules_to_save; e.g. the tied
  // word embeddings, which are also the output layer).
  std::vector<std::string> modules_to_save;
  bool enabled() const { return rank > 0; }
  double scale() const;
  // Whether the linear layer named `megatron` (linear_qkv, ...) whose
  // Hugging Face module is `hf` (q_proj, c_attn, ...) gets an adapter.
  bool targets(std::string_view megatron, std::string_view hf) const;
};

// Mixture of Experts (Megatron-Core's --num-experts / --moe-* flags): the
// MLP of a MoE layer is a router and E expert FFNs of which each token runs
// its top k (kernels/cpu/moe.h says how they are chosen and weighted), plus
// an optional shared expert every token runs.
struct MoeConfig {
  int64_t num_experts = 0;                    // --num-experts (0: dense MLPs)
  int64_t router_topk = 2;                    // --moe-router-topk
  std::string router_score_function = "softmax";  // --moe-router-score-function softmax|sigmoid
  double aux_loss_coeff = 0.0;                // --moe-aux-loss-coeff: load balancing, coeff E sum f_i P_i
  double z_loss_coeff = 0.0;                  // --moe-z-loss-coeff: coeff mean logsumexp(logits)^2
  bool router_enable_expert_bias = false;     // --moe-router-enable-expert-bias (aux-loss-free balancing)
  double router_bias_update_rate = 1e-3;      // --moe-router-bias-update-rate
  double expert_capacity_factor = 0.0;        // --moe-expert-capacity-factor (0: dropless)
  std::string token_drop_policy = "probs";    // --moe-token-drop-policy probs|position
  int64_t ffn_hidden_size = 0;                // --moe-ffn-hidden-size: an expert's width (0: --ffn-hidden-size)
  int64_t shared_expert_intermediate_size = 0;  // --moe-shared-expert-intermediate-size (0: none)
  // --moe-layer-freq: k (layers 0, k, 2k, ... are MoE) or one 0/1 per layer,
  // comma-separated (Megatron's list form).
  std::string layer_freq = "1";
  // DeepSeek-V3's group-limited routing (kernels::MoeTopK): experts in
  // --moe-router-num-groups groups, a token's k chosen from its
  // --moe-router-group-topk best; the weights times
  // --moe-router-topk-scaling-factor.
  int64_t router_num_groups = 0;
  int64_t router_group_topk = 0;
  double router_topk_scaling_factor = 1.0;
  bool enabled() const { return num_experts > 0; }
  // Whether layer l of `num_layers` has experts (false for every layer when disabled).
  bool is_moe_layer(int64_t l, int64_t num_layers) const;
  int64_t num_moe_layers(int64_t num_layers) const;
};

// Multi-head latent attention (DeepSeek-V2/V3; Megatron's
// --multi-latent-attention). Each token's keys and values come from one
// latent c = RMSNorm(x W_kva[:kv_lora_rank]) of --kv-lora-rank values:
// k_h = [c W_kvb_h^k | k_rope], v_h = c W_kvb_h^v, where k_rope, the
// rotated part, is one --qk-pos-emb-head-dim projection of x shared by the
// heads; queries are x W_q, or RMSNorm(x W_qa) W_qb through a --q-lora-rank
// bottleneck, each head [--qk-head-dim | --qk-pos-emb-head-dim]. The
// attention itself is the usual kernel's on heads of qk + pos dimensions,
// values zero-padded to that width (model/mla.h).
struct MlaConfig {
  bool enabled = false;               // --multi-latent-attention
  int64_t q_lora_rank = 0;            // --q-lora-rank (0: one query projection)
  int64_t kv_lora_rank = 512;         // --kv-lora-rank
  int64_t qk_head_dim = 128;          // --qk-head-dim: a head's query/key dimensions RoPE leaves alone
  int64_t qk_pos_emb_head_dim = 64;   // --qk-pos-emb-head-dim: the dimensions it rotates
  int64_t v_head_dim = 128;           // --v-head-dim
};

// RoPE frequencies stretched for contexts longer than the model was trained
// on (Hugging Face's rope_scaling; the flags --rope-scaling-*):
//   linear  every inverse frequency / factor (position interpolation)
//   llama3  Llama 3.1's: wavelengths above original / low_freq_factor
//           divided by factor, below original / high_freq_factor kept,
//           interpolated smoothly between
//   longrope Phi-3's (LongRoPE, Ding et al. 2024): frequency i divided by
//           short_factor[i], or by long_factor[i] for the tokens of a
//           sequence longer than the original context (Hugging Face's rule:
//           a sequence's length so far, this forward's tokens included);
//           cos and sin times sqrt(1 + ln factor / ln original), factor =
//           max_position_embeddings / original
struct RopeScaling {
  std::string type;                  // --rope-scaling-type: "" (none), linear, llama3, yarn, longrope
  double factor = 8.0;               // --rope-scaling-factor
  double low_freq_factor = 1.0;      // --rope-scaling-low-freq-factor (llama3)
  double high_freq_factor = 4.0;     // --rope-scaling-high-freq-factor (llama3)
  int64_t original_max_position_embeddings = 8192;  // --rope-scaling-original-max-position-embeddings (llama3, yarn)
  // YaRN (Peng et al. 2023; Hugging Face's rope_type "yarn"): frequencies
  // that turn fewer than beta_slow times over the original context are
  // interpolated by the factor, more than beta_fast kept, those between
  // ramped; cos and sin are multiplied by the attention factor (0: derived,
  // 0.1 ln(factor) + 1, or DeepSeek's mscale / mscale_all_dim ratio).
  double beta_fast = 32;             // --rope-scaling-beta-fast
  double beta_slow = 1;              // --rope-scaling-beta-slow
  double attention_factor = 0;       // --rope-scaling-attention-factor
  double mscale = 0;                 // --rope-scaling-mscale
  double mscale_all_dim = 0;         // --rope-scaling-mscale-all-dim
  bool truncate = true;              // --rope-scaling-truncate: the ramp's ends rounded out to whole dimensions
  std::vector<double> short_factor;  // --rope-scaling-short-factor (longrope: one per rotated pair)
  std::vector<double> long_factor;   // --rope-scaling-long-factor
  bool enabled() const { return !type.empty(); }
  bool longrope() const { return type == "longrope"; }
  // cos and sin's multiplier: YaRN's or LongRoPE's attention factor, else 1.
  double table_scale() const;
};

// FP8 and block-scaled formats for the transformer blocks' linear layers
// (model/fp8.h): Megatron's --fp8-* flags. Off when recipe is empty.
struct Fp8Config {
  std::string format;                 // --fp8-format e4m3|hybrid (hybrid: E4M3 forward, E5M2 gradients); "" = off
  std::string recipe = "delayed";     // --fp8-recipe delayed|tensorwise|mxfp8|blockwise; --fp4: nvfp4
  int64_t amax_history_len = 1;       // --fp8-amax-history-len (delayed)
  std::string amax_compute_algo = "most_recent";  // --fp8-amax-compute-algo max|most_recent (delayed)
  int64_t margin = 0;                 // --fp8-margin: scales divided by 2^margin (delayed)
  bool first_last_layers_bf16 = false;  // --first-last-layers-bf16: the first and last block stay in 16-bit
  int64_t num_layers_at_start_in_bf16 = 1;  // --num-layers-at-start-in-bf16
  int64_t num_layers_at_end_in_bf16 = 1;    // --num-layers-at-end-in-bf16
  uint64_t seed = 0;                  // NVFP4's stochastic rounding (the run's --seed)
  std::string layer_selection = "manual";  // --fp8-layer-selection manual|auto (calibrated per block)
  int64_t bf16_layer_budget = 1;      // --fp8-bf16-layer-budget: blocks auto keeps out of FP8
  int64_t calibration_batches = 2;    // --fp8-calibration-batches: global batches auto measures on
  std::vector<int64_t> high_precision_layers;  // blocks kept out of FP8 (auto's choice, checkpointed)
  bool enabled() const { return !format.empty(); }
  // Whether transformer block l of num_layers runs its linear layers in FP8
  // (auto: every block holds FP8 state; the calibration turns some off).
  bool layer_in_fp8(int64_t l, int64_t num_layers) const;
  // Throws claw::Error naming the flag.
  void validate() const;
};

struct ModelConfig {
  std::string name = "custom";             // preset it came from, for logs
  int64_t num_layers = 4;                  // --num-layers: transformer blocks (L)
  int64_t hidden_size = 256;               // --hidden-size: model width (C)
  int64_t num_attention_heads = 4;         // --num-attention-heads: query heads (H)
  int64_t num_query_groups = 0;            // --num-query-groups: key/value heads (G); 0 = H (MHA)
  int64_t kv_channels = 0;                 // --kv-channels: head dim (D); 0 = C / H
  int64_t ffn_hidden_size = 0;             // --ffn-hidden-size: MLP width (F); 0 = 4C
  int64_t vocab_size = 50257;              // --vocab-size: real vocabulary (V)
  int64_t make_vocab_size_divisible_by = 128;  // --make-vocab-size-divisible-by: pad V to Vp
  int64_t max_position_embeddings = 1024;  // --max-position-embeddings: longest sequence
  Norm normalization = Norm::layernorm;    // --normalization LayerNorm|RMSNorm
  double norm_epsilon = 1e-5;              // --norm-epsilon
  Position position_embedding_type = Position::learned;  // --position-embedding-type learned_absolute|rope
  double rotary_base = 10000.0;            // --rotary-base: RoPE theta
  // --rotary-percent: the share of each head's dimensions RoPE rotates (the
  // first head_dim x percent; Hugging Face's partial_rotary_factor).
  double rotary_percent = 1.0;
  // --rotary-interleaved: RoPE turns the pairs of neighbouring dimensions
  // (2i, 2i + 1), not (i, i + D/2) (GPT-J's layout; DeepSeek-V3's
  // rope_interleave). With --multi-latent-attention only, for now.
  bool rotary_interleaved = false;
  MlaConfig mla;                           // --multi-latent-attention, --*-lora-rank, ...
  RopeScaling rope_scaling;                // --rope-scaling-*: stretched frequencies (Llama 3.1's)
  Mlp mlp = Mlp::gelu;                     // --swiglu selects SwiGLU, --geglu GeGLU (tanh GELU: Gemma)
  bool add_bias_linear = true;             // --disable-bias-linear turns biases off
  // --add-qkv-bias: biases on the query, key and value projections even
  // with --disable-bias-linear (Qwen 2's attention).
  bool add_qkv_bias = false;
  // --qk-layernorm: RMSNorm over each head's query and key (one weight of
  // head-dim elements each, shared by the heads), after the projections and
  // before RoPE (Qwen 3).
  bool qk_layernorm = false;
  // --qk-layernorm-full-width: with --qk-layernorm, one RMSNorm over all the
  // heads' queries of a token (a weight of heads x head-dim) and one over all
  // its keys (KV groups x head-dim), not one per head (OLMo 2). Under tensor
  // parallelism each rank holds its heads' slice of the weights and the sums
  // of squares are summed over the group.
  bool qk_layernorm_full_width = false;
  // --apply-layernorm-1p: every norm scales by (1 + weight), its weight
  // starting at 0 (Gemma's RMSNorm; the q/k norms too).
  bool apply_layernorm_1p = false;
  // --post-sublayer-norm: a norm on the attention's and the MLP's outputs
  // before each residual add (Gemma 2/3's post_attention_layernorm and
  // post_feedforward_layernorm), beside the usual ones on their inputs.
  bool post_sublayer_norm = false;
  // --no-pre-sublayer-norm: with --post-sublayer-norm, no norm on the
  // sublayers' inputs: x + norm(attention(x)) (OLMo 2's order).
  bool pre_sublayer_norm = true;
  // --scale-embedding: the word embeddings times sqrt(hidden size) (Gemma).
  bool scale_embedding = false;
  // --softmax-scale: the attention scores' scale (0: 1 / sqrt(head dim));
  // Gemma's query_pre_attn_scalar^-1/2.
  double softmax_scale = 0;
  // --local-rotary-base: RoPE theta of the windowed layers, unscaled (0:
  // --rotary-base and --rope-scaling-* as every layer's; Gemma 3's 10000).
  double local_rotary_base = 0;
  // --attn-logit-softcapping / --final-logit-softcapping c: scores or
  // logits become c tanh(x / c) (Gemma 2); 0 = none. In every CPU
  // attention kernel (kernels/cpu/score_scale.h) and the output layer.
  double attn_logit_softcapping = 0;
  double final_logit_softcapping = 0;
  // --window-attn-skip-freq N: with --window-size, every N-th layer (l + 1
  // divisible by N) attends to all keys (Gemma 2: 2, Gemma 3: 6); 0: none.
  int64_t window_attn_skip_freq = 0;
  // --window-size W: sliding-window attention, each query sees itself and
  // the W - 1 keys before it (Hugging Face's sliding_window; Mistral's
  // 4096); 0 = full causal attention.
  int64_t window_size = 0;
  bool untie_embeddings_and_output_weights = false;  // --untie-embeddings-and-output-weights
  double hidden_dropout = 0.0;             // --hidden-dropout: after embedding, attention and MLP outputs
  double init_method_std = 0.02;           // --init-method-std: N(0, std) init; output layers / sqrt(2L)
  // --hf-architecture: the Hugging Face class `ckpt export --format hf` writes
  // (LlamaForCausalLM, MistralForCausalLM, Phi3ForCausalLM, ...; `ckpt import`
  // records the one it read). Empty: the class the model's options imply.
  // Phi3ForCausalLM also names the tensors: fused qkv_proj and gate_up_proj.
  std::string hf_architecture;
  LoraConfig lora;                         // --lora-*: adapters on the linear layers
  MoeConfig moe;                           // --num-experts, --moe-*: Mixture-of-Experts layers
  Fp8Config fp8;                           // --fp8-*: FP8 linear layers (a training choice, not a shape)
  // --bf16 / --fp16: the linear layers multiply 16-bit operands (fp32
  // accumulation; parameters and the rest stay fp32).
  DType gemm_dtype = DType::f32;
  // --bf16 / --fp16: the blocks' large saved activations (MoE experts' too) are
  // 16-bit values of gemm_dtype, rounded where they are made (so forward and
  // backward see the same values) and kept in 16 bits between the passes
  // (Activations::packed); f32: none.
  DType activation_dtype() const {
    return gemm_dtype == DType::bf16 || gemm_dtype == DType::f16 ? gemm_dtype : DType::f32;
  }
  bool half_activations() const { return activation_dtype() != DType::f32; }

  // Whether the q/k/v projections have biases.
  bool qkv_bias() const { return add_bias_linear || add_qkv_bias; }
  // Keys a query of layer l sees at most, itself included (0: all before it).
  int64_t layer_window(int64_t l) const {
    return window_attn_skip_freq > 0 && (l + 1) % window_attn_skip_freq == 0 ? 0 : window_size;
  }
  bool gated_mlp() const { return mlp != Mlp::gelu; }
  // The attention scores' scale: --softmax-scale, or 1 / sqrt(head dim)
  // (MLA under YaRN with --rope-scaling-mscale-all-dim: times that mscale
  // squared, as DeepSeek-V3 has it).
  double attention_scale() const;
  // A head's query/key width (MLA: --qk-head-dim + --qk-pos-emb-head-dim).
  int64_t head_dim() const {
    if (mla.enabled) return mla.qk_head_dim + mla.qk_pos_emb_head_dim;
    return kv_channels > 0 ? kv_channels : hidden_size / num_attention_heads;
  }
  // A KV cache head's width: head_dim, or MLA's latent and rotated key part
  // (--kv-lora-rank + --qk-pos-emb-head-dim; the caches hold the absorbed
  // form's one head, model/mla.h).
  int64_t cache_head_dim() const { return mla.enabled ? mla.kv_lora_rank + mla.qk_pos_emb_head_dim : head_dim(); }
  // A head's value width, the output projection's input per head (MLA: --v-head-dim).
  int64_t value_dim() const { return mla.enabled ? mla.v_head_dim : head_dim(); }
  // The dimensions of a head RoPE rotates: head_dim x --rotary-percent,
  // rounded down (as transformers does); MLA's --qk-pos-emb-head-dim.
  int64_t rotary_dim() const {
    if (mla.enabled) return mla.qk_pos_emb_head_dim;
    return static_cast<int64_t>(static_cast<double>(head_dim()) * rotary_percent);
  }
  // Key/value heads (MLA: one per query head, made from the shared latent).
  int64_t kv_heads() const {
    if (mla.enabled) return num_attention_heads;
    return num_query_groups > 0 ? num_query_groups : num_attention_heads;
  }
  int64_t ffn() const { return ffn_hidden_size > 0 ? ffn_hidden_size : 4 * hidden_size; }
  int64_t moe_ffn() const { return moe.ffn_hidden_size > 0 ? moe.ffn_hidden_size : ffn(); }
  // V padded to a multiple of --make-vocab-size-divisible-by x tp (Megatron
  // pads for the tensor-parallel size too, so each rank's slice is a multiple).
  int64_t padded_vocab_size(int tp = 1) const;
  bool tied() const { return !untie_embeddings_and_output_weights; }

  // Throws claw::Error naming the offending flag and what would be valid.
  void validate() const;

  // Parameter count (padded vocabulary included, as allocated).
  int64_t num_params() const;
  // A layer's attention parameters (projections, their biases and norms).
  int64_t attention_params() const;
  // A MoE layer's MLP: router (and expert bias), experts, shared expert;
  // `active`: the router, k experts and the shared expert (what a token runs).
  int64_t moe_ffn_params(bool active) const;
  // Parameters that take part in matmuls: everything but the input embedding
  // lookup tables (the LM head counts, tied or not), norms included (a
  // rounding error). The N of the MFU formula.
  int64_t num_matmul_params() const;
  // Model FLOPs per token for a training step at sequence length T, PaLM
  // appendix B: 6N + 12 L H Q T (N = num_matmul_params, Q = head dim); a
  // layer with a sliding window of W counts min(T, W) for its T.
  double flops_per_token(int64_t seq_length) const;
};

// layer_window(l) of every layer.
std::vector<int64_t> layer_windows(const ModelConfig& cfg);

// Returns a preset; throws claw::Error listing the valid names.
ModelConfig model_preset(std::string_view name);
std::vector<std::string> preset_names();

}  // namespace claw::model
