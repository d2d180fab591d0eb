#include "claw/ckpt/gguf_recipe.h"

#include <algorithm>
#include <cctype>
#include <cstdio>

#include "claw/core/error.h"

namespace claw::ckpt {

using kernels::WeightType;

namespace {

enum class Role { output, token_embd, attn_v, attn_k, attn_output, ffn_down, other };

// What llama-quantize's rules see in a tensor's name.
Role role_of(const std::string& n) {
  if (n == "output.weight") return Role::output;
  if (n == "token_embd.weight") return Role::token_embd;
  // attn_qkv and attn_kv_b are treated as attn_v (the values are in them).
  if (n.find("attn_qkv.weight") != std::string::npos || n.find("attn_kv_b.weight") != std::string::npos ||
      n.find("attn_v.weight") != std::string::npos)
    return Role::attn_v;
  if (n.find("attn_k.weight") != std::string::npos) return Role::attn_k;
  if (n.find("attn_output.weight") != std::string::npos) return Role::attn_output;
  if (n.find("ffn_down") != std::string::npos) return Role::ffn_down;
  return Role::other;
}

// The layers that get more bits in the _m recipes: the first and last
// eighth, and every third one between.
bool more_bits(int64_t i, int64_t n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

int64_t block_of(WeightType t) { return kernels::ggml_type_info(uint32_t(kernels::ggml_type_of(t)))->block; }

}  // namespace

std::optional<GgufRecipe> parse_gguf_recipe(std::string_view name) {
  std::string l(name);
  std::transform(l.begin(), l.end(), l.begin(), [](unsigned char c) { return std::tolower(c); });
  static const GgufRecipe recipes[] = {
      {"f32", WeightType::f32, 0},        {"bf16", WeightType::bf16, 32},     {"f16", WeightType::f16, 1},
      {"q8_0", WeightType::q8_0, 7},      {"q4_0", WeightType::q4_0, 2},      {"q4_1", WeightType::q4_1, 3, true},
      {"q5_0", WeightType::q5_0, 8, true}, {"q5_1", WeightType::q5_1, 9, true}, {"q4_k_s", WeightType::q4_k, 14, true},
      {"q4_k_m", WeightType::q4_k, 15, true}, {"q5_k_s", WeightType::q5_k, 16, true},
      {"q5_k_m", WeightType::q5_k, 17, true}, {"q6_k", WeightType::q6_k, 18, true},
      {"q2_k", WeightType::q2_k, 10, true},   {"q3_k_s", WeightType::q3_k, 11, true},
      {"q3_k_m", WeightType::q3_k, 12, true}, {"q3_k_l", WeightType::q3_k, 13, true},
      {"iq4_nl", WeightType::iq4_nl, 25, true}, {"iq4_xs", WeightType::iq4_xs, 30, true},
  };
  for (const GgufRecipe& r : recipes)
    if (r.name == l) return r;
  return std::nullopt;
}

GgufTypePlan::GgufTypePlan(GgufRecipe recipe, const std::vector<std::string>& names, int64_t n_layer,
                           int64_t n_expert, int64_t n_gqa)
    : r_(std::move(recipe)), n_layer_(n_layer), n_expert_(n_expert), n_gqa_(n_gqa) {
  for (const std::string& n : names) {
    const Role role = role_of(n);
    if (role == Role::attn_v) ++n_attn_v_;
    if (role == Role::output) tied_ = false;
  }
}

WeightType GgufTypePlan::next(const std::string& name, int64_t cols) {
  WeightType t = r_.base;
  if (!r_.llama_rules) return t;
  const std::string& f = r_.name;
  const bool m = f == "q4_k_m" || f == "q5_k_m";
  const bool iq4 = f == "iq4_nl" || f == "iq4_xs";
  switch (role_of(name)) {
    case Role::token_embd:
      if (!tied_) return t;  // its own type; tied, it is the output layer
      [[fallthrough]];
    case Role::output:
      t = cols % block_of(r_.base) != 0 ? WeightType::q8_0 : r_.base != WeightType::q8_0 ? WeightType::q6_k : t;
      break;
    case Role::attn_v:
      if (f == "q2_k") t = n_gqa_ >= 4 ? WeightType::q4_k : WeightType::q3_k;
      else if (f == "q3_k_m") t = i_attn_v_ < 2 ? WeightType::q5_k : WeightType::q4_k;
      else if (f == "q3_k_l") t = WeightType::q5_k;
      else if (iq4 && n_gqa_ >= 4) t = WeightType::q5_k;
      else if (m && more_bits(i_attn_v_, n_attn_v_)) t = WeightType::q6_k;
      else if (f == "q4_k_s" && i_attn_v_ < 4) t = WeightType::q5_k;
      if (n_expert_ == 8) t = WeightType::q8_0;
      ++i_attn_v_;
      break;
    case Role::attn_k:
      if (n_expert_ == 8) t = WeightType::q8_0;
      break;
    case Role::attn_output:
      if (n_expert_ == 8) {
        if (f == "q2_k" || f == "q3_k_s" || f == "q3_k_m" || f == "q4_k_s" || f == "q4_k_m" || iq4) t = WeightType::q5_k;
      } else if (f == "q2_k") {
        t = WeightType::q3_k;
      } else if (f == "q3_k_m") {
        t = WeightType::q4_k;
      } else if (f == "q3_k_l") {
        t = WeightType::q5_k;
      }
      break;
    case Role::ffn_down: {
      // The layer: the count so far, or (MoE: experts' tensors are not one a
      // layer) the one in the name.
      int64_t i = i_ffn_down_;
      int layer = 0;
      if (n_expert_ > 1 && std::sscanf(name.c_str(), "blk.%d.", &layer) == 1) i = layer;
      if (f == "q2_k") t = WeightType::q3_k;
      else if (f == "q3_k_m") t = i < n_layer_ / 16 ? WeightType::q5_k : WeightType::q4_k;
      else if (f == "q3_k_l") t = WeightType::q5_k;
      else if (m && more_bits(i, n_layer_)) t = WeightType::q6_k;
      else if (iq4 && i < n_layer_ / 8) t = WeightType::q5_k;
      else if (f == "q4_k_s" && i < n_layer_ / 8) t = WeightType::q5_k;
      ++i_ffn_down_;
      break;
    }
    case Role::other: break;
  }
  if (cols % block_of(t) == 0) return t;
  // Rows that are not whole super-blocks: a type of blocks of 32.
  const WeightType fallback = t == WeightType::q2_k || t == WeightType::q3_k ? WeightType::q4_0
                              : t == WeightType::q4_k ? WeightType::q5_0
                              : t == WeightType::q5_k ? WeightType::q5_1
                              : t == WeightType::q6_k ? WeightType::q8_0
                              : t == WeightType::iq4_xs ? WeightType::iq4_nl
                                                      : t;
  return cols % block_of(fallback) == 0 ? fallback : WeightType::f16;
}

}  // namespace claw::ckpt
