// Hugging Face interchange: claw parameters <-> a transformers model
// directory (config.json + model.safetensors, or model-0000k-of-0000n
// shards with model.safetensors.index.json).
//
// Each ParamSpec's HfRef (model/hf_names.h) says where the parameter lives
// in HF's state dict: GPT2LMHeadModel's Conv1D weights are stored [in, out]
// (transposed from claw's [out, in]) and q/k/v are column blocks of the
// fused c_attn; LlamaForCausalLM's projections are nn.Linear [out, in] like
// claw's. claw's RoPE rotates the two halves of each head (HF's
// rotate_half), so Llama's q/k projections map as they are: the row
// permutation HF's converter applies to Meta's interleaved checkpoints is
// already HF's layout. Vocabulary padding exists only in claw: HF tensors
// have the real vocabulary's rows.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "claw/model/config.h"
#include "claw/model/param.h"

namespace claw::ckpt {

[[noreturn]] void fail_field_type(const std::string& path, const char* key, const std::string& value);

struct HfTensor {
  std::vector<int64_t> shape;
  std::vector<float> data;
};
using HfStateDict = std::map<std::string, HfTensor>;

// A JSON file's field `key` as T, `fallback` when absent or null; throws
// naming `path` and the field when it has another type.
template <typename T>
T json_field(const nlohmann::json& j, const char* key, T fallback, const std::string& path) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  try {
    return j[key].get<T>();
  } catch (const nlohmann::json::exception&) {
    fail_field_type(path, key, j[key].dump());
  }
}

// config.json for a model; throws naming the flag when the model has no HF
// architecture (GPT-2 needs biases; a RoPE model needs RMSNorm and SwiGLU).
nlohmann::json hf_config(const model::ModelConfig& cfg);
// The ModelConfig of a GPT2LMHeadModel / LlamaForCausalLM config.json.
model::ModelConfig model_from_hf_config(const nlohmann::json& j, const std::string& path);

// HF tensors from claw's: `get(param)` returns a parameter's values at its
// checkpoint shape (ckpt/shards.h: no vocabulary padding). The base model
// only: LoRA adapters are PEFT's tensors (ckpt/peft.h).
// The HF name of expert `index` of a stacked reference (HfRef::stack): its
// "{}" replaced ("experts.{}.w1.weight" -> "experts.3.w1.weight").
std::string stacked_hf_name(const std::string& name, int64_t index);

HfStateDict to_hf(const model::ModelConfig& cfg, const std::function<std::vector<float>(const std::string&)>& get);
// The HF tensors of `specs` (each by its HfRef; parts of a fused tensor put
// together), named `prefix` + the HF name.
HfStateDict gather_hf(const std::vector<model::ParamSpec>& specs,
                      const std::function<std::vector<float>(const std::string&)>& get, const std::string& prefix);
// A parameter's values (checkpoint shape) from an HF state dict; throws
// naming `source` and the HF tensor when it is missing or misshapen.
std::vector<float> from_hf(const model::ParamSpec& spec, const HfStateDict& hf, const std::string& source);

// Every parameter's values from an HF state dict (from_hf), written into the
// parameters in place; claw's vocabulary padding rows are zeroed.
void load_hf_params(const std::vector<model::Param*>& params, const HfStateDict& hf, const std::string& source);

// Writes config.json and the weights (one file, or shards of at most
// max_shard_bytes with an index); each file via a temporary name. dtype:
// f32, or bf16 (rounded to nearest even; config.json's torch_dtype says so).
void write_hf_dir(const std::string& dir, const nlohmann::json& config, const HfStateDict& tensors,
                  uint64_t max_shard_bytes, DType dtype = DType::f32);
// Reads config.json and every tensor (F32, BF16 or F16, as f32).
struct HfModel {
  nlohmann::json config;
  HfStateDict tensors;
};
HfModel read_hf_dir(const std::string& dir);
// Every tensor of one safetensors file into `into`, as f32.
void read_hf_tensors(const std::string& path, HfStateDict& into);
// Only <dir>/config.json; `flag` names the option that gave dir in errors.
nlohmann::json read_hf_config(const std::string& dir, const std::string& flag = "--input");

}  // namespace claw::ckpt
