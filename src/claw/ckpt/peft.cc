#include "claw/ckpt/peft.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>

#include <fmt/ranges.h>

#include "claw/ckpt/safetensors.h"
#include "claw/ckpt/shards.h"
#include "claw/core/error.h"
#include "claw/ckpt/format.h"
#include "claw/model/hf_names.h"
#include "claw/model/param.h"

namespace claw::ckpt {

namespace fs = std::filesystem;

namespace {

constexpr const char* kConfigFile = "adapter_config.json";
constexpr const char* kWeightsFile = "adapter_model.safetensors";

std::vector<model::ParamSpec> lora_specs(const model::ModelConfig& cfg) {
  std::vector<model::ParamSpec> out;
  for (const model::ParamSpec& s : model_param_specs(cfg))
    if (model::is_lora_param(s.name)) out.push_back(s);
  return out;
}

// "transformer.h.3.attn.c_attn.lora_B.weight" -> "transformer.h.3.attn.c_attn".
std::string module_of(const std::string& hf_name) {
  const size_t at = hf_name.rfind(".lora_");
  return at == std::string::npos ? hf_name : hf_name.substr(0, at);
}

// The module's path after its layer index: "attn.c_attn", "self_attn.q_proj".
std::string module_type(const std::string& module) {
  size_t at = 0;
  while (at < module.size()) {
    const size_t dot = module.find('.', at);
    const std::string part = module.substr(at, dot == std::string::npos ? std::string::npos : dot - at);
    if (!part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; }))
      return dot == std::string::npos ? std::string() : module.substr(dot + 1);
    if (dot == std::string::npos) break;
    at = dot + 1;
  }
  return module;
}

// The HF modules (with PEFT's prefix) that `cfg`'s adapters sit on (each
// expert's of a stacked adapter).
std::set<std::string> adapted_modules(const model::ModelConfig& cfg) {
  std::set<std::string> out;
  for (const model::ParamSpec& s : lora_specs(cfg)) {
    if (s.hf.stack == 0) out.insert(kPeftPrefix + module_of(s.hf.name));
    for (int64_t e = 0; e < s.hf.stack; ++e) out.insert(kPeftPrefix + module_of(stacked_hf_name(s.hf.name, e)));
  }
  return out;
}

model::ModelConfig with_targets(const model::ModelConfig& base, int64_t rank, std::vector<std::string> targets) {
  model::ModelConfig c = base;
  c.lora = {.rank = rank, .target_modules = std::move(targets)};
  return c;
}

// PEFT's shape of each adapter tensor (fused modules span their parts).
std::map<std::string, std::vector<int64_t>> peft_shapes(const std::vector<model::ParamSpec>& specs) {
  std::map<std::string, std::vector<int64_t>> out;
  for (const model::ParamSpec& s : specs) {
    std::vector<int64_t> shape = checkpoint_shape(s);
    if (s.hf.stack > 0) {  // the experts' adapters, one PEFT tensor each
      shape.erase(shape.begin());
      for (int64_t e = 0; e < s.hf.stack; ++e) out[kPeftPrefix + stacked_hf_name(s.hf.name, e)] = shape;
      continue;
    }
    std::vector<int64_t>& full = out[kPeftPrefix + s.hf.name];
    if (s.hf.slice_dim < 0 || full.empty()) full = shape;
    if (s.hf.slice_dim >= 0) full[s.hf.slice_dim] = std::max(full[s.hf.slice_dim], s.hf.end);
  }
  return out;
}

std::string shape_str(const std::vector<int64_t>& s) { return fmt::format("[{}]", fmt::join(s, ", ")); }

bool empty_or_null(const nlohmann::json& j, const char* key) {
  return !j.contains(key) || j[key].is_null() || (j[key].is_object() || j[key].is_array() ? j[key].empty() : false);
}

}  // namespace

