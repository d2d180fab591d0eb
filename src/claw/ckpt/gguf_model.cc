#include "claw/ckpt/gguf_model.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <optional>
#include <set>

#include <fmt/format.h>

#include "claw/ckpt/gguf.h"
#include "claw/ckpt/gguf_arch.h"
#include "claw/ckpt/gguf_recipe.h"
#include "claw/core/error.h"

namespace claw::ckpt {
namespace {

using gguf_arch::Entry;
using kernels::WeightType;

// Row r of the GGUF (adjacent pairs) layout holds HF's (rotate-half) row
// src_row(r): within a head of D rows, 2i + half <- half * D/2 + i.
int64_t hf_row_of(int64_t r, int64_t heads, int64_t rows) {
  const int64_t D = rows / heads, h = r / D, j = r % D;
  return h * D + (j % 2) * (D / 2) + j / 2;
}

// The inverse: HF's row r is the GGUF layout's row gguf_row_of(r).
int64_t gguf_row_of(int64_t r, int64_t heads, int64_t rows) {
  const int64_t D = rows / heads, h = r / D, j = r % D;
  return h * D + 2 * (j % (D / 2)) + j / (D / 2);
}

// Rows of `row_bytes` each, reordered: out row r = in row from(r).
template <typename F>
std::vector<uint8_t> permute_rows(const uint8_t* in, int64_t rows, size_t row_bytes, F from) {
  std::vector<uint8_t> out(static_cast<size_t>(rows) * row_bytes);
  for (int64_t r = 0; r < rows; ++r) std::memcpy(out.data() + r * row_bytes, in + from(r) * row_bytes, row_bytes);
  return out;
}

template <typename F>
void permute_float_rows(HfTensor& t, F from) {
  const int64_t rows = t.shape[0], cols = t.shape.size() == 2 ? t.shape[1] : 1;
  std::vector<float> out(t.data.size());
  for (int64_t r = 0; r < rows; ++r)
    std::copy_n(t.data.begin() + from(r) * cols, cols, out.begin() + r * cols);
  t.data = std::move(out);
}

// [rows, cols] -> [cols, rows].
std::vector<float> transposed(const std::vector<float>& x, int64_t rows, int64_t cols) {
  std::vector<float> y(x.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) y[c * rows + r] = x[r * cols + c];
  return y;
}

// DeepSeek's kv_b_proj [heads (nope + value), kv_lora] <-> attn_k_b
// [heads, kv_lora, nope] and attn_v_b [heads, value, kv_lora].
HfTensor kv_b_part(const Entry& e, const HfTensor& kv) {
  const int64_t H = e.heads, dn = e.nope, dv = e.value, kr = kv.shape[1];
  CLAW_CHECK(kv.shape[0] == H * (dn + dv), "kv_b_proj has {} rows, not {} heads of {} + {}", kv.shape[0], H, dn, dv);
  const bool keys = e.part == Entry::Part::kv_b_keys;
  HfTensor t{keys ? std::vector<int64_t>{H, kr, dn} : std::vector<int64_t>{H, dv, kr}, {}};
  t.data.reserve(static_cast<size_t>(H * kr * (keys ? dn : dv)));
  for (int64_t h = 0; h < H; ++h) {
    const float* head = kv.data.data() + h * (dn + dv) * kr;
    if (keys) {
      for (int64_t r = 0; r < kr; ++r)
        for (int64_t j = 0; j < dn; ++j) t.data.push_back(head[j * kr + r]);
    } else {
      t.data.insert(t.data.end(), head + dn * kr, head + (dn + dv) * kr);
    }
  }
  return t;
}

HfTensor kv_b_joined(const HfTensor& k, const HfTensor& v) {
  const int64_t H = k.shape[0], kr = k.shape[1], dn = k.shape[2], dv = v.shape[1];
  HfTensor kv{{H * (dn + dv), kr}, std::vector<float>(static_cast<size_t>(H * (dn + dv) * kr))};
  for (int64_t h = 0; h < H; ++h) {
    float* head = kv.data.data() + h * (dn + dv) * kr;
    for (int64_t r = 0; r < kr; ++r)
      for (int64_t j = 0; j < dn; ++j) head[j * kr + r] = k.data[(h * kr + r) * dn + j];
    std::copy_n(v.data.begin() + h * dv * kr, dv * kr, head + dn * kr);
  }
  return kv;
}

// The tokenizer as tokenizer.ggml.* (GPT-2 byte-level BPE), or "no_vocab"
// (llama.cpp then takes the vocabulary's size from {arch}.vocab_size).
void write_gguf_tokenizer(gguf::Writer& w, const std::string& path, const model::ModelConfig& cfg,
                          const GgufTokenizer& tok) {
  if (tok.empty()) {
    w.add_string("tokenizer.ggml.model", "no_vocab");
    return;
  }
  if (static_cast<int64_t>(tok.tokens.size()) > cfg.vocab_size)
    fail("{}: the tokenizer has {} tokens, more than the model's vocabulary of {}", path, tok.tokens.size(),
         cfg.vocab_size);
  std::vector<std::string> tokens = tok.tokens;
  std::vector<int32_t> types(tokens.size(), 1);  // normal
  if (tok.eos >= 0 && tok.eos < static_cast<int32_t>(types.size())) types[tok.eos] = 3;  // control
  for (int64_t i = static_cast<int64_t>(tokens.size()); i < cfg.vocab_size; ++i) {
    tokens.push_back(fmt::format("[PAD{}]", i));
    types.push_back(5);  // unused
  }
  w.add_string("tokenizer.ggml.model", "gpt2");
  w.add_string("tokenizer.ggml.pre", "gpt-2");
  w.add_strings("tokenizer.ggml.tokens", tokens);
  w.add_i32s("tokenizer.ggml.token_type", types);
  w.add_strings("tokenizer.ggml.merges", tok.merges);
  if (!tok.chat_template.empty()) w.add_string("tokenizer.chat_template", tok.chat_template);
  if (tok.eos >= 0) {
    w.add_u32("tokenizer.ggml.bos_token_id", static_cast<uint32_t>(tok.eos));
    w.add_u32("tokenizer.ggml.eos_token_id", static_cast<uint32_t>(tok.eos));
  }
}

// An entry's tensor in the GGUF layout (PyTorch order), from the HF state
// dict; empty when the model has none of its tensors.
std::optional<HfTensor> gguf_tensor(const Entry& e, const HfStateDict& hf) {
  if (e.legacy || !hf.count(e.hf[0])) return std::nullopt;
  HfTensor t;
  if (e.part != Entry::Part::whole) {
    t = kv_b_part(e, hf.at(e.hf[0]));
  } else if (e.stacked) {
    const HfTensor& first = hf.at(e.hf[0]);
    t.shape = {static_cast<int64_t>(e.hf.size())};
    t.shape.insert(t.shape.end(), first.shape.begin(), first.shape.end());
    for (const std::string& name : e.hf) {
      const HfTensor& x = hf.at(name);
      CLAW_CHECK(x.shape == first.shape, "GGUF export: expert {} is not the shape of {}", name, e.hf[0]);
      t.data.insert(t.data.end(), x.data.begin(), x.data.end());
    }
  } else {
    t = hf.at(e.hf[0]);
    if (e.transpose) {
      t.data = transposed(t.data, t.shape[0], t.shape[1]);
      std::swap(t.shape[0], t.shape[1]);
    }
    const int64_t rows = t.shape[0];
    if (e.permute_heads > 0) permute_float_rows(t, [&](int64_t r) { return hf_row_of(r, e.permute_heads, rows); });
  }
  if (e.add != 0 || e.mul != 1)
    for (float& x : t.data) x = (x + e.add) * e.mul;
  return t;
}

// Which tensors are matrices in the chosen type: every one of two or more
// dimensions but GPT-2's positions and the routers (f32, as llama.cpp's
// converter keeps them).
bool quantizable(const Entry& e, const HfTensor& t) {
  return t.shape.size() >= 2 && e.gguf != "position_embd.weight" && !e.gguf.ends_with("ffn_gate_inp.weight");
}

}  // namespace

GgufWriteReport write_gguf_model(const std::string& path, const model::ModelConfig& cfg,
                                 const std::function<std::vector<float>(const std::string&)>& get,
                                 const GgufExportOptions& opts, std::vector<std::string>* notes) {
  const nlohmann::json config = hf_config(cfg);  // refuses models with no Hugging Face form
  const std::string arch = gguf_arch::architecture_of(config);
  HfStateDict hf = to_hf(cfg, get);
  const gguf_arch::Output output = gguf_arch::output_rule(arch);
  const std::string embed = arch == "gpt2" ? "transformer.wte.weight" : "model.embed_tokens.weight";
  if (output == gguf_arch::Output::always && !hf.count("lm_head.weight")) hf["lm_head.weight"] = hf.at(embed);
  if (output == gguf_arch::Output::never && hf.count("lm_head.weight"))
    fail("llama.cpp's {} ties the output layer to the embeddings; this model has its own", arch);

  const std::optional<GgufRecipe> given = parse_gguf_recipe(
      opts.recipe.empty() ? std::string(kernels::weight_type_name(opts.type)) : opts.recipe);
  if (!given) fail("--type '{}': valid GGUF types are {}", opts.recipe, kGgufRecipeChoices);
  const GgufRecipe& recipe = *given;
  std::vector<std::string> names;  // the tensors the file will hold, in order (the recipes count some)
  for (const Entry& e : gguf_arch::tensor_table(arch, cfg))
    if (!e.legacy && hf.count(e.hf[0])) names.push_back(e.gguf);
  const int64_t kv_heads = cfg.num_query_groups > 0 ? cfg.num_query_groups : cfg.num_attention_heads;
  GgufTypePlan plan(recipe, names, cfg.num_layers, cfg.moe.num_experts, cfg.num_attention_heads / kv_heads);

  gguf::Writer w;
  w.add_string("general.architecture", arch);
  w.add_string("general.name", opts.name);
  w.add_u32("general.file_type", recipe.file_type);
  w.add_u32("general.quantization_version", 2);
  w.add_u32("general.alignment", 32);
  std::vector<std::string> differs = gguf_arch::write_hparams(w, arch, cfg);
  if (notes) *notes = std::move(differs);
  write_gguf_tokenizer(w, path, cfg, opts.tokenizer);

  GgufWriteReport r;
  std::set<std::string> unused;
  for (const auto& [name, t] : hf) unused.insert(name);
  for (const Entry& e : gguf_arch::tensor_table(arch, cfg)) {
    std::optional<HfTensor> made = gguf_tensor(e, hf);
    if (!made) continue;
    for (const std::string& n : e.hf) unused.erase(n);
    HfTensor& t = *made;
    const int64_t cols = t.shape.back(), rows = static_cast<int64_t>(t.data.size()) / cols;
    const bool matrix = quantizable(e, t);
    WeightType type = matrix ? plan.next(e.gguf, cols) : WeightType::f32;
    if (!kernels::weight_type_fits(type, cols)) type = WeightType::f32;
    if (matrix) {
      ++(type != WeightType::f32 || recipe.base == WeightType::f32 ? r.converted : r.kept_f32);
      ++r.types[std::string(kernels::weight_type_name(type))];
    }
    std::vector<uint8_t> data(kernels::weight_row_bytes(type, cols) * rows);
    kernels::quantize_rows(type, t.data.data(), data.data(), rows, cols);
    r.bytes += data.size();
    ++r.tensors;
    w.add_tensor(e.gguf, t.shape, gguf::ggml_type_of(type), std::move(data));
  }
  CLAW_CHECK(unused.empty(), "GGUF export: no GGUF name for {}", fmt::join(unused, ", "));
  w.write(path);
  return r;
}

namespace {
// Where each Hugging Face tensor is in a file: its entries (two for
// DeepSeek's kv_b_proj) and, for stacked experts, its index.
struct Place {
  std::vector<Entry> entries;
  int64_t index = 0;
};
}  // namespace

GgufModel read_gguf_model(const std::string& path) {
  const gguf::Reader r(path);
  const nlohmann::json& md = r.metadata();
  GgufModel g;
  if (!md.contains("general.architecture") || !md["general.architecture"].is_string())
    fail("{}: metadata general.architecture is missing or not a string", path);
  g.arch = md["general.architecture"].get<std::string>();
  const auto& known_archs = gguf_arch::architectures();
  if (std::find(known_archs.begin(), known_archs.end(), g.arch) == known_archs.end())
    fail("{}: architecture '{}' is not supported; claw reads {}", path, g.arch, fmt::join(known_archs, ", "));
  g.name = md.contains("general.name") && md["general.name"].is_string() ? md["general.name"].get<std::string>()
                                                                         : "gguf";
  const nlohmann::json config = gguf_arch::hf_config_of(r, path, g.arch);
  g.cfg = model_from_hf_config(config, path);
  g.cfg.name = "gguf-" + g.arch;

  std::map<WeightType, int> counts;
  std::set<std::string> known;
  std::map<std::string, Place> places;  // the tensors present, for reading them later
  for (const Entry& e : gguf_arch::tensor_table(g.arch, g.cfg)) {
    known.insert(e.gguf);
    const gguf::TensorInfo* t = r.find(e.gguf);
    if (!t) continue;
    if (e.hf[0] == "lm_head.weight" && g.cfg.tied()) continue;  // a copy of the embeddings
    for (size_t i = 0; i < e.hf.size(); ++i) {
      Place& p = places[e.hf[i]];
      p.entries.push_back(e);
      p.index = static_cast<int64_t>(i);
    }
    const std::vector<int64_t> shape = t->shape();
    const int64_t rows = shape[0];
    if (e.permute_heads > 0 && rows % (2 * e.permute_heads) != 0)
      fail("{}: {} has {} rows, not whole heads of even size for {} heads", path, e.gguf, rows, e.permute_heads);
    const std::optional<WeightType> low = kernels::weight_type_of(static_cast<gguf::GgmlType>(t->type));
    // A tied model's output layer multiplies by the embeddings as stored (a
    // Q4_K_M file keeps them in q6_k for it); they are not counted among the
    // linear layers' types.
    if (e.gguf == "token_embd.weight" && g.cfg.tied() && shape.size() == 2 && low && *low != WeightType::f32) {
      g.matrices[e.hf[0]] = kernels::WeightMatrix::from_bytes(*low, rows, shape[1], r.read(*t));
      continue;
    }
    if (!e.linear || shape.size() != 2 || e.stacked || e.part != Entry::Part::whole || e.add != 0) continue;
    if (low && *low != WeightType::f32) {
      const WeightType wt = *low;
      std::vector<uint8_t> raw = r.read(*t);  // GGUF layout, rows [out, in]
      if (e.permute_heads > 0) {
        const size_t rb = raw.size() / rows;
        raw = permute_rows(raw.data(), rows, rb, [&](int64_t row) { return gguf_row_of(row, e.permute_heads, rows); });
      }
      g.matrices[e.hf[0]] = kernels::WeightMatrix::from_bytes(wt, rows, shape[1], std::move(raw));
    }
    ++counts[low ? *low : WeightType::f32];
  }
  for (const gguf::TensorInfo& t : r.tensors())
    if (!known.count(t.name) && !gguf_arch::is_config_tensor(t.name))
      fail("{}: tensor {} is not part of a {} model claw knows ({} layers)", path, t.name, g.arch, g.cfg.num_layers);
  for (const auto& [t, n] : counts)
    if (n > counts[g.weight_type]) g.weight_type = t;

  // The fp32 tensors are read when asked for, one at a time (a model's
  // worth of them at once would double the peak memory of loading); a
  // layer's stacked experts once for all of them.
  auto reader = std::make_shared<gguf::Reader>(r);
  auto stack = std::make_shared<std::pair<std::string, HfTensor>>();
  const auto read = [reader, stack](const Entry& e) {
    if (e.stacked && stack->first == e.gguf) return stack->second;
    const gguf::TensorInfo& t = *reader->find(e.gguf);
    HfTensor h{t.shape(), reader->read_f32(t)};
    if (e.add != 0)
      for (float& x : h.data) x -= e.add;
    if (e.stacked) *stack = {e.gguf, h};
    return h;
  };
  g.read_tensor = [read, places, path](const std::string& name) {
    auto it = places.find(name);
    if (it == places.end())
      fail("{}: no tensor for {} (its GGUF name would be in the table of its architecture)", path, name);
    const Place& p = it->second;
    if (p.entries.size() == 2) {  // attn_k_b + attn_v_b
      const bool k_first = p.entries[0].part == Entry::Part::kv_b_keys;
      return kv_b_joined(read(p.entries[k_first ? 0 : 1]), read(p.entries[k_first ? 1 : 0]));
    }
    const Entry& e = p.entries[0];
    HfTensor h = read(e);
    if (e.stacked) {
      const std::vector<int64_t> one(h.shape.begin() + 1, h.shape.end());
      const size_t n = h.data.size() / h.shape[0];
      return HfTensor{one, std::vector<float>(h.data.begin() + p.index * n, h.data.begin() + (p.index + 1) * n)};
    }
    const int64_t rows = h.shape[0], cols = h.shape.size() == 2 ? h.shape[1] : 1;
    if (e.permute_heads > 0) permute_float_rows(h, [&](int64_t r) { return gguf_row_of(r, e.permute_heads, rows); });
    if (e.transpose) {
      h.data = transposed(h.data, rows, cols);
      std::swap(h.shape[0], h.shape[1]);
    }
    return h;
  };
  for (const auto& [name, p] : places) g.names.push_back(name);

  for (const auto& [k, v] : md.items())
    if (k.starts_with("tokenizer.")) g.tokenizer_metadata[k] = v;
  return g;
}

HfStateDict GgufModel::all_tensors() const {
  HfStateDict d;
  for (const std::string& n : names) d[n] = read_tensor(n);
  return d;
}

void load_gguf_params(const GgufModel& g, const std::vector<model::Param*>& params, const std::string& source) {
  HfStateDict one;  // the tensors the last parameter read (GPT-2's q, k and v share c_attn)
  for (model::Param* p : params) {
    const model::HfRef& ref = p->spec.hf;
    std::vector<std::string> names{ref.name};
    if (ref.stack > 0) {  // a layer's experts
      names.clear();
      for (int64_t e = 0; e < ref.stack; ++e) names.push_back(stacked_hf_name(ref.name, e));
    }
    if (!one.count(names[0])) {
      one.clear();
      for (const std::string& n : names) one[n] = g.read_tensor(n);
    }
    load_hf_params({p}, one, source);
  }
}

std::map<std::string, kernels::WeightMatrix> gguf_matrices_for(GgufModel& g, const std::vector<model::Param*>& params) {
  std::map<std::string, kernels::WeightMatrix> out;
  for (const model::Param* p : params) {
    const model::ParamSpec& s = p->spec;
    auto it = g.matrices.find(s.hf.name);
    if (it == g.matrices.end() || s.shape.ndim() != 2 || s.shard_dim == 1) continue;
    const kernels::WeightMatrix& m = it->second;  // (moved from at most once, below)
    // The matrix's rows are HF's output features: dimension 1 of a
    // transposed (Conv1D) tensor, else 0.
    const int row_dim = s.hf.transpose ? 1 : 0;
    if (s.hf.slice_dim >= 0 && s.hf.slice_dim != row_dim) continue;
    const int64_t first = s.hf.slice_dim >= 0 ? s.hf.begin : 0;
    // Rows beyond the file's: vocabulary padding (a tied embedding's too).
    const int64_t mapped = std::min(s.hf.rows >= 0 ? s.hf.rows : s.shape[0], m.rows() - first);
    const int64_t local = s.local_shape()[0], begin = s.shard_dim == 0 ? s.shard_index * local : 0;
    if (m.cols() != s.shape[1]) continue;
    if (first == 0 && begin == 0 && local == m.rows() && mapped == m.rows()) {
      out[s.name] = std::move(it->second);
      g.matrices.erase(it);
      continue;
    }
    const size_t rb = m.row_bytes();
    const std::vector<uint8_t> stored = m.gguf_bytes();
    std::vector<uint8_t> bytes(static_cast<size_t>(local) * rb, 0);
    for (int64_t r = 0; r < local; ++r) {
      const int64_t global = begin + r;
      if (global < mapped) std::memcpy(bytes.data() + r * rb, stored.data() + (first + global) * rb, rb);
    }
    out[s.name] = kernels::WeightMatrix::from_bytes(m.type(), local, m.cols(), std::move(bytes));
  }
  return out;
}

}  // namespace claw::ckpt
