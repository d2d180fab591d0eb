#include "claw/ckpt/hf.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>

#include <fmt/ranges.h>

#include "claw/ckpt/format.h"
#include "claw/ckpt/safetensors.h"
#include "claw/ckpt/shards.h"
#include "claw/core/dtype_convert.h"
#include "claw/core/error.h"
#include "claw/core/dtype_convert.h"
#include "claw/model/hf_names.h"

namespace claw::ckpt {

namespace fs = std::filesystem;

std::string stacked_hf_name(const std::string& name, int64_t index) {
  const size_t at = name.find("{}");
  CLAW_CHECK(at != std::string::npos, "stacked Hugging Face name '{}' has no {{}}", name);
  return name.substr(0, at) + std::to_string(index) + name.substr(at + 2);
}

namespace {


std::vector<float> transpose2d(const std::vector<float>& x, int64_t rows, int64_t cols) {
  std::vector<float> y(x.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) y[c * rows + r] = x[r * cols + c];
  return y;
}

// Copies the slab [begin, end) along `dim` between a tensor of `full` shape
// and one of the slab's shape (to_full: slab -> full, else full -> slab).
void copy_slab(const std::vector<int64_t>& full, int dim, int64_t begin, int64_t end, float* full_data,
               float* slab_data, bool to_full) {
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < dim; ++d) outer *= full[d];
  for (size_t d = dim + 1; d < full.size(); ++d) inner *= full[d];
  const int64_t n = (end - begin) * inner;
  for (int64_t o = 0; o < outer; ++o) {
    float* f = full_data + (o * full[dim] + begin) * inner;
    float* s = slab_data + o * n;
    if (to_full) std::memcpy(f, s, n * sizeof(float));
    else std::memcpy(s, f, n * sizeof(float));
  }
}

}  // namespace

HfStateDict gather_hf(const std::vector<model::ParamSpec>& specs,
                      const std::function<std::vector<float>(const std::string&)>& get, const std::string& prefix) {
  // HF shapes first: a fused tensor (c_attn) spans its parts' slabs.
  std::map<std::string, std::vector<int64_t>> shapes;
  const auto hf_shape = [](const model::ParamSpec& s) {
    std::vector<int64_t> shape = checkpoint_shape(s);
    if (s.hf.transpose) std::swap(shape[0], shape[1]);
    return shape;
  };
  for (const model::ParamSpec& s : specs) {
    if (s.hf.name.empty()) fail("parameter '{}' has no Hugging Face counterpart", s.name);
    std::vector<int64_t> shape = hf_shape(s);
    if (s.hf.stack > 0) {  // one HF tensor per index of our dimension 0
      shape.erase(shape.begin());
      for (int64_t e = 0; e < s.hf.stack; ++e) shapes[prefix + stacked_hf_name(s.hf.name, e)] = shape;
    } else if (s.hf.slice_dim >= 0) {
      auto& full = shapes[prefix + s.hf.name];
      if (full.empty()) full = shape;
      full[s.hf.slice_dim] = std::max(full[s.hf.slice_dim], s.hf.end);
    } else {
      shapes[prefix + s.hf.name] = shape;
    }
  }
  HfStateDict out;
  for (const auto& [name, shape] : shapes) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    out[name] = {shape, std::vector<float>(static_cast<size_t>(n))};
  }
  for (const model::ParamSpec& s : specs) {
    const std::vector<int64_t> cs = checkpoint_shape(s);
    std::vector<float> x = get(s.name);
    int64_t n = 1;
    for (int64_t d : cs) n *= d;
    CLAW_CHECK(static_cast<int64_t>(x.size()) == n, "parameter '{}': {} values for {} elements", s.name, x.size(), n);
    if (s.hf.stack > 0) {
      const int64_t each = n / s.hf.stack;
      for (int64_t e = 0; e < s.hf.stack; ++e)
        out[prefix + stacked_hf_name(s.hf.name, e)].data.assign(x.begin() + e * each, x.begin() + (e + 1) * each);
      continue;
    }
    if (s.hf.transpose) x = transpose2d(x, cs[0], cs[1]);
    HfTensor& t = out[prefix + s.hf.name];
    if (s.hf.slice_dim < 0) t.data = std::move(x);
    else copy_slab(t.shape, s.hf.slice_dim, s.hf.begin, s.hf.end, t.data.data(), x.data(), true);
  }
  return out;
}

HfStateDict to_hf(const model::ModelConfig& cfg, const std::function<std::vector<float>(const std::string&)>& get) {
  hf_config(cfg);  // refuses models HF cannot represent
  std::vector<model::ParamSpec> specs = model_param_specs(cfg);
  std::erase_if(specs, [](const model::ParamSpec& s) { return model::is_lora_param(s.name); });  // ckpt/peft.h
  return gather_hf(specs, get, "");
}