nlohmann::json peft_config(const model::ModelConfig& cfg, const std::string& base_model) {
  CLAW_CHECK(cfg.lora.enabled(), "peft_config of a model without adapters");
  // target_modules as PEFT matches them (a name, or a suffix after a dot):
  // a module's own name when every module of that name is adapted (c_attn,
  // q_proj), else its path in the layer (attn.c_proj, not mlp.c_proj).
  std::set<std::string> targeted, all;
  for (const std::string& m : adapted_modules(cfg)) targeted.insert(module_type(m));
  for (const std::string& m : adapted_modules(with_targets(cfg, cfg.lora.rank, {"all-linear"})))
    all.insert(module_type(m));
  std::set<std::string> names;
  for (const std::string& t : targeted) {
    const std::string last = t.substr(t.rfind('.') + 1);
    const bool whole = std::all_of(all.begin(), all.end(), [&](const std::string& a) {
      return a.substr(a.rfind('.') + 1) != last || targeted.count(a);
    });
    names.insert(whole ? last : t);
  }
  const double alpha = cfg.lora.alpha;
  nlohmann::json a = alpha == std::floor(alpha) && std::abs(alpha) < 1e9 ? nlohmann::json(static_cast<int64_t>(alpha))
                                                                         : nlohmann::json(alpha);
  return {{"peft_type", "LORA"},
          {"task_type", "CAUSAL_LM"},
          {"base_model_name_or_path", base_model.empty() ? nlohmann::json(nullptr) : nlohmann::json(base_model)},
          {"r", cfg.lora.rank},
          {"lora_alpha", a},
          {"lora_dropout", cfg.lora.dropout},
          {"use_rslora", cfg.lora.rslora},
          {"target_modules", std::vector<std::string>(names.begin(), names.end())},
          {"fan_in_fan_out", model::HfNames(cfg).gpt2()},  // GPT-2's Conv1D stores [in, out]
          {"bias", "none"},
          {"use_dora", false},
          {"init_lora_weights", true},
          {"inference_mode", true},
          {"modules_to_save", nullptr},
          {"layers_to_transform", nullptr},
          {"layers_pattern", nullptr},
          {"rank_pattern", nlohmann::json::object()},
          {"alpha_pattern", nlohmann::json::object()},
          {"revision", nullptr}};
}

HfStateDict to_peft(const model::ModelConfig& cfg, const std::function<std::vector<float>(const std::string&)>& get) {
  hf_config(cfg);  // the base must have a Hugging Face form
  return gather_hf(lora_specs(cfg), get, kPeftPrefix);
}

void write_peft_dir(const std::string& dir, const nlohmann::json& config, const HfStateDict& tensors) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) fail("--output {}: cannot create the directory: {}", dir, ec.message());
  std::vector<TensorView> views;
  for (const auto& [name, t] : tensors) views.push_back({name, DType::f32, t.shape, t.data.data()});
  write_safetensors(dir + "/" + kWeightsFile, views, {{"format", "pt"}});
  write_file_atomic(dir + "/" + kConfigFile, config.dump(2) + "\n");
}

PeftAdapter read_peft_dir(const std::string& dir) {
  const std::string cfg_path = dir + "/" + kConfigFile, weights = dir + "/" + kWeightsFile;
  if (!std::ifstream(cfg_path))
    fail("--input {}: no {} (a PEFT adapter directory holds {} and {})", dir, kConfigFile, kConfigFile, kWeightsFile);
  PeftAdapter a;
  a.config = read_json_file(cfg_path, "the adapter's config");
  if (!a.config.is_object()) fail("{}: not a JSON object", cfg_path);
  if (!fs::exists(weights))
    fail("--input {}: no {}{}", dir, kWeightsFile,
         fs::exists(dir + "/adapter_model.bin") ? " (adapter_model.bin is PyTorch's pickle, which claw does not read; "
                                                  "save with safe_serialization=True)"
                                                : "");
  read_hf_tensors(weights, a.tensors);
  return a;
}

