#include "claw/model/config.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "claw/core/error.h"
#include "claw/model/hf_names.h"
#include "claw/kernels/cpu/paged_attention.h"

namespace claw::model {

std::string_view to_string(Norm n) { return n == Norm::layernorm ? "LayerNorm" : "RMSNorm"; }
std::string_view to_string(Position p) { return p == Position::learned ? "learned_absolute" : "rope"; }
std::string_view to_string(Mlp m) { return m == Mlp::gelu ? "gelu" : m == Mlp::swiglu ? "swiglu" : "geglu"; }

double ModelConfig::attention_scale() const {
  if (softmax_scale > 0) return softmax_scale;
  double scale = 1.0 / std::sqrt(static_cast<double>(head_dim()));
  const RopeScaling& rs = rope_scaling;
  if (mla.enabled && rs.enabled() && rs.mscale_all_dim > 0 && rs.factor > 1) {
    const double m = 0.1 * rs.mscale_all_dim * std::log(rs.factor) + 1.0;
    scale *= m * m;
  }
  return scale;
}

std::vector<int64_t> layer_windows(const ModelConfig& cfg) {
  std::vector<int64_t> w(static_cast<size_t>(cfg.num_layers));
  for (int64_t l = 0; l < cfg.num_layers; ++l) w[l] = cfg.layer_window(l);
  return w;
}

int64_t ModelConfig::padded_vocab_size(int tp) const {
  int64_t m = make_vocab_size_divisible_by * tp;
  return (vocab_size + m - 1) / m * m;
}

double LoraConfig::scale() const {
  return rslora ? alpha / std::sqrt(static_cast<double>(rank)) : alpha / static_cast<double>(rank);
}

double RopeScaling::table_scale() const {
  if (type == "longrope") {
    if (attention_factor > 0) return attention_factor;
    if (factor <= 1) return 1.0;
    return std::sqrt(1 + std::log(factor) / std::log(static_cast<double>(original_max_position_embeddings)));
  }
  if (type != "yarn") return 1.0;
  if (attention_factor > 0) return attention_factor;
  const auto mscale_of = [&](double m) { return factor <= 1 ? 1.0 : 0.1 * m * std::log(factor) + 1.0; };
  return mscale > 0 && mscale_all_dim > 0 ? mscale_of(mscale) / mscale_of(mscale_all_dim) : mscale_of(1.0);
}

bool LoraConfig::targets(std::string_view megatron, std::string_view hf) const {
  for (const std::string& t : target_modules)
    if (t == "all-linear" || t == megatron || t == hf) return true;
  return false;
}

bool MoeConfig::is_moe_layer(int64_t l, int64_t num_layers) const {
  if (!enabled()) return false;
  if (layer_freq.find(',') == std::string::npos) {
    const int64_t k = std::stoll(layer_freq);
    return l % k == 0;
  }
  int64_t i = 0;
  for (size_t p = 0; p <= layer_freq.size(); ++i) {
    const size_t q = std::min(layer_freq.find(',', p), layer_freq.size());
    if (i == l) return layer_freq.substr(p, q - p) == "1";
    p = q + 1;
  }
  (void)num_layers;
  return false;
}

int64_t MoeConfig::num_moe_layers(int64_t num_layers) const {
  int64_t n = 0;
  for (int64_t l = 0; l < num_layers; ++l) n += is_moe_layer(l, num_layers) ? 1 : 0;
  return n;
}

namespace {
void validate_moe(const MoeConfig& m, int64_t num_layers) {
  if (m.num_experts < 0 || m.num_experts > 4096)
    fail("--num-experts must be in [0, 4096] (0: dense MLPs), got {}", m.num_experts);
  if (!m.enabled()) return;
  if (m.router_topk < 1 || m.router_topk > m.num_experts)
    fail("--moe-router-topk {} must be in [1, --num-experts {}]", m.router_topk, m.num_experts);
  if (m.router_score_function != "softmax" && m.router_score_function != "sigmoid")
    fail("--moe-router-score-function {}: expected softmax or sigmoid", m.router_score_function);
  if (m.token_drop_policy != "probs" && m.token_drop_policy != "position")
    fail("--moe-token-drop-policy {}: expected probs or position", m.token_drop_policy);
  if (!(m.aux_loss_coeff >= 0)) fail("--moe-aux-loss-coeff must be >= 0, got {}", m.aux_loss_coeff);
  if (!(m.z_loss_coeff >= 0)) fail("--moe-z-loss-coeff must be >= 0, got {}", m.z_loss_coeff);
  if (!(m.expert_capacity_factor >= 0))
    fail("--moe-expert-capacity-factor must be >= 0 (0: dropless), got {}", m.expert_capacity_factor);
  if (!(m.router_bias_update_rate >= 0))
    fail("--moe-router-bias-update-rate must be >= 0, got {}", m.router_bias_update_rate);
  if (m.ffn_hidden_size < 0 || m.ffn_hidden_size > 4 * kMaxWidth)
    fail("--moe-ffn-hidden-size must be in [0, {}] (0: --ffn-hidden-size), got {}", 4 * kMaxWidth, m.ffn_hidden_size);
  if (m.shared_expert_intermediate_size < 0 || m.shared_expert_intermediate_size > 4 * kMaxWidth)
    fail("--moe-shared-expert-intermediate-size must be in [0, {}] (0: none), got {}", 4 * kMaxWidth,
         m.shared_expert_intermediate_size);
  const std::string& f = m.layer_freq;
  if (f.find(',') == std::string::npos) {
    if (f.empty() || f.size() > 6 || f.find_first_not_of("0123456789") != std::string::npos || std::stoll(f) < 1)
      fail("--moe-layer-freq '{}': expected a positive integer k (every k-th layer has experts) or one 0/1 per layer",
           f);
  } else {
    int64_t n = 0;
    for (size_t p = 0; p <= f.size(); ++n) {
      const size_t q = std::min(f.find(',', p), f.size());
      const std::string v = f.substr(p, q - p);
      if (v != "0" && v != "1") fail("--moe-layer-freq '{}': list entries must be 0 or 1, got '{}'", f, v);
      p = q + 1;
    }
    if (n != num_layers) fail("--moe-layer-freq lists {} layers but --num-layers is {}", n, num_layers);
  }
  if (m.num_moe_layers(num_layers) == 0) fail("--moe-layer-freq '{}' puts experts in none of the {} layers", f, num_layers);
  if (m.router_num_groups < 0) fail("--moe-router-num-groups must be >= 0 (0: no groups), got {}", m.router_num_groups);
  if (m.router_num_groups > 1) {
    const int64_t G = m.router_num_groups, per = m.num_experts / G;
    if (m.num_experts % G != 0 || per < 2)
      fail("--moe-router-num-groups {} must divide --num-experts {} into groups of at least 2 experts", G,
           m.num_experts);
    if (m.router_group_topk < 1 || m.router_group_topk > G)
      fail("--moe-router-group-topk {} must be in [1, --moe-router-num-groups {}]", m.router_group_topk, G);
    if (m.router_topk > m.router_group_topk * per)
      fail("--moe-router-topk {} is more than the {} experts of --moe-router-group-topk {} groups", m.router_topk,
           m.router_group_topk * per, m.router_group_topk);
  } else if (m.router_group_topk != 0) {
    fail("--moe-router-group-topk {} needs --moe-router-num-groups > 1", m.router_group_topk);
  }
  if (!(m.router_topk_scaling_factor > 0))
    fail("--moe-router-topk-scaling-factor must be positive, got {}", m.router_topk_scaling_factor);
}

// --rope-scaling-*'s values.
void validate_rope_scaling(const ModelConfig& c) {
  const RopeScaling& rs = c.rope_scaling;
  if (!rs.enabled()) return;
  if (rs.type != "linear" && rs.type != "llama3" && rs.type != "yarn" && rs.type != "longrope")
    fail("--rope-scaling-type '{}' is not one of: none, linear, llama3, yarn, longrope", rs.type);
  if (rs.longrope()) {
    const size_t pairs = static_cast<size_t>(c.rotary_dim() / 2);
    for (const auto& [f, flag] : {std::pair{&rs.short_factor, "--rope-scaling-short-factor"},
                                  std::pair{&rs.long_factor, "--rope-scaling-long-factor"}}) {
      if (f->size() != pairs)
        fail("{} lists {} factors; longrope needs one per rotated dimension pair ({})", flag, f->size(), pairs);
      for (double x : *f)
        if (!(x > 0)) fail("{}: factor {} must be positive", flag, x);
    }
  } else if (!rs.short_factor.empty() || !rs.long_factor.empty()) {
    fail("--rope-scaling-short-factor / --rope-scaling-long-factor belong to --rope-scaling-type longrope");
  }
  if (c.position_embedding_type != Position::rope) fail("--rope-scaling-type {} needs rotary embeddings", rs.type);
  if (!(rs.factor >= 1)) fail("--rope-scaling-factor must be >= 1, got {}", rs.factor);
  if (rs.type == "llama3" && !(rs.low_freq_factor > 0 && rs.high_freq_factor > rs.low_freq_factor))
    fail("--rope-scaling-high-freq-factor {} must exceed --rope-scaling-low-freq-factor {} > 0",
         rs.high_freq_factor, rs.low_freq_factor);
  if (rs.type == "yarn" && !(rs.beta_fast > 0 && rs.beta_slow > 0 && rs.attention_factor >= 0 && rs.mscale >= 0 &&
                             rs.mscale_all_dim >= 0))
    fail("--rope-scaling-beta-fast {} and -beta-slow {} must be positive, --rope-scaling-attention-factor {}, "
         "-mscale {} and -mscale-all-dim {} >= 0",
         rs.beta_fast, rs.beta_slow, rs.attention_factor, rs.mscale, rs.mscale_all_dim);
  if (rs.type != "linear" && rs.original_max_position_embeddings < 1)
    fail("--rope-scaling-original-max-position-embeddings must be positive, got {}",
         rs.original_max_position_embeddings);
}

// Multi-head latent attention's own flags, and the options it replaces.
void validate_mla(const ModelConfig& c) {
  const MlaConfig& a = c.mla;
  if (!a.enabled) {
    if (c.rotary_interleaved) fail("--rotary-interleaved turns MLA's rotated dimensions; it needs --multi-latent-attention");
    return;
  }
  const auto in_range = [](int64_t v, int64_t lo, const char* flag) {
    if (v < lo || v > kMaxWidth) fail("{} must be in [{}, {}], got {}", flag, lo, kMaxWidth, v);
  };
  in_range(a.q_lora_rank, 0, "--q-lora-rank");
  in_range(a.kv_lora_rank, 1, "--kv-lora-rank");
  in_range(a.qk_head_dim, 1, "--qk-head-dim");
  in_range(a.qk_pos_emb_head_dim, 2, "--qk-pos-emb-head-dim");
  in_range(a.v_head_dim, 1, "--v-head-dim");
  if (a.qk_pos_emb_head_dim % 2 != 0)
    fail("--qk-pos-emb-head-dim {}: RoPE needs an even number of dimensions", a.qk_pos_emb_head_dim);
  if (a.kv_lora_rank + a.qk_pos_emb_head_dim > kernels::kMaxPagedHeadDim)
    fail("--kv-lora-rank {} + --qk-pos-emb-head-dim {} is wider than the {} values the paged attention kernel "
         "holds for a cached head (MLA's absorbed latent)",
         a.kv_lora_rank, a.qk_pos_emb_head_dim, kernels::kMaxPagedHeadDim);
  if (a.v_head_dim > c.head_dim())
    fail("--v-head-dim {} is wider than a query/key head (--qk-head-dim + --qk-pos-emb-head-dim = {}); claw runs "
         "MLA's values padded to that width",
         a.v_head_dim, c.head_dim());
  for (const auto& [on, flag] :
       {std::pair{c.position_embedding_type != Position::rope, "--position-embedding-type learned_absolute"},
        std::pair{c.normalization != Norm::rmsnorm, "--normalization LayerNorm"},
        std::pair{c.kv_channels > 0, "--kv-channels (MLA's heads are --qk-head-dim + --qk-pos-emb-head-dim)"},
        std::pair{c.num_query_groups > 0 && c.num_query_groups != c.num_attention_heads,
                  "--num-query-groups (MLA makes one key and value per head)"},
        std::pair{c.rotary_percent != 1.0, "--rotary-percent (MLA rotates --qk-pos-emb-head-dim dimensions)"},
        std::pair{c.qk_layernorm, "--qk-layernorm"},
        std::pair{c.qkv_bias(), "linear biases (--disable-bias-linear, no --add-qkv-bias)"}})
    if (on) fail("--multi-latent-attention does not combine with {}", flag);
}

}  // namespace

bool Fp8Config::layer_in_fp8(int64_t l, int64_t num_layers) const {
  if (!enabled()) return false;
  if (first_last_layers_bf16 && (l < num_layers_at_start_in_bf16 || l >= num_layers - num_layers_at_end_in_bf16))
    return false;
  return std::find(high_precision_layers.begin(), high_precision_layers.end(), l) == high_precision_layers.end();
}

void Fp8Config::validate() const {
  if (!enabled()) return;
  if (format != "e4m3" && format != "hybrid")
    fail("--fp8-format '{}' is not one of: e4m3, hybrid (E4M3 forward, E5M2 gradients)", format);
  if (recipe != "delayed" && recipe != "tensorwise" && recipe != "mxfp8" && recipe != "blockwise" &&
      recipe != "nvfp4")
    fail("--fp8-recipe '{}' is not one of: delayed, tensorwise, mxfp8, blockwise, nvfp4 (or --fp4)", recipe);
  if (amax_history_len < 1 || amax_history_len > 65536)
    fail("--fp8-amax-history-len must be in [1, 65536], got {}", amax_history_len);
  if (amax_compute_algo != "max" && amax_compute_algo != "most_recent")
    fail("--fp8-amax-compute-algo '{}' is not one of: max, most_recent", amax_compute_algo);
  if (margin < 0 || margin > 64) fail("--fp8-margin must be in [0, 64], got {}", margin);
  if (layer_selection != "manual" && layer_selection != "auto")
    fail("--fp8-layer-selection '{}' is not one of: manual, auto", layer_selection);
  if (bf16_layer_budget < 0) fail("--fp8-bf16-layer-budget must be >= 0, got {}", bf16_layer_budget);
  if (calibration_batches < 1) fail("--fp8-calibration-batches must be >= 1, got {}", calibration_batches);
  if (num_layers_at_start_in_bf16 < 0 || num_layers_at_end_in_bf16 < 0)
    fail("--num-layers-at-start-in-bf16 and --num-layers-at-end-in-bf16 must be >= 0");
}

void ModelConfig::validate() const {
  fp8.validate();
  validate_mla(*this);
  auto positive = [](int64_t v, const char* flag) {
    if (v <= 0) fail("{} must be positive (got {})", flag, v);
  };
  positive(num_layers, "--num-layers");
  positive(hidden_size, "--hidden-size");
  positive(num_attention_heads, "--num-attention-heads");
  positive(vocab_size, "--vocab-size");
  positive(make_vocab_size_divisible_by, "--make-vocab-size-divisible-by");
  positive(max_position_embeddings, "--max-position-embeddings");
  // Shapes beyond these are typos, refused before anything sizes a vector
  // from them (a shape-only model, as the planner builds, holds an object per
  // layer): within them every count derived from the shape (parameters,
  // bytes per layer or per model) fits in 64 bits.
  auto at_most = [](int64_t v, int64_t limit, const char* flag, const char* why) {
    if (v > limit) fail("{} {} is too large: at most {} ({})", flag, v, limit, why);
  };
  at_most(num_layers, kMaxLayers, "--num-layers", "the deepest published transformers have about 1000 layers");
  at_most(hidden_size, kMaxWidth, "--hidden-size", "about 40 times the widest published model");
  at_most(ffn_hidden_size, 4 * kMaxWidth, "--ffn-hidden-size", "4 x the largest --hidden-size");
  at_most(num_attention_heads, kMaxWidth, "--num-attention-heads", "the largest --hidden-size");
  at_most(num_query_groups, kMaxWidth, "--num-query-groups", "the largest --hidden-size");
  at_most(kv_channels, kMaxWidth, "--kv-channels", "the largest --hidden-size");
  at_most(vocab_size, kMaxVocab, "--vocab-size", "token ids are 32-bit");
  at_most(make_vocab_size_divisible_by, kMaxVocab, "--make-vocab-size-divisible-by", "token ids are 32-bit");
  at_most(max_position_embeddings, kMaxPositions, "--max-position-embeddings",
          "the longest published contexts are about 10M tokens");
  if (num_query_groups < 0) fail("--num-query-groups must be >= 0 (0 means one group per head), got {}", num_query_groups);
  if (kv_channels < 0) fail("--kv-channels must be >= 0 (0 means hidden/heads), got {}", kv_channels);
  if (ffn_hidden_size < 0) fail("--ffn-hidden-size must be >= 0 (0 means 4 x hidden), got {}", ffn_hidden_size);
  if (kv_channels == 0 && hidden_size % num_attention_heads != 0)
    fail("--hidden-size {} is not divisible by --num-attention-heads {}; use a multiple of {} (e.g. {}) or set --kv-channels",
         hidden_size, num_attention_heads, num_attention_heads,
         (hidden_size / num_attention_heads + 1) * num_attention_heads);
  if (num_attention_heads % kv_heads() != 0)
    fail("--num-attention-heads {} is not divisible by --num-query-groups {}; the group count must divide the head count",
         num_attention_heads, kv_heads());
  if (num_attention_heads * head_dim() > kMaxWidth)
    fail("--num-attention-heads {} x head dimension {} (--kv-channels or hidden/heads) is too large: at most {} "
         "(about 40 times the widest published model)",
         num_attention_heads, head_dim(), kMaxWidth);
  if (position_embedding_type == Position::rope && head_dim() % 2 != 0)
    fail("rotary embeddings need an even head dimension (--kv-channels or hidden/heads), got {}", head_dim());
  if (!(rotary_percent > 0 && rotary_percent <= 1))
    fail("--rotary-percent must be in (0, 1], got {}", rotary_percent);
  if (position_embedding_type == Position::rope && (rotary_dim() < 2 || rotary_dim() % 2 != 0))
    fail("--rotary-percent {} rotates {} of the head's {} dimensions; RoPE needs an even number, at least 2",
         rotary_percent, rotary_dim(), head_dim());
  if (rotary_base <= 0) fail("--rotary-base must be positive, got {}", rotary_base);
  validate_rope_scaling(*this);
  if (!(norm_epsilon > 0)) fail("--norm-epsilon must be positive, got {}", norm_epsilon);
  if (!(hidden_dropout >= 0 && hidden_dropout < 1)) fail("--hidden-dropout must be in [0, 1), got {}", hidden_dropout);
  if (lora.rank < 0 || lora.rank > kMaxWidth) fail("--lora-rank must be in [0, {}] (0: no adapters), got {}", kMaxWidth, lora.rank);
  if (lora.enabled()) {
    if (!(lora.alpha > 0)) fail("--lora-alpha must be positive, got {}", lora.alpha);
    if (!(lora.dropout >= 0 && lora.dropout < 1)) fail("--lora-dropout must be in [0, 1), got {}", lora.dropout);
    if (lora.target_modules.empty()) fail("--lora-target-modules names no layer");
    const bool gpt2 = position_embedding_type == Position::learned, phi3 = hf_architecture == "Phi3ForCausalLM";
    std::vector<std::string_view> known =
        gpt2   ? std::vector<std::string_view>{"all-linear", "linear_qkv", "linear_proj", "linear_fc1", "linear_fc2",
                                               "c_attn", "c_proj", "c_fc"}
        : phi3 ? std::vector<std::string_view>{"all-linear", "linear_qkv", "linear_proj", "linear_fc1", "linear_fc2",
                                               "qkv_proj", "o_proj", "gate_up_proj", "down_proj"}
        : mla.enabled
            ? std::vector<std::string_view>{"all-linear", "linear_q_proj", "linear_q_down_proj", "linear_q_up_proj",
                                            "linear_kv_down_proj", "linear_kv_up_proj", "linear_proj", "linear_fc1",
                                            "linear_fc2", "q_proj", "q_a_proj", "q_b_proj", "kv_a_proj_with_mqa",
                                            "kv_b_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}
               : std::vector<std::string_view>{"all-linear", "linear_qkv", "linear_proj", "linear_fc1", "linear_fc2",
                                               "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                                               "down_proj"};
    if (HfNames(*this).mixtral_experts()) known.insert(known.end(), {"w1", "w3", "w2"});  // Mixtral's experts
    for (const std::string& t : lora.target_modules)
      if (std::find(known.begin(), known.end(), t) == known.end())
        fail("--lora-target-modules: '{}' names no linear layer of this {} model; valid: {}", t,
             gpt2 ? "GPT-2" : phi3 ? "Phi-3" : mla.enabled ? "latent-attention" : "Llama", fmt::join(known, ", "));
  }
  static const std::vector<std::string_view> hf_classes = {
      "GPT2LMHeadModel",  "LlamaForCausalLM", "MistralForCausalLM", "MixtralForCausalLM",
      "Qwen2ForCausalLM", "Qwen3ForCausalLM", "Qwen3MoeForCausalLM", "Phi3ForCausalLM", "Gemma2ForCausalLM",
      "Gemma3ForCausalLM", "Olmo2ForCausalLM", "DeepseekV3ForCausalLM"};
  if (!hf_architecture.empty() && std::find(hf_classes.begin(), hf_classes.end(), hf_architecture) == hf_classes.end())
    fail("--hf-architecture '{}' is not one of: {} (or empty: the class the model's options imply)", hf_architecture,
         fmt::join(hf_classes, ", "));
  if (qk_layernorm && normalization != Norm::rmsnorm)
    fail("--qk-layernorm normalizes queries and keys with RMSNorm; it needs --normalization RMSNorm");
  if (qk_layernorm_full_width && !qk_layernorm)
    fail("--qk-layernorm-full-width says how wide --qk-layernorm's norms are; it needs --qk-layernorm");
  if (!pre_sublayer_norm && !post_sublayer_norm)
    fail("--no-pre-sublayer-norm leaves the blocks without norms; it needs --post-sublayer-norm (OLMo 2's order)");
  if (!(attn_logit_softcapping >= 0 && final_logit_softcapping >= 0))
    fail("--attn-logit-softcapping {} / --final-logit-softcapping {} must be >= 0 (0: none)", attn_logit_softcapping,
         final_logit_softcapping);
  if (scale_embedding && position_embedding_type == Position::learned)
    fail("--scale-embedding scales word embeddings alone; with learned positions it is not available");
  if (mlp == Mlp::geglu && moe.enabled()) fail("--geglu with --num-experts: GeGLU experts are not available yet");
  if (!(softmax_scale >= 0)) fail("--softmax-scale must be >= 0 (0: 1/sqrt(head dim)), got {}", softmax_scale);
  if (!(local_rotary_base >= 0)) fail("--local-rotary-base must be >= 0 (0: --rotary-base), got {}", local_rotary_base);
  if (window_attn_skip_freq < 0) fail("--window-attn-skip-freq must be >= 0, got {}", window_attn_skip_freq);
  if (window_size < 0 || window_size > kMaxPositions)
    fail("--window-size must be in [0, {}] (0: full causal attention), got {}", kMaxPositions, window_size);
  if (!(init_method_std > 0)) fail("--init-method-std must be positive, got {}", init_method_std);
  validate_moe(moe, num_layers);
}

int64_t ModelConfig::attention_params() const {
  const int64_t C = hidden_size, D = head_dim(), H = num_attention_heads, G = kv_heads();
  if (mla.enabled) {
    const int64_t qr = mla.q_lora_rank, kvr = mla.kv_lora_rank;
    const int64_t q = qr > 0 ? C * qr + qr + qr * H * D : C * H * D;
    return q + C * (kvr + mla.qk_pos_emb_head_dim) + kvr + kvr * H * (mla.qk_head_dim + mla.v_head_dim) +
           H * mla.v_head_dim * C;
  }
  const int64_t b = add_bias_linear ? 1 : 0, bqkv = qkv_bias() ? 1 : 0;
  int64_t attn = C * H * D + 2 * C * G * D + H * D * C + bqkv * (H * D + 2 * G * D) + b * C;
  if (qk_layernorm) attn += qk_layernorm_full_width ? H * D + G * D : 2 * D;
  return attn;
}

int64_t ModelConfig::num_params() const {
  const int64_t C = hidden_size, F = ffn(), Vp = padded_vocab_size();
  const int64_t b = add_bias_linear ? 1 : 0;
  const int64_t norm = normalization == Norm::layernorm ? 2 * C : C;
  const int64_t attn = attention_params();
  const auto ffn_of = [&](int64_t f) { return mlp == Mlp::gelu ? 2 * C * f + b * (f + C) : 3 * C * f + b * (2 * f + C); };
  const int64_t norms = ((pre_sublayer_norm ? 2 : 0) + (post_sublayer_norm ? 2 : 0)) * norm;
  int64_t block = norms + attn + ffn_of(F);
  int64_t embed = Vp * C + (position_embedding_type == Position::learned ? max_position_embeddings * C : 0);
  int64_t head = tied() ? 0 : Vp * C;
  const int64_t moe_layers = moe.num_moe_layers(num_layers);
  const int64_t moe_block = norms + attn + moe_ffn_params(false);
  return embed + (num_layers - moe_layers) * block + moe_layers * moe_block + norm + head;
}

int64_t ModelConfig::moe_ffn_params(bool active) const {
  if (!moe.enabled()) return 0;
  const int64_t C = hidden_size, E = moe.num_experts, b = add_bias_linear ? 1 : 0;
  const auto ffn_of = [&](int64_t f) { return mlp == Mlp::gelu ? 2 * C * f + b * (f + C) : 3 * C * f + b * (2 * f + C); };
  const int64_t router = E * C + (moe.router_enable_expert_bias && !active ? E : 0);
  const int64_t shared = moe.shared_expert_intermediate_size > 0 ? ffn_of(moe.shared_expert_intermediate_size) : 0;
  return router + (active ? moe.router_topk : E) * ffn_of(moe_ffn()) + shared;
}

int64_t ModelConfig::num_matmul_params() const {
  int64_t lookup = padded_vocab_size() * hidden_size +
                   (position_embedding_type == Position::learned ? max_position_embeddings * hidden_size : 0);
  // A MoE layer's token runs k of its experts: the others do no FLOPs for it.
  int64_t n = num_params() - lookup -
              moe.num_moe_layers(num_layers) * (moe_ffn_params(false) - moe_ffn_params(true));
  return tied() ? n + padded_vocab_size() * hidden_size : n;
}

double ModelConfig::flops_per_token(int64_t seq_length) const {
  // A query of a windowed layer sees at most the window's keys.
  double keys = 0;
  for (int64_t l = 0; l < num_layers; ++l) {
    const int64_t w = layer_window(l);
    keys += static_cast<double>(w > 0 ? std::min(w, seq_length) : seq_length);
  }
  // Scores (q.k over head_dim) and their sum of values (value_dim), forward and backward.
  return 6.0 * static_cast<double>(num_matmul_params()) +
         6.0 * static_cast<double>(num_attention_heads * (head_dim() + value_dim())) * keys;
}

namespace {
ModelConfig gpt2(std::string name, int64_t layers, int64_t hidden, int64_t heads) {
  ModelConfig c;
  c.name = std::move(name);
  c.num_layers = layers;
  c.hidden_size = hidden;
  c.num_attention_heads = heads;
  c.vocab_size = 50257;
  c.max_position_embeddings = 1024;
  return c;
}

ModelConfig llama(std::string name, int64_t layers, int64_t hidden, int64_t heads, int64_t groups, int64_t ffn,
                  int64_t vocab, double theta, int64_t max_pos) {
  ModelConfig c;
  c.name = std::move(name);
  c.num_layers = layers;
  c.hidden_size = hidden;
  c.num_attention_heads = heads;
  c.num_query_groups = groups;
  c.ffn_hidden_size = ffn;
  c.vocab_size = vocab;
  c.max_position_embeddings = max_pos;
  c.normalization = Norm::rmsnorm;
  c.position_embedding_type = Position::rope;
  c.rotary_base = theta;
  c.mlp = Mlp::swiglu;
  c.add_bias_linear = false;
  c.untie_embeddings_and_output_weights = true;
  return c;
}

// The published sizes of the Hugging Face families (Qwen, Mistral, Phi-3,
// Gemma), for planning.
std::optional<ModelConfig> family_preset(std::string_view name) {
  // Qwen 2.5 (Qwen Team 2024; the published config.json): Llama's layers
  // with biases on q, k and v, untied embeddings at these sizes.
  if (name == "qwen2.5-7b" || name == "qwen2.5-72b") {
    ModelConfig c = name == "qwen2.5-7b" ? llama("qwen2.5-7b", 28, 3584, 28, 4, 18944, 152064, 1e6, 32768)
                                         : llama("qwen2.5-72b", 80, 8192, 64, 8, 29568, 152064, 1e6, 32768);
    c.add_qkv_bias = true;
    return c;
  }
  // Qwen 3 dense (Qwen Team 2025): no biases, RMSNorm on each head's
  // queries and keys, heads of 128 wider than hidden / heads at 32B.
  if (name == "qwen3-8b" || name == "qwen3-32b") {
    ModelConfig c = name == "qwen3-8b" ? llama("qwen3-8b", 36, 4096, 32, 8, 12288, 151936, 1e6, 40960)
                                       : llama("qwen3-32b", 64, 5120, 64, 8, 25600, 151936, 1e6, 40960);
    c.kv_channels = 128;
    c.qk_layernorm = true;
    c.norm_epsilon = 1e-6;
    return c;
  }
  // Qwen3-235B-A22B: Qwen 3's attention, every layer 128 narrow experts
  // (1536 wide), top 8, softmax renormalised over the 8, no shared expert.
  if (name == "qwen3-235b-a22b") {
    ModelConfig c = llama("qwen3-235b-a22b", 94, 4096, 64, 4, 12288, 151936, 1e6, 40960);
    c.kv_channels = 128;
    c.qk_layernorm = true;
    c.norm_epsilon = 1e-6;
    c.moe.num_experts = 128;
    c.moe.router_topk = 8;
    c.moe.ffn_hidden_size = 1536;
    c.moe.aux_loss_coeff = 0.001;
    return c;
  }
  // Gemma 2 (Gemma Team 2024) and Gemma 3 27B (text): GeGLU, (1 + w) norms
  // around both sublayers, scaled embeddings, tied; windowed layers but every
  // 2nd (Gemma 2) or 6th (Gemma 3); Gemma 2's soft-caps, Gemma 3's q/k
  // norms and two RoPE bases.
  if (name == "gemma-2-9b" || name == "gemma-2-27b" || name == "gemma-3-27b") {
    const bool v3 = name == "gemma-3-27b", big = name != "gemma-2-9b";
    ModelConfig c = name == "gemma-2-9b"    ? llama("gemma-2-9b", 42, 3584, 16, 8, 14336, 256000, 10000.0, 8192)
                    : name == "gemma-2-27b" ? llama("gemma-2-27b", 46, 4608, 32, 16, 36864, 256000, 10000.0, 8192)
                                            : llama("gemma-3-27b", 62, 5376, 32, 16, 21504, 262208, 1e6, 131072);
    c.kv_channels = big ? 128 : 256;
    if (v3) c.make_vocab_size_divisible_by = 64;  // the published embedding has 262208 rows
    c.mlp = Mlp::geglu;
    c.apply_layernorm_1p = c.post_sublayer_norm = c.scale_embedding = true;
    c.untie_embeddings_and_output_weights = false;
    c.norm_epsilon = 1e-6;
    c.softmax_scale = 1.0 / std::sqrt(name == "gemma-2-9b" ? 256.0 : name == "gemma-2-27b" ? 144.0 : 168.0);
    c.window_size = v3 ? 1024 : 4096;
    c.window_attn_skip_freq = v3 ? 6 : 2;
    if (v3) {
      c.qk_layernorm = true;
      c.local_rotary_base = 10000.0;
      c.rope_scaling = {.type = "linear", .factor = 8.0};
    } else {
      c.attn_logit_softcapping = 50.0;
      c.final_logit_softcapping = 30.0;
    }
    return c;
  }
  // OLMo 2 7B (OLMo et al. 2024, the 1124 release): MHA, RMSNorms after each
  // sublayer and none before, q and k each normed over their full width.
  if (name == "olmo-2-7b") {
    ModelConfig c = llama("olmo-2-7b", 32, 4096, 32, 32, 11008, 100278, 500000.0, 4096);
    c.make_vocab_size_divisible_by = 128;  // the published embedding has 100352 rows
    c.qk_layernorm = c.qk_layernorm_full_width = c.post_sublayer_norm = true;
    c.pre_sublayer_norm = false;
    c.norm_epsilon = 1e-6;
    return c;
  }
  // Mistral 7B v0.1 (Jiang et al. 2023): every layer attends over a sliding window of 4096.
  if (name == "mistral-7b") {
    ModelConfig c = llama("mistral-7b", 32, 4096, 32, 8, 14336, 32000, 10000.0, 32768);
    c.window_size = 4096;
    return c;
  }
  // Phi-3-mini 4k (Abdin et al. 2024): MHA, a window of 2047, a 32064-token vocabulary.
  if (name == "phi-3-mini") {
    ModelConfig c = llama("phi-3-mini", 32, 3072, 32, 32, 8192, 32064, 10000.0, 4096);
    c.make_vocab_size_divisible_by = 64;  // the published embedding has 32064 rows
    c.window_size = 2047;
    return c;
  }
  return std::nullopt;
}
}  // namespace

std::vector<std::string> preset_names() {
  return {"gpt2-tiny",  "gpt2-124m",   "llama-tiny",  "mixtral-tiny", "deepseek-tiny", "llama3.2-1b",
          "llama3-8b",  "llama3-70b",  "llama3-405b", "gpt3-175b",    "mixtral-8x7b",  "deepseek-v3",
          "qwen2.5-7b", "qwen2.5-72b", "qwen3-8b",    "qwen3-32b",    "qwen3-235b-a22b", "mistral-7b",
          "phi-3-mini", "gemma-2-9b",  "gemma-2-27b", "gemma-3-27b", "olmo-2-7b"};
}

ModelConfig model_preset(std::string_view name) {
  if (name == "gpt2-tiny") return gpt2("gpt2-tiny", 4, 256, 4);
  if (name == "gpt2-124m") return gpt2("gpt2-124m", 12, 768, 12);
  if (name == "gpt3-175b") {
    ModelConfig c = gpt2("gpt3-175b", 96, 12288, 96);
    c.max_position_embeddings = 2048;
    return c;
  }
  // llama-tiny uses the GPT-2 vocabulary so it trains on the built-in corpus.
  if (name == "llama-tiny") return llama("llama-tiny", 4, 256, 8, 2, 768, 50257, 10000.0, 1024);
  if (name == "llama3.2-1b") {  // Llama 3.2 1B: tied embeddings, 1.24B parameters
    ModelConfig c = llama("llama3.2-1b", 16, 2048, 32, 8, 8192, 128256, 500000.0, 8192);
    c.untie_embeddings_and_output_weights = false;
    return c;
  }
  // Mixtral's layout (Jiang et al. 2024): every layer 8 SwiGLU experts, top 2, softmax.
  if (name == "mixtral-tiny" || name == "mixtral-8x7b") {
    ModelConfig c = name == "mixtral-tiny" ? llama("mixtral-tiny", 4, 256, 8, 2, 512, 50257, 1e6, 1024)
                                           : llama("mixtral-8x7b", 32, 4096, 32, 8, 14336, 32000, 1e6, 32768);
    c.moe.num_experts = 8;
    c.moe.router_topk = 2;
    c.moe.aux_loss_coeff = 0.02;  // HF's router_aux_loss_coef (Mixtral's config.json: 0.02)
    return c;
  }
  // DeepSeek-V3's MoE (DeepSeek-AI 2024): fine-grained experts (narrow, many,
  // top 8 of 256), one shared expert, sigmoid scores with the aux-loss-free
  // expert bias; the first 3 layers dense. deepseek-tiny keeps plain
  // attention (the MoE's tests); deepseek-v3 has the published model's
  // multi-head latent attention, group-limited routing (8 groups, 4 chosen,
  // weights x 2.5) and YaRN to 160K.
  if (name == "deepseek-tiny") {
    ModelConfig c = llama("deepseek-tiny", 4, 256, 8, 8, 768, 50257, 10000.0, 1024);
    c.moe = {.num_experts = 16, .router_topk = 4, .router_score_function = "sigmoid", .aux_loss_coeff = 0.0001,
             .router_enable_expert_bias = true, .ffn_hidden_size = 128, .shared_expert_intermediate_size = 128,
             .layer_freq = "0,1,1,1"};
    return c;
  }
  if (name == "deepseek-v3") {
    ModelConfig c = llama("deepseek-v3", 61, 7168, 128, 0, 18432, 129280, 10000.0, 163840);
    c.norm_epsilon = 1e-6;
    c.mla = {.enabled = true, .q_lora_rank = 1536, .kv_lora_rank = 512, .qk_head_dim = 128,
             .qk_pos_emb_head_dim = 64, .v_head_dim = 128};
    c.rotary_interleaved = true;
    c.rope_scaling = {.type = "yarn", .factor = 40, .original_max_position_embeddings = 4096, .mscale = 1.0,
                      .mscale_all_dim = 1.0};
    std::string freq = "0,0,0";
    for (int l = 3; l < 61; ++l) freq += ",1";
    c.moe = {.num_experts = 256, .router_topk = 8, .router_score_function = "sigmoid", .aux_loss_coeff = 0.0001,
             .router_enable_expert_bias = true, .ffn_hidden_size = 2048, .shared_expert_intermediate_size = 2048,
             .layer_freq = freq, .router_num_groups = 8, .router_group_topk = 4, .router_topk_scaling_factor = 2.5};
    return c;
  }
  if (std::optional<ModelConfig> c = family_preset(name)) return *c;
  if (name == "llama3-8b") return llama("llama3-8b", 32, 4096, 32, 8, 14336, 128256, 500000.0, 8192);
  if (name == "llama3-70b") return llama("llama3-70b", 80, 8192, 64, 8, 28672, 128256, 500000.0, 8192);
  if (name == "llama3-405b") return llama("llama3-405b", 126, 16384, 128, 8, 53248, 128256, 500000.0, 8192);
  fail("unknown --model '{}'; valid presets: {}", name, fmt::join(preset_names(), ", "));
}

}  // namespace claw::model
