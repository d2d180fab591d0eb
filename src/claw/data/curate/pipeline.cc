#include "claw/data/curate/pipeline.h"

#include <glob.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "claw/core/error.h"
#include "claw/core/log.h"
#include "claw/data/chunk_pipeline.h"
#include "claw/data/curate/dedup.h"
#include "claw/data/curate/dedup_stage.h"
#include "claw/data/curate/stages.h"
#include "claw/data/curate/text_stats.h"
#include "claw/data/builtin_corpus.h"
#include "claw/data/file_io.h"
#include "claw/data/indexed_dataset.h"
#include "claw/data/json_line.h"
#include "claw/data/jsonl_reader.h"
#include "claw/data/jsonl_record.h"
#include "claw/data/preprocess.h"
#include "claw/data/zstd_stream.h"

namespace claw::data::curate {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr int64_t kMaxBadLineWarnings = 10;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// ---- configuration --------------------------------------------------------

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

// ---- input ----------------------------------------------------------------

struct Shard {
  std::vector<std::string> files;  // jsonl: one file; text: the files of one directory
  std::string name;                // as given, for messages
};

bool is_jsonl_name(const std::string& name) {
  for (const char* ext : {".jsonl", ".jsonl.zst", ".json", ".json.zst", ".zst"})
    if (name.size() >= std::strlen(ext) && name.ends_with(ext)) return true;
  return false;
}

std::vector<std::string> files_under(const std::string& dir, bool text) {
  std::vector<std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    const std::string p = e.path().string();
    if (text ? p.ends_with(".txt") : is_jsonl_name(p)) out.push_back(p);
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<Shard> expand_inputs(const CurateConfig& c) {
  std::vector<Shard> shards;
  for (const std::string& pattern : c.inputs) {
    std::vector<std::string> matches;
    glob_t g{};
    if (::glob(pattern.c_str(), 0, nullptr, &g) == 0)
      for (size_t i = 0; i < g.gl_pathc; ++i) matches.emplace_back(g.gl_pathv[i]);
    ::globfree(&g);
    if (matches.empty())
      fail("{} [input] paths: '{}' matches no file or directory", c.file, pattern);
    for (const std::string& m : matches) {
      if (fs::is_directory(m)) {
        std::vector<std::string> files = files_under(m, c.text_format);
        if (files.empty())
          fail("{} [input] paths: directory '{}' has no {} files", c.file, m,
               c.text_format ? ".txt" : ".jsonl/.jsonl.zst");
        if (c.text_format) shards.push_back({files, m});
        else
          for (std::string& f : files) shards.push_back({{f}, f});
      } else {
        shards.push_back({{m}, m});
      }
    }
  }
  return shards;
}

// The files of a text shard as JSONL chunks ({"id": path, "text": ...}):
// the reader interface of OrderedChunkPipeline. One file is one document.
class TextFilesReader {
 public:
  explicit TextFilesReader(std::vector<std::string> files) : files_(std::move(files)) {}
  bool next(LineChunk& chunk, size_t target_bytes) {
    chunk.text.clear();
    chunk.first_line = next_ + 1;
    chunk.num_lines = 0;
    while (next_ < files_.size() && chunk.text.size() < target_bytes) {
      const std::string& f = files_[next_++];
      std::string text = read_file(f, "input text file");
      const size_t bad = find_invalid_utf8(text);
      if (bad != std::string::npos)
        fail("{}: invalid UTF-8 at byte {} (0x{:02x})", f, bad, static_cast<unsigned char>(text[bad]));
      chunk.text += json{{"id", f}, {"text", std::move(text)}}.dump();
      chunk.text += '\n';
      ++chunk.num_lines;
      bytes_ += fs::file_size(f);
    }
    chunk.input_offset = bytes_;
    return chunk.num_lines > 0;
  }

 private:
  std::vector<std::string> files_;
  size_t next_ = 0;
  uint64_t bytes_ = 0;
};

// ---- output ---------------------------------------------------------------

// A JSONL file written whole or not at all (TempFileWriter), zstd or plain.
class ShardWriter {
 public:
  ShardWriter(const std::string& path, bool compress) : file_(path) {
    if (compress) zstd_.emplace(path, 3);
  }
  void write(std::string_view lines) {
    if (lines.empty()) return;
    if (!zstd_) return file_.write(lines.data(), lines.size());
    buf_.clear();
    zstd_->compress(lines, buf_);
    file_.write(buf_.data(), buf_.size());
  }
  void commit() {
    if (zstd_) {
      buf_.clear();
      zstd_->finish(buf_);
      file_.write(buf_.data(), buf_.size());
    }
    file_.commit();
  }

 private:
  TempFileWriter file_;
  std::optional<ZstdEncoder> zstd_;
  std::string buf_;
};

void write_json_file(const std::string& path, const json& j) {
  TempFileWriter w(path);
  const std::string s = j.dump(1) + "\n";
  w.write(s.data(), s.size());
  w.commit();
}

json counters_json(const StageCounters& c) {
  return {{"docs_in", c.docs_in}, {"docs_out", c.docs_out}, {"bytes_in", c.bytes_in}, {"bytes_out", c.bytes_out},
          {"seconds", c.seconds}, {"counts", c.counts}};
}

StageCounters counters_from_json(const json& j) {
  StageCounters c;
  c.docs_in = j.at("docs_in"), c.docs_out = j.at("docs_out");
  c.bytes_in = j.at("bytes_in"), c.bytes_out = j.at("bytes_out");
  c.seconds = j.at("seconds");
  for (const auto& [k, v] : j.at("counts").items()) c.add(k, v.get<int64_t>());
  return c;
}

// ---- one segment over one shard --------------------------------------------

// The figures of one segment over one shard: also its done marker.
struct ShardStats {
  int64_t lines = 0, docs_in = 0, docs_out = 0, bad_lines = 0, blank_lines = 0;
  uint64_t bytes_in = 0, bytes_out = 0;
  bool empty_file = false;
  std::vector<StageCounters> stages;  // per stage of the whole pipeline (zero outside the segment)

  void merge(const ShardStats& o) {
    lines += o.lines, docs_in += o.docs_in, docs_out += o.docs_out, bad_lines += o.bad_lines;
    blank_lines += o.blank_lines, bytes_in += o.bytes_in, bytes_out += o.bytes_out;
    for (size_t i = 0; i < stages.size(); ++i) stages[i].merge(o.stages[i]);
  }
  json to_json() const {
    json s = json::array();
    for (const StageCounters& c : stages) s.push_back(counters_json(c));
    return {{"lines", lines},         {"docs_in", docs_in},   {"docs_out", docs_out},   {"bad_lines", bad_lines},
            {"blank_lines", blank_lines}, {"bytes_in", bytes_in}, {"bytes_out", bytes_out}, {"empty_file", empty_file},
            {"stages", s}};
  }
  static ShardStats from_json(const json& j) {
    ShardStats s;
    s.lines = j.at("lines"), s.docs_in = j.at("docs_in"), s.docs_out = j.at("docs_out");
    s.bad_lines = j.at("bad_lines"), s.blank_lines = j.at("blank_lines");
    s.bytes_in = j.at("bytes_in"), s.bytes_out = j.at("bytes_out"), s.empty_file = j.at("empty_file");
    for (const json& c : j.at("stages")) s.stages.push_back(counters_from_json(c));
    return s;
  }
};

struct BadLine {
  int64_t line;
  std::string reason;
};

struct ChunkResult {
  std::string kept, removed;
  ShardStats stats;
  std::vector<BadLine> bad;
  uint64_t input_offset = 0;
  std::exception_ptr failure;
};

// What a segment reads: the raw input (segment 0) or the previous
// segment's output, whose lines carry the document's origin:
//   {"origin": {"id": ..., "source": ..., "line": ...}, "record": {...}}
struct SegmentInput {
  bool wrapped = false;
  const std::vector<Removal>* removals = nullptr;      // from the deduplicator before this segment
  const std::map<uint64_t, std::string>* kept_ids = nullptr;
  std::string removed_by;                              // the deduplicator's kind
  bool paragraph_level = false;                        // removals name lines of documents
  size_t dedup_stage = 0;                              // its index: bytes it passes on are counted here
  uint64_t first_doc = 0;                              // number of the shard's first document
};

class Segment {
 public:
  Segment(const CurateConfig& c, size_t first_stage, size_t end_stage, bool wrap_output, bool skip_bad_lines)
      : c_(c), first_(first_stage), end_(end_stage), wrap_(wrap_output), skip_bad_(skip_bad_lines) {}

  ChunkResult process(const LineChunk& chunk, const std::string& source, const SegmentInput& in) const {
    ChunkResult r;
    r.stats.stages.resize(c_.stages.size());
    r.input_offset = chunk.input_offset;
    std::string_view rest = chunk.text;
    for (int64_t line_no = chunk.first_line; !rest.empty(); ++line_no) {
      const size_t nl = rest.find('\n');
      std::string_view line = rest.substr(0, nl);
      rest.remove_prefix(nl == std::string_view::npos ? rest.size() : nl + 1);
      ++r.stats.lines;
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      if (is_blank_line(line)) {
        ++r.stats.blank_lines;
        continue;
      }
      const std::string error = process_line(line, line_no, source, in, r);
      if (!error.empty()) {
        r.bad.push_back({line_no, error});
        if (!skip_bad_) break;
      }
    }
    return r;
  }

 private:
  // Empty, or why the line is bad.
  std::string process_line(std::string_view line, int64_t line_no, const std::string& source, const SegmentInput& in,
                           ChunkResult& r) const {
    json parsed;
    if (std::string e = parse_json_object(line, parsed); !e.empty()) return e;
    Document doc;
    json* record = &parsed;
    std::string_view raw = line;
    std::string raw_record;
    if (in.wrapped) {
      const json& origin = parsed.at("origin");
      doc.id = origin.at("id").get<std::string>();
      doc.source = origin.at("source").get<std::string>();
      doc.line = origin.at("line").get<int64_t>();
      record = &parsed.at("record");
      raw_record = record->dump();
      raw = raw_record;
    } else {
      doc.source = source;
      doc.line = line_no;
    }
    const std::string& text_key = c_.text_format ? std::string("text") : c_.text_key;
    auto text = record->find(text_key);
    if (text == record->end())
      return fmt::format("no key \"{}\" (keys: {}); set [input] text_key", text_key, describe_json_keys(*record));
    if (!text->is_string())
      return fmt::format("\"{}\" is {}, not a string", text_key, describe_json_type(*text));
    doc.text = text->get<std::string>();
    if (!in.wrapped) {
      const std::string& id_key = c_.text_format ? std::string("id") : c_.id_key;
      auto id = record->find(id_key);
      if (id != record->end() && id->is_string()) doc.id = id->get<std::string>();
      else if (id != record->end() && id->is_number()) doc.id = id->dump();
      else doc.id = fmt::format("{}:{}", fs::path(source).filename().string(), line_no);
    }
    ++r.stats.docs_in;
    r.stats.bytes_in += doc.text.size();
    // The record keeps the text as read (its node is not touched before the
    // comparison below; inserting "metadata" invalidates no reference).
    const std::string& original = text->get_ref<const std::string&>();
    std::string_view removed_by, reason;
    std::string duplicate_of;
    if (in.removals) {
      const uint64_t number = in.first_doc + static_cast<uint64_t>(line_no - 1);
      auto it = std::lower_bound(in.removals->begin(), in.removals->end(), number,
                                 [](const Removal& a, uint64_t d) { return a.doc < d; });
      StageCounters& dc = r.stats.stages[in.dedup_stage];
      if (in.paragraph_level) {
        // The document loses its repeated lines; one left with none but
        // blank lines is removed. What passes is counted here.
        thread_local std::vector<uint32_t> lines;
        lines.clear();
        for (; it != in.removals->end() && it->doc == number; ++it) lines.push_back(it->paragraph);
        if (!lines.empty()) {
          doc.text = remove_paragraphs(doc.text, lines);
          dc.add("docs_edited", 1);
          if (text::strip(doc.text).empty()) removed_by = in.removed_by, reason = "duplicate_paragraphs";
        }
        if (removed_by.empty()) ++dc.docs_out, dc.bytes_out += doc.text.size();
      } else if (it != in.removals->end() && it->doc == number) {
        removed_by = in.removed_by, reason = "duplicate";
        auto k = in.kept_ids->find(it->kept);
        duplicate_of = k == in.kept_ids->end() ? std::string() : k->second;
      } else {
        dc.bytes_out += doc.text.size();
      }
    }
    for (size_t s = first_; s < end_ && removed_by.empty(); ++s) {
      StageCounters& sc = r.stats.stages[s];
      const auto t0 = Clock::now();
      ++sc.docs_in;
      sc.bytes_in += doc.text.size();
      const std::string_view why = c_.stages[s].stream->process(doc, sc);
      sc.seconds += seconds_since(t0);
      if (!why.empty()) {
        removed_by = c_.stages[s].kind, reason = why;
        break;
      }
      ++sc.docs_out;
      sc.bytes_out += doc.text.size();
    }
    const bool annotated = !doc.labels.empty() || !doc.scores.empty();
    if (annotated) {
      json& meta = (*record)["metadata"];
      if (!meta.is_object()) meta = json::object();
      for (const auto& [k, v] : doc.labels) meta[k] = v;
      for (const auto& [k, v] : doc.scores) meta[k] = v;
    }
    const bool changed = annotated || doc.text != original;

    if (!removed_by.empty()) {
      if (!c_.write_removed) return {};
      (*record)[text_key] = doc.text;
      json curate{{"stage", removed_by}, {"reason", reason}};
      if (!duplicate_of.empty()) curate["duplicate_of"] = duplicate_of;
      (*record)["curate"] = std::move(curate);
      r.removed += record->dump();
      r.removed += '\n';
      return {};
    }
    ++r.stats.docs_out;
    r.stats.bytes_out += doc.text.size();
    std::string_view out_record = raw;
    std::string rewritten;
    if (changed) {
      (*record)[text_key] = doc.text;
      rewritten = record->dump();
      out_record = rewritten;
    }
    if (wrap_) {
      r.kept += json{{"origin", {{"id", doc.id}, {"source", doc.source}, {"line", doc.line}}}}.dump();
      r.kept.pop_back();  // the closing brace: the record follows
      r.kept += ",\"record\":";
      r.kept += out_record;
      r.kept += "}\n";
    } else {
      r.kept += out_record;
      r.kept += '\n';
    }
    return {};
  }

  const CurateConfig& c_;
  size_t first_, end_;
  bool wrap_, skip_bad_;
};

}  // namespace

std::string shard_name(int64_t shard, bool compress) {
  return fmt::format("shard_{:05}.jsonl{}", shard, compress ? ".zst" : "");
}

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
      o.tokenizer.vocab_file = default_data_dir() + "/gpt2/encoder.json";
      o.tokenizer.merge_file = default_data_dir() + "/gpt2/vocab.bpe";
    }
    try {
      make_tokenizer(o.tokenizer);  // a wrong tokenizer fails now, not after the curation
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
  return parse_curate_config(read_file(path, "--config"), path);
}