std::vector<float> from_hf(const model::ParamSpec& s, const HfStateDict& hf, const std::string& source) {
  if (s.hf.stack > 0) {  // our [e] is HF tensor e
    std::vector<int64_t> want = checkpoint_shape(s);
    want.erase(want.begin());
    std::vector<float> x;
    for (int64_t e = 0; e < s.hf.stack; ++e) {
      const std::string name = stacked_hf_name(s.hf.name, e);
      auto it = hf.find(name);
      if (it == hf.end()) fail("{}: no tensor '{}' (expert {} of claw's '{}')", source, name, e, s.name);
      if (it->second.shape != want)
        fail("{}: tensor '{}' has shape {}, but this model's '{}' needs {} per expert (does config.json match the "
             "weights?)",
             source, name, shape_string(it->second.shape), s.name, shape_string(want));
      x.insert(x.end(), it->second.data.begin(), it->second.data.end());
    }
    return x;
  }
  auto it = hf.find(s.hf.name);
  // The Hub's original GPT-2 files name GPT2Model's tensors without the
  // "transformer." prefix that GPT2LMHeadModel.save_pretrained writes.
  const std::string bare = "transformer.";
  if (it == hf.end() && s.hf.name.rfind(bare, 0) == 0) it = hf.find(s.hf.name.substr(bare.size()));
  if (it == hf.end()) fail("{}: no tensor '{}' (claw's '{}')", source, s.hf.name, s.name);
  const HfTensor& t = it->second;
  std::vector<int64_t> want = checkpoint_shape(s);
  if (s.hf.transpose) std::swap(want[0], want[1]);
  std::vector<int64_t> have = t.shape;
  if (s.hf.slice_dim >= 0) {
    if (s.hf.slice_dim >= static_cast<int>(have.size()) || have[s.hf.slice_dim] < s.hf.end)
      fail("{}: tensor '{}' has shape {}; claw's '{}' needs [{}, {}) of dimension {}", source, s.hf.name,
           shape_string(have), s.name, s.hf.begin, s.hf.end, s.hf.slice_dim);
    have[s.hf.slice_dim] = s.hf.end - s.hf.begin;
  }
  if (have != want)
    fail("{}: tensor '{}' has shape {}, but this model's '{}' needs {} (does config.json match the weights?)", source,
         s.hf.name, shape_string(t.shape), s.name, shape_string(want));
  std::vector<float> x;
  if (s.hf.slice_dim < 0) {
    x = t.data;
  } else {
    int64_t n = 1;
    for (int64_t d : have) n *= d;
    x.resize(static_cast<size_t>(n));
    copy_slab(t.shape, s.hf.slice_dim, s.hf.begin, s.hf.end, const_cast<float*>(t.data.data()), x.data(), false);
  }
  if (s.hf.transpose) x = transpose2d(x, want[0], want[1]);
  return x;
}

void write_hf_dir(const std::string& dir, const nlohmann::json& config, const HfStateDict& tensors,
                  uint64_t max_shard_bytes, DType dtype) {
  CLAW_CHECK(dtype == DType::f32 || dtype == DType::bf16, "Hugging Face export in {}", dtype_name(dtype));
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) fail("--output {}: cannot create the directory: {}", dir, ec.message());
  // Shards in name order, each up to max_shard_bytes (a tensor larger than
  // that gets a shard of its own), as transformers' save_pretrained does.
  std::vector<std::vector<const std::string*>> shards(1);
  uint64_t in_shard = 0, total = 0;
  for (const auto& [name, t] : tensors) {
    const uint64_t bytes = t.data.size() * dtype_size(dtype);
    if (in_shard > 0 && max_shard_bytes > 0 && in_shard + bytes > max_shard_bytes) {
      shards.emplace_back();
      in_shard = 0;
    }
    shards.back().push_back(&name);
    in_shard += bytes;
    total += bytes;
  }
  const std::map<std::string, std::string> meta = {{"format", "pt"}};  // transformers requires it
  nlohmann::json weight_map = nlohmann::json::object();
  for (size_t k = 0; k < shards.size(); ++k) {
    const std::string file = shards.size() == 1 ? "model.safetensors"
                                                : fmt::format("model-{:05d}-of-{:05d}.safetensors", k + 1, shards.size());
    std::vector<TensorView> views;
    std::vector<std::vector<uint16_t>> narrowed;  // bf16 copies, alive until the file is written
    narrowed.reserve(shards[k].size());
    for (const std::string* name : shards[k]) {
      const HfTensor& t = tensors.at(*name);
      if (dtype == DType::bf16) {
        narrowed.emplace_back(t.data.size());
        convert(DType::f32, t.data.data(), DType::bf16, narrowed.back().data(), static_cast<int64_t>(t.data.size()));
        views.push_back({*name, DType::bf16, t.shape, narrowed.back().data()});
      } else {
        views.push_back({*name, DType::f32, t.shape, t.data.data()});
      }
      weight_map[*name] = file;
    }
    write_safetensors(dir + "/" + file, views, meta);
  }
  if (shards.size() > 1)
    write_file_atomic(dir + "/model.safetensors.index.json",
                      nlohmann::json{{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}}.dump(2) + "\n");
  nlohmann::json cfg = config;
  if (dtype == DType::bf16) cfg["torch_dtype"] = "bfloat16";
  write_file_atomic(dir + "/config.json", cfg.dump(2) + "\n");
}

