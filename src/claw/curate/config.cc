#include <algorithm>

#include <fmt/format.h>

#include "claw/core/error.h"
#include "claw/curate/dedup_stage.h"
#include "claw/curate/pipeline.h"
#include "claw/curate/stages.h"
#include "claw/data/builtin_corpus.h"
#include "claw/data/file_io.h"

// `claw curate --config`: the TOML file read into a CurateConfig, every key
// checked (an unknown one is an error naming the file, the table and the
// valid keys), every stage built once so that a bad setting fails before
// any document is read.

namespace claw::curate {

namespace {

void check_keys(const toml::table& t, std::initializer_list<std::string_view> known, const std::string& where) {
  for (const auto& [k, v] : t) {
    if (std::find(known.begin(), known.end(), k.str()) != known.end()) continue;
    throw Error(fmt::format("{}: unknown key '{}' (valid: {})", where, k.str(), fmt::join(known, ", ")));
  }
}

std::string toml_string(const toml::table& t, std::string_view key, std::string fallback, const std::string& where) {
  const toml::node* n = t.get(key);
  if (!n) return fallback;
  if (!n->is_string()) throw Error(fmt::format("{}: '{}' must be a string", where, key));
  return *n->value<std::string>();
}

bool toml_bool(const toml::table& t, std::string_view key, bool fallback, const std::string& where) {
  const toml::node* n = t.get(key);
  if (!n) return fallback;
  if (!n->is_boolean()) throw Error(fmt::format("{}: '{}' must be true or false", where, key));
  return *n->value<bool>();
}

}  // namespace

CurateConfig parse_curate_config(const std::string& toml_text, const std::string& file) {
  toml::table root;
  try {
    root = toml::parse(toml_text, file);
  } catch (const toml::parse_error& e) {
    const auto& where = e.source().begin;
    fail("{}:{}:{}: {}", file, where.line, where.column, e.description());
  }
  CurateConfig c;
  c.file = file;
  check_keys(root, {"input", "output", "stage"}, file);
  const toml::table* input = root["input"].as_table();
  if (!input) fail("{}: an [input] table with paths = [...] is required", file);
  const std::string iw = file + " [input]";
  check_keys(*input, {"paths", "format", "text_key", "id_key"}, iw);
  if (const toml::array* paths = (*input)["paths"].as_array()) {
    for (const toml::node& p : *paths) {
      if (!p.is_string()) fail("{}: paths must be strings", iw);
      c.inputs.push_back(*p.value<std::string>());
    }
  } else if (auto one = (*input)["paths"].value<std::string>()) {
    c.inputs.push_back(*one);
  }
  if (c.inputs.empty()) fail("{}: paths = [...] must name at least one file, directory or glob", iw);
  const std::string format = toml_string(*input, "format", "jsonl", iw);
  if (format != "jsonl" && format != "text") fail("{}: format = \"{}\" is not \"jsonl\" or \"text\"", iw, format);
  c.text_format = format == "text";
  c.text_key = toml_string(*input, "text_key", "text", iw);
  c.id_key = toml_string(*input, "id_key", "id", iw);

  const toml::table* output = root["output"].as_table();
  if (!output) fail("{}: an [output] table with dir = \"...\" is required", file);
  const std::string ow = file + " [output]";
  check_keys(*output, {"dir", "compression", "write_removed", "megatron"}, ow);
  c.output_dir = toml_string(*output, "dir", "", ow);
  if (c.output_dir.empty()) fail("{}: dir = \"...\" is required", ow);
  const std::string compression = toml_string(*output, "compression", "zstd", ow);
  if (compression != "zstd" && compression != "none")
    fail("{}: compression = \"{}\" is not \"zstd\" or \"none\"", ow, compression);
  c.compress = compression == "zstd";
  c.write_removed = toml_bool(*output, "write_removed", true, ow);
  if (const toml::node* m = output->get("megatron")) {
    const toml::table* mt = m->as_table();
    const std::string mw = file + " [output.megatron]";
    if (!mt) fail("{}: must be a table (output_prefix, tokenizer_type, ...)", mw);
    check_keys(*mt, {"output_prefix", "tokenizer_type", "vocab_file", "merge_file", "tokenizer_model", "append_eod"},
               mw);
    MegatronOutput& o = c.megatron;
    o.output_prefix = toml_string(*mt, "output_prefix", "", mw);
    if (o.output_prefix.empty()) fail("{}: output_prefix = \"...\" is required", mw);
    o.tokenizer.type = toml_string(*mt, "tokenizer_type", o.tokenizer.type, mw);
    o.tokenizer.vocab_file = toml_string(*mt, "vocab_file", "", mw);
    o.tokenizer.merge_file = toml_string(*mt, "merge_file", "", mw);
    o.tokenizer.model_file = toml_string(*mt, "tokenizer_model", "", mw);
    o.append_eod = toml_bool(*mt, "append_eod", true, mw);
    if (o.tokenizer.type == "GPT2BPETokenizer" && o.tokenizer.vocab_file.empty() && o.tokenizer.merge_file.empty()) {
      o.tokenizer.vocab_file = data::default_data_dir() + "/gpt2/encoder.json";
      o.tokenizer.merge_file = data::default_data_dir() + "/gpt2/vocab.bpe";
    }
    try {
      data::make_tokenizer(o.tokenizer);  // a wrong tokenizer fails now, not after the curation
    } catch (const Error& e) {
      fail("{}: {}", mw, e.what());
    }
  }

  if (const toml::node* stages = root.get("stage")) {
    const toml::array* list = stages->as_array();
    if (!list) fail("{}: stages are written [[stage]] (an array of tables)", file);
    int n = 0;
    for (const toml::node& node : *list) {
      ++n;
      const toml::table* t = node.as_table();
      if (!t) fail("{}: [[stage]] {} is not a table", file, n);
      const auto kind = (*t)["kind"].value<std::string>();
      if (!kind)
        fail("{}: [[stage]] {} needs kind = \"...\" (one of: {})", file, n, fmt::join(stage_kinds(), ", "));
      if (std::find(stage_kinds().begin(), stage_kinds().end(), *kind) == stage_kinds().end())
        fail("{}: [[stage]] {}: unknown kind \"{}\" (valid: {})", file, n, *kind, fmt::join(stage_kinds(), ", "));
      StageSpec spec;
      spec.kind = *kind;
      spec.where = fmt::format("{} [[stage]] {} ({})", file, n, *kind);
      if (is_dedup_kind(*kind)) {
        spec.dedup_keys = std::make_shared<toml::table>(*t);
        // Checked now: a typo should not wait for the first segment to end.
        StageKeys keys(*spec.dedup_keys, spec.where);
        make_deduplicator(*kind, keys, "");
      } else {
        StageKeys keys(*t, spec.where);
        spec.stream = make_stage(*kind, keys);
      }
      c.stages.push_back(std::move(spec));
    }
  }
  return c;
}

CurateConfig load_curate_config(const std::string& path) {
  return parse_curate_config(data::read_file(path, "--config"), path);
}

}  // namespace claw::curate