CurateStats run_curate(const CurateConfig& c, const CurateOptions& o) {
  if (o.threads < 1) fail("--threads {} is invalid; it must be at least 1", o.threads);
  if (o.num_tasks < 1 || o.task_id < 0 || o.task_id >= o.num_tasks)
    fail("--task-id {} is invalid for --num-tasks {}; it must be in [0, {})", o.task_id, o.num_tasks, o.num_tasks);
  const auto start = Clock::now();
  const std::vector<Shard> shards = expand_inputs(c);
  const fs::path dir(c.output_dir);
  std::error_code ec;
  for (const fs::path& p : {dir, dir / "removed", dir / "stats", dir / "work"}) {
    fs::create_directories(p, ec);
    if (ec) fail("{} [output] dir: cannot create {}: {}", c.file, p.string(), ec.message());
  }

  // Segments: the streaming stages between deduplication stages.
  std::vector<size_t> cuts{0};  // segment k runs stages [cuts[k], dedup or end)
  for (size_t s = 0; s < c.stages.size(); ++s)
    if (c.stages[s].dedup_keys) cuts.push_back(s + 1);
  const size_t num_segments = cuts.size();
  auto segment_end = [&](size_t k) { return k + 1 < num_segments ? cuts[k + 1] - 1 : c.stages.size(); };
  auto out_path = [&](size_t k, int64_t shard) {
    return k + 1 == num_segments ? (dir / shard_name(shard, c.compress)).string()
                                 : (dir / "work" / fmt::format("segment_{}_{}", k, shard_name(shard, true))).string();
  };
  auto removed_path = [&](size_t k, int64_t shard) {
    return (dir / "removed" / (k == 0 ? shard_name(shard, c.compress) : fmt::format("segment_{}_{}", k, shard_name(shard, c.compress)))).string();
  };
  const std::string text_key = c.text_format ? "text" : c.text_key;
  auto stats_path = [&](size_t k, int64_t shard) {
    return (dir / "stats" / fmt::format("segment_{}_shard_{:05}.json", k, shard)).string();
  };
  // A done shard's figures, from its marker.
  auto read_stats = [&](size_t k, int64_t shard) {
    return ShardStats::from_json(json::parse(read_file(stats_path(k, shard), "shard stats")));
  };
  auto fingerprints_path = [&](size_t d, int64_t shard) {
    return (dir / "work" / fmt::format("dedup_{}_fingerprints_shard_{:05}.bin", d, shard)).string();
  };
  // The fingerprints of the documents of segment k's shard s, computed by
  // the workers and handed to use(i, fingerprint) in document order (i from
  // 0 within the shard) on this thread. A deduplicator without fingerprints
  // (paragraph-level) takes each text in the workers instead, as document
  // `base` + i.
  auto fingerprint_shard = [&](CorpusDeduplicator& fp, size_t k, size_t s, uint64_t base, auto&& use,
                               StageCounters& sc) {
    const std::string source = out_path(k, s);
    JsonlReader reader(source, "intermediate shard");
    struct Prints {
      std::vector<std::byte> bytes;
      int64_t docs = 0;
      uint64_t text_bytes = 0;
      std::exception_ptr failure;
    };
    const size_t n = fp.fingerprint_bytes();
    OrderedChunkPipeline<Prints> p(reader, o.chunk_bytes, o.threads, [&](const LineChunk& ch) {
      Prints r;
      r.bytes.resize(static_cast<size_t>(ch.num_lines) * n);
      for_each_line(ch.text, [&](int64_t line_no, std::string_view line) {
        const json j = json::parse(line);
        const std::string& text = j.at("record").at(text_key).get_ref<const std::string&>();
        if (n == 0) fp.add_text(base + static_cast<uint64_t>(ch.first_line + line_no - 2), text);
        else fp.fingerprint(text, std::span<std::byte>(r.bytes).subspan(static_cast<size_t>(r.docs) * n, n));
        ++r.docs, r.text_bytes += text.size();
      });
      r.bytes.resize(static_cast<size_t>(r.docs) * n);
      return r;
    });
    uint64_t i = 0;
    while (std::optional<Prints> r = p.next()) {
      if (r->failure) std::rethrow_exception(r->failure);
      for (int64_t j = 0; j < r->docs && n > 0; ++j) use(i++, std::span<const std::byte>(r->bytes).subspan(j * n, n));
      sc.docs_in += r->docs, sc.bytes_in += r->text_bytes;
    }
  };

  CurateStats total;
  total.shards = static_cast<int64_t>(shards.size());
  for (const StageSpec& s : c.stages) total.kinds.push_back(s.kind);
  ShardStats all;
  all.stages.resize(c.stages.size());
  uint64_t input_total = 0;
  for (const Shard& s : shards)
    for (const std::string& f : s.files) input_total += fs::file_size(f, ec);

  std::unique_ptr<Tokenizer> tokenizer;          // [output.megatron], made when first needed
  std::vector<Removal> removals;                 // of the deduplicator before the segment
  bool paragraph_level = false;                  // whether they name paragraphs
  std::map<uint64_t, std::string> kept_ids;      // their kept documents' ids
  std::vector<uint64_t> out_first;               // number of each shard's first document there
  for (size_t k = 0; k < num_segments; ++k) {
    const Segment segment(c, cuts[k], segment_end(k), k + 1 < num_segments, o.skip_bad_lines);
    uint64_t done_bytes = 0;
    int64_t done_docs = 0;
    total.docs_out = total.bytes_out = 0;  // of the last segment run
    for (size_t s = 0; s < shards.size(); ++s) {
      if (k == 0 && static_cast<int>(s % o.num_tasks) != o.task_id) continue;
      ShardStats stats;
      if (path_exists(stats_path(k, s))) {  // done in an earlier run
        stats = read_stats(k, s);
        if (k == 0) ++total.shards_resumed;
      } else {
        stats.stages.resize(c.stages.size());
        ShardWriter kept(out_path(k, s), k + 1 < num_segments || c.compress);
        std::optional<ShardWriter> removed;
        if (c.write_removed) removed.emplace(removed_path(k, s), c.compress);
        SegmentInput in;
        in.wrapped = k > 0;
        if (k > 0) {
          in.removals = &removals, in.kept_ids = &kept_ids, in.removed_by = c.stages[cuts[k] - 1].kind;
          in.dedup_stage = cuts[k] - 1;
          in.paragraph_level = paragraph_level;
          in.first_doc = out_first[s];
        }
        const std::string source = k == 0 ? shards[s].name : out_path(k - 1, s);
        auto consume = [&](auto& pipeline) {
          while (std::optional<ChunkResult> r = pipeline.next()) {
            if (r->failure) std::rethrow_exception(r->failure);
            for (const BadLine& bad : r->bad) {
              if (!o.skip_bad_lines)
                fail("{}:{}: {} (pass --skip-bad-lines to drop bad lines)", source, bad.line, bad.reason);
              if (all.bad_lines + stats.bad_lines + 1 <= kMaxBadLineWarnings)
                log::warn("curate", "{}:{}: skipped: {}", source, bad.line, bad.reason);
            }
            stats.bad_lines += static_cast<int64_t>(r->bad.size());
            stats.merge(r->stats);
            kept.write(r->kept);
            if (removed) removed->write(r->removed);
            if (o.progress)
              o.progress(input_total ? std::min(1.0, double(done_bytes + r->input_offset) / input_total) : 1.0,
                         done_docs + stats.docs_in, done_bytes + r->input_offset, seconds_since(start));
          }
        };
        if (k == 0 && c.text_format) {
          TextFilesReader reader(shards[s].files);
          OrderedChunkPipeline<ChunkResult, TextFilesReader> p(reader, o.chunk_bytes, o.threads,
              [&](const LineChunk& ch) { return segment.process(ch, source, in); });
          consume(p);
        } else {
          JsonlReader reader(source, "input");
          if (k == 0 && reader.input_size() == 0) {
            if (!o.skip_bad_lines)
              fail("{}: the file is empty (pass --skip-bad-lines to skip empty files)", source);
            log::warn("curate", "{}: empty file skipped", source);
            stats.empty_file = true;
          }
          OrderedChunkPipeline<ChunkResult> p(reader, o.chunk_bytes, o.threads,
              [&](const LineChunk& ch) { return segment.process(ch, source, in); });
          consume(p);
        }
        kept.commit();
        if (removed) removed->commit();
        write_json_file(stats_path(k, s), stats.to_json());
      }
      if (k + 1 == num_segments && !c.megatron.output_prefix.empty()) {
        const std::string prefix = fmt::format("{}_shard_{:05}", c.megatron.output_prefix, s);
        const std::string dataset = preprocess_output_prefix(prefix, text_key);
        if (!path_exists(dataset + ".idx")) {
          if (!tokenizer) tokenizer = make_tokenizer(c.megatron.tokenizer);
          PreprocessOptions p;
          p.input = out_path(k, s);
          p.json_keys = {text_key};
          p.output_prefix = prefix;
          p.append_eod = c.megatron.append_eod;
          p.workers = o.threads;
          preprocess(p, *tokenizer);
        }
        total.megatron.emplace_back(dataset, IndexedDataset(dataset).total_tokens());
      }
      if (k == 0) {
        for (const std::string& f : shards[s].files) done_bytes += fs::file_size(f, ec);
        total.empty_files += stats.empty_file;
      }
      done_docs += stats.docs_in;
      all.merge(stats);
      total.docs_out += stats.docs_out, total.bytes_out += stats.bytes_out;
      if (k == 0) {
        total.docs_in += stats.docs_in, total.bytes_in += stats.bytes_in;
        total.bad_lines += stats.bad_lines, total.blank_lines += stats.blank_lines;
      }
    }
    if (k + 1 == num_segments) break;
    if (o.num_tasks > 1) {
      // The fingerprints of this task's shards for the deduplicator (the
      // costly part: shingling and hashing), saved for the merge run.
      const size_t d = cuts[k + 1] - 1;
      StageKeys keys(*c.stages[d].dedup_keys, c.stages[d].where);
      const auto fingerprinter = make_deduplicator(c.stages[d].kind, keys, "");
      const size_t fp_bytes = fingerprinter->fingerprint_bytes();
      for (size_t s = o.task_id; s < shards.size() && fp_bytes > 0; s += o.num_tasks) {
        if (path_exists(fingerprints_path(d, s))) continue;
        TempFileWriter out(fingerprints_path(d, s));
        StageCounters unused;
        uint64_t next = 0;  // fingerprints arrive in document order
        fingerprint_shard(*fingerprinter, k, s, 0, [&](uint64_t i, std::span<const std::byte> fp) {
          CLAW_CHECK(i == next);
          ++next;
          out.write(fp.data(), fp_bytes);
        }, unused);
        out.commit();
      }
      log::info("curate", "task {} of {}: done with its shards and their fingerprints; run once more without "
                "--num-tasks to deduplicate and finish", o.task_id, o.num_tasks);
      break;
    }

    // The deduplicator after this segment, over its output; documents are
    // numbered in shard and line order.
    out_first.assign(shards.size() + 1, 0);
    for (size_t s = 0; s < shards.size(); ++s)
      out_first[s + 1] = out_first[s] + read_stats(k, s).docs_out;
    const size_t d = cuts[k + 1] - 1;
    paragraph_level = c.stages[d].kind == "paragraph_dedup";
    const std::string removals_path = (dir / "work" / fmt::format("dedup_{}.json", d)).string();
    if (path_exists(removals_path)) {
      const json j = json::parse(read_file(removals_path, "deduplication result"));
      removals.clear();
      for (const json& r : j.at("removed"))
        removals.push_back({r[0].get<uint64_t>(), r[1].get<uint64_t>(),
                            r.size() > 2 ? r[2].get<uint32_t>() : kWholeDocument});
      all.stages[d].merge(counters_from_json(j.at("stats")));
    } else {
      StageKeys keys(*c.stages[d].dedup_keys, c.stages[d].where);
      const std::string scratch = (dir / "work" / fmt::format("dedup_{}", d)).string();
      fs::create_directories(scratch, ec);
      auto dedup = make_deduplicator(c.stages[d].kind, keys, scratch);
      StageCounters sc;
      const auto t0 = Clock::now();
      const size_t fp_bytes = dedup->fingerprint_bytes();
      int64_t from_tasks = 0;
      for (size_t s = 0; s < shards.size(); ++s) {
        const uint64_t base = out_first[s];
        const uint64_t docs = out_first[s + 1] - base;
        const std::string fp_path = fingerprints_path(d, s);
        if (path_exists(fp_path)) {  // computed by the array task that owned the shard
          const MappedFile fps(fp_path, "fingerprint file");
          if (fps.size() != docs * fp_bytes)
            fail("{}: {} bytes, expected {} ({} documents of {} bytes); delete it to recompute", fp_path, fps.size(),
                 docs * fp_bytes, docs, fp_bytes);
          for (uint64_t i = 0; i < docs; ++i) dedup->add(base + i, fps.bytes().subspan(i * fp_bytes, fp_bytes));
          sc.docs_in += static_cast<int64_t>(docs);
          ++from_tasks;
          continue;
        }
        fingerprint_shard(*dedup, k, s, base, [&](uint64_t i, std::span<const std::byte> fp) { dedup->add(base + i, fp); },
                          sc);
      }
      if (from_tasks > 0) sc.add("shards_fingerprinted_by_tasks", from_tasks);
      removals = dedup->finish(sc);
      sc.seconds = seconds_since(t0);
      // Paragraph-level: the documents it passes on are counted as the next
      // segment edits them.
      sc.docs_out = paragraph_level ? 0 : sc.docs_in - static_cast<int64_t>(removals.size());
      json list = json::array();
      for (const Removal& r : removals) {
        if (r.paragraph == kWholeDocument) list.push_back({r.doc, r.kept});
        else list.push_back({r.doc, r.kept, r.paragraph});
      }
      write_json_file(removals_path, {{"removed", list}, {"stats", counters_json(sc)}});
      all.stages[d].merge(sc);
    }
    // The ids of the documents kept for a group, for the removed records.
    kept_ids.clear();
    std::vector<uint64_t> wanted;
    for (const Removal& r : removals)
      if (r.paragraph == kWholeDocument) wanted.push_back(r.kept);
    std::sort(wanted.begin(), wanted.end());
    wanted.erase(std::unique(wanted.begin(), wanted.end()), wanted.end());
    if (!wanted.empty()) {
      uint64_t number = 0;
      for (size_t s = 0; s < shards.size() && number <= wanted.back(); ++s) {
        JsonlReader reader(out_path(k, s), "intermediate shard");
        LineChunk ch;
        while (reader.next(ch, o.chunk_bytes))
          for_each_line(ch.text, [&](int64_t, std::string_view line) {
            if (std::binary_search(wanted.begin(), wanted.end(), number))
              kept_ids[number] = json::parse(line).at("origin").at("id").get<std::string>();
            ++number;
          });
      }
    }
  }

  total.stages = all.stages;
  total.seconds = seconds_since(start);
  return total;
}

}  // namespace claw::data::curate