nlohmann::json read_hf_config(const std::string& dir, const std::string& flag) {
  const std::string cfg_path = dir + "/config.json";
  if (!std::ifstream(cfg_path))
    fail("{} {}: no {} (a Hugging Face model directory holds config.json and *.safetensors)", flag, dir, cfg_path);
  return read_json_file(cfg_path, "the model's config");
}

void read_hf_tensors(const std::string& path, HfStateDict& into) {
  const SafetensorsFile st(path);
  for (const TensorView& t : st.tensors()) {
    int64_t n = 1;
    for (int64_t d : t.shape) n *= d;
    HfTensor h{t.shape, std::vector<float>(static_cast<size_t>(n))};
    const auto* u16 = static_cast<const uint16_t*>(t.data);
    switch (t.dtype) {
      case DType::f32: std::memcpy(h.data.data(), t.data, n * sizeof(float)); break;
      case DType::bf16: for (int64_t i = 0; i < n; ++i) h.data[i] = bf16_to_f32(u16[i]); break;
      case DType::f16: for (int64_t i = 0; i < n; ++i) h.data[i] = f16_to_f32(u16[i]); break;
      default:
        if (t.name.find("rotary_emb") != std::string::npos || t.name.find("attn.bias") != std::string::npos) continue;
        fail("{}: tensor '{}' is {}; claw imports F32, BF16 and F16 weights", path, t.name, safetensors_dtype(t.dtype));
    }
    into[t.name] = std::move(h);
  }
}

HfModel read_hf_dir(const std::string& dir) {
  HfModel m;
  m.config = read_hf_config(dir);
  std::vector<std::string> files;
  const std::string index = dir + "/model.safetensors.index.json";
  if (fs::exists(index)) {
    const nlohmann::json j = read_json_file(index, "the safetensors index");
    std::set<std::string> unique;
    for (const auto& [name, file] : j.at("weight_map").items()) unique.insert(file.get<std::string>());
    files.assign(unique.begin(), unique.end());
  } else if (fs::exists(dir + "/model.safetensors")) {
    files = {"model.safetensors"};
  } else {
    fail("--input {}: no model.safetensors or model.safetensors.index.json (PyTorch .bin weights are not read; "
         "save with safe_serialization=True)",
         dir);
  }
  for (const std::string& file : files) read_hf_tensors(dir + "/" + file, m.tensors);
  return m;
}

void load_hf_params(const std::vector<model::Param*>& params, const HfStateDict& hf, const std::string& source) {
  for (model::Param* p : params) {
    const model::ParamSpec& s = p->spec;
    const std::vector<float> x = from_hf(s, hf, source);  // the whole tensor, checkpoint shape
    float* dst = p->data();
    const int64_t n = s.local_shape().numel();
    std::fill(dst, dst + n, 0.0f);  // vocabulary padding stays zero
    if (s.shard_dim < 0) {
      std::copy(x.begin(), x.end(), dst);
      continue;
    }
    // This rank's slice (tensor parallelism): local element i is global
    // element s.global_index(i); rows past the checkpoint shape's are padding.
    const std::vector<int64_t> ck = checkpoint_shape(s);
    const Shape& g = s.shape;
    for (int64_t i = 0; i < n; ++i) {
      int64_t gi = s.global_index(i), at = 0, stride = 1;
      bool inside = true;
      for (int d = g.ndim() - 1; d >= 0; --d) {
        const int64_t idx = gi % g[d];
        gi /= g[d];
        inside = inside && idx < ck[d];
        at += idx * stride;
        stride *= ck[d];
      }
      if (inside) dst[i] = x[at];
    }
  }
}

}  // namespace claw::ckpt
