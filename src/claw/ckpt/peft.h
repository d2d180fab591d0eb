// PEFT interchange: a LoRA model's adapters <-> a PEFT adapter directory
// (adapter_config.json + adapter_model.safetensors), which PEFT's
// PeftModel.from_pretrained loads over the Hugging Face form of the base
// model (ckpt/hf.h).
//
// Tensor names are the base module's HF name under "base_model.model.",
// with lora_A.weight [r, in] and lora_B.weight [out, r] as PEFT stores them
// for nn.Linear and for GPT-2's Conv1D alike (fan_in_fan_out changes only
// how PEFT merges, not the factors). GPT-2's c_attn is one adapter: claw's
// q, k and v share its A (Linear::share_lora_a) and hold its B's row blocks.
// Adapters cover every layer of the module types they target, with one rank
// and alpha: a PEFT adapter with layers_to_transform, rank_pattern,
// alpha_pattern, DoRA, trained biases or modules_to_save is refused, naming
// the field.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "claw/ckpt/hf.h"
#include "claw/model/config.h"

namespace claw::ckpt {

inline constexpr const char* kPeftPrefix = "base_model.model.";

// adapter_config.json for cfg's adapters; base_model: the HF directory or Hub
// name the adapter applies to (may be empty).
nlohmann::json peft_config(const model::ModelConfig& cfg, const std::string& base_model);
// The adapters' PEFT tensors: `get(param)` returns a parameter's values.
HfStateDict to_peft(const model::ModelConfig& cfg, const std::function<std::vector<float>(const std::string&)>& get);
// Writes adapter_config.json and adapter_model.safetensors (each via a temporary name).
void write_peft_dir(const std::string& dir, const nlohmann::json& config, const HfStateDict& tensors);

struct PeftAdapter {
  nlohmann::json config;
  HfStateDict tensors;
};
PeftAdapter read_peft_dir(const std::string& dir);

// The LoRA settings of an adapter over `base` (a model without adapters):
// rank, alpha, dropout and rsLoRA from adapter_config.json, the targets from
// the tensors present. Throws naming the file and field or tensor when the
// adapter asks for what claw does not do or does not fit the base's shapes.
model::LoraConfig lora_from_peft(const PeftAdapter& adapter, const model::ModelConfig& base, const std::string& dir);
// Copies the adapter's factors into `params` (a model of base + that LoRA
// config; only the LoRA factors are touched).
void load_peft_params(const std::vector<model::Param*>& params, const PeftAdapter& adapter, const std::string& dir);

}  // namespace claw::ckpt