model::LoraConfig lora_from_peft(const PeftAdapter& adapter, const model::ModelConfig& base, const std::string& dir) {
  const std::string path = dir + "/" + kConfigFile, file = dir + "/" + kWeightsFile;
  const nlohmann::json& j = adapter.config;
  const std::string type = json_field<std::string>(j, "peft_type", "", path);
  if (type != "LORA") fail("{}: peft_type '{}': claw reads LoRA adapters (LORA)", path, type);
  model::LoraConfig lora;
  lora.rank = json_field<int64_t>(j, "r", 0, path);
  if (lora.rank <= 0) fail("{}: field 'r' must be a positive rank, got {}", path, j.value("r", nlohmann::json()).dump());
  lora.alpha = json_field<double>(j, "lora_alpha", 8.0, path);
  lora.dropout = json_field<double>(j, "lora_dropout", 0.0, path);
  lora.rslora = json_field<bool>(j, "use_rslora", false, path);
  if (json_field<std::string>(j, "bias", "none", path) != "none")
    fail("{}: bias '{}': claw's adapters train no biases (bias \"none\")", path, j["bias"].get<std::string>());
  if (json_field<bool>(j, "use_dora", false, path)) fail("{}: use_dora true: claw has no DoRA adapters", path);
  for (const char* key : {"modules_to_save", "rank_pattern", "alpha_pattern", "layers_to_transform",
                          "layer_replication"})
    if (!empty_or_null(j, key))
      fail("{}: field '{}' is {}: claw's adapters have one rank and alpha and cover every layer", path, key,
           j[key].dump());

  // The targets, from the tensors present: the smallest set of claw target
  // names whose modules (in every layer) are exactly the adapted ones.
  std::set<std::string> present;
  for (const auto& [name, t] : adapter.tensors) {
    const bool factor = name.rfind(kPeftPrefix, 0) == 0 &&
                        (name.ends_with(".lora_A.weight") || name.ends_with(".lora_B.weight"));
    if (!factor)
      fail("{}: tensor '{}' is not a LoRA factor claw loads (base_model.model.<module>.lora_A/lora_B.weight of a "
           "linear layer)", file, name);
    present.insert(module_of(name));
  }
  if (present.empty()) fail("{}: no tensors", file);
  const model::HfNames names(base);
  std::vector<std::string> candidates =
      names.gpt2()   ? std::vector<std::string>{"linear_qkv", "linear_proj", "linear_fc1", "linear_fc2"}
      : names.phi3() ? std::vector<std::string>{"qkv_proj", "o_proj", "gate_up_proj", "down_proj"}
      : base.mla.enabled
          ? std::vector<std::string>{"q_proj", "q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj", "o_proj",
                                     "gate_proj", "up_proj", "down_proj"}
                     : std::vector<std::string>{"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                                                "down_proj"};
  if (names.mixtral_experts()) candidates.insert(candidates.end(), {"w1", "w3", "w2"});
  std::set<std::string> covered;
  lora.target_modules.clear();
  for (const std::string& c : candidates) {
    const std::set<std::string> mods = adapted_modules(with_targets(base, lora.rank, {c}));
    if (mods.empty() || !std::includes(present.begin(), present.end(), mods.begin(), mods.end())) continue;
    lora.target_modules.push_back(c);
    covered.insert(mods.begin(), mods.end());
  }
  const std::set<std::string> linear = adapted_modules(with_targets(base, lora.rank, {"all-linear"}));
  for (const std::string& m : present)
    if (!covered.count(m))
      fail("{}: adapts '{}', {}", file, m,
           linear.count(m) ? "but not that module in every layer: claw's adapters cover every layer of a module type"
                           : "which is no linear layer of this base model (another architecture or depth?)");
  return lora;
}

void load_peft_params(const std::vector<model::Param*>& params, const PeftAdapter& adapter, const std::string& dir) {
  const std::string file = dir + "/" + kWeightsFile;
  std::vector<model::ParamSpec> specs;
  for (const model::Param* p : params)
    if (model::is_lora_param(p->spec.name)) specs.push_back(p->spec);
  const auto want = peft_shapes(specs);
  for (const auto& [name, shape] : want) {
    auto it = adapter.tensors.find(name);
    if (it == adapter.tensors.end()) fail("{}: no tensor '{}'", file, name);
    if (it->second.shape != shape)
      fail("{}: '{}' has shape {}, but this base model needs {}: the adapter was made for a model of another shape",
           file, name, shape_str(it->second.shape), shape_str(shape));
  }
  for (model::Param* p : params) {
    if (!model::is_lora_param(p->spec.name)) continue;
    CLAW_CHECK(p->spec.shard_dim < 0, "{}: PEFT adapters load into one rank's whole model", p->spec.name);
    model::ParamSpec s = p->spec;
    s.hf.name = kPeftPrefix + s.hf.name;
    const std::vector<float> x = from_hf(s, adapter.tensors, file);
    std::copy(x.begin(), x.end(), p->data());
  }
}

}  // namespace claw::ckpt
