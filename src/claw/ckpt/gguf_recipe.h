// The file types of `claw ckpt export --format gguf --type`: claw's own
// (f32, bf16, f16, q8_0, q4_0: every matrix in that type) and
// llama-quantize's recipes (q2_k, q3_k_s/m/l, q4_1, q5_0, q5_1, q4_k_s/m,
// q5_k_s/m, q6_k, iq4_nl, iq4_xs), whose types per tensor follow llama-quantize's rules
// without an importance matrix: the output layer (and a tied embedding) in
// q6_k, more bits for some layers' attn_v, ffn_down and attn_output (_m: the
// first and last eighth and every third between in q6_k; q4_k_s: the first
// four attn_v and the first eighth of ffn_down in q5_k; q3_k_m/l and q2_k
// their own), and a type of blocks of 32 where the rows are not whole
// super-blocks (q2_k, q3_k -> q4_0, q4_k -> q5_0, q5_k -> q5_1,
// q6_k -> q8_0, iq4_xs -> iq4_nl; f16 where not even that). Not followed: llama-quantize's
// rule for 70B Llamas (attn_v one step up), which needs its model-size
// table. The same model quantized by
// claw and by llama-quantize from claw's F32 file then has the same type
// for every tensor and, with ggml_quantize.cc, the same bytes.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "claw/kernels/cpu/quant.h"

namespace claw::ckpt {

struct GgufRecipe {
  std::string name;           // "q4_k_m"
  kernels::WeightType base;   // the type of most matrices (q4_k)
  uint32_t file_type;         // general.file_type (llama.cpp's llama_ftype)
  bool llama_rules = false;   // per-tensor types as llama-quantize chooses them
};
std::optional<GgufRecipe> parse_gguf_recipe(std::string_view name);  // case-insensitive
constexpr std::string_view kGgufRecipeChoices =
    "f32, bf16, f16, q8_0, q4_0 (every matrix), q6_k, q5_k_m, q5_k_s, q5_1, q5_0, q4_k_m, q4_k_s, q4_1, q3_k_l, "
    "q3_k_m, q3_k_s, q2_k, iq4_xs, iq4_nl (llama-quantize's recipes)";

// The type of each quantizable matrix of one file, asked in the file's
// order (the rules count attn_v and ffn_down as they come).
class GgufTypePlan {
 public:
  // names: every tensor the file will hold, in order; n_expert: routed
  // experts (0 for a dense model); n_gqa: query heads per key/value head.
  GgufTypePlan(GgufRecipe recipe, const std::vector<std::string>& names, int64_t n_layer, int64_t n_expert,
               int64_t n_gqa);
  kernels::WeightType next(const std::string& name, int64_t cols);

 private:
  GgufRecipe r_;
  int64_t n_layer_, n_expert_, n_gqa_;
  int n_attn_v_ = 0, i_attn_v_ = 0, i_ffn_down_ = 0;
  bool tied_ = true;
};

}  // namespace claw::ckpt
