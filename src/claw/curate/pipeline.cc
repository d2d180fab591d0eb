#include "claw/curate/pipeline.h"

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

#include "claw/core/clock.h"
#include "claw/core/error.h"
#include "claw/core/log.h"
#include "claw/data/chunk_pipeline.h"
#include "claw/curate/dedup.h"
#include "claw/curate/dedup_stage.h"
#include "claw/curate/stages.h"
#include "claw/curate/text_stats.h"
#include "claw/data/builtin_corpus.h"
#include "claw/data/file_io.h"
#include "claw/data/indexed_dataset.h"
#include "claw/data/json_line.h"
#include "claw/data/jsonl_reader.h"
#include "claw/data/jsonl_record.h"
#include "claw/data/preprocess.h"
#include "claw/data/zstd_stream.h"

namespace claw::curate {

using data::IndexedDataset;
using data::JsonlReader;
using data::LineChunk;
using data::OrderedChunkPipeline;
using data::PreprocessOptions;
using data::TempFileWriter;
using data::Tokenizer;
using data::ZstdEncoder;
using data::default_data_dir;
using data::describe_json_keys;
using data::describe_json_type;
using data::for_each_line;
using data::is_blank_line;
using data::make_tokenizer;
using data::parse_json_object;
using data::path_exists;
using data::preprocess;
using data::preprocess_output_prefix;
using data::read_file;
using data::MappedFile;
using data::find_invalid_utf8;
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr int64_t kMaxBadLineWarnings = 10;


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

namespace {

// One `claw curate` run: the segments in order, each over every shard this
// task owns, with the deduplicator between two segments run over the first's
// output. Its state is what passes from one segment to the next.
class CurateRun {
 public:
  CurateRun(const CurateConfig& c, const CurateOptions& o)
      : c_(c), o_(o), start_(Clock::now()), shards_(expand_inputs(c)), dir_(c.output_dir),
        text_key_(c.text_format ? "text" : c.text_key) {
    std::error_code ec;
    for (const fs::path& p : {dir_, dir_ / "removed", dir_ / "stats", dir_ / "work"}) {
      fs::create_directories(p, ec);
      if (ec) fail("{} [output] dir: cannot create {}: {}", c.file, p.string(), ec.message());
    }
    // Segments: the streaming stages between deduplication stages.
    for (size_t s = 0; s < c.stages.size(); ++s)
      if (c.stages[s].dedup_keys) cuts_.push_back(s + 1);
    total_.shards = static_cast<int64_t>(shards_.size());
    for (const StageSpec& s : c.stages) total_.kinds.push_back(s.kind);
    all_.stages.resize(c.stages.size());
    for (const Shard& s : shards_)
      for (const std::string& f : s.files) input_total_ += fs::file_size(f, ec);
  }

  CurateStats run() {
    for (size_t k = 0; k < cuts_.size(); ++k) {
      run_segment(k);
      if (last(k)) break;
      if (o_.num_tasks > 1) {
        save_task_fingerprints(k);
        log::info("curate", "task {} of {}: done with its shards and their fingerprints; run once more without "
                  "--num-tasks to deduplicate and finish", o_.task_id, o_.num_tasks);
        break;
      }
      deduplicate(k);
      collect_kept_ids(k);
    }
    total_.stages = all_.stages;
    total_.seconds = seconds_since(start_);
    return total_;
  }

 private:
  // Segment k runs stages [cuts_[k], segment_end(k)); the last one writes the output.
  bool last(size_t k) const { return k + 1 == cuts_.size(); }
  size_t segment_end(size_t k) const { return last(k) ? c_.stages.size() : cuts_[k + 1] - 1; }
  std::string out_path(size_t k, int64_t shard) const {
    return last(k) ? (dir_ / shard_name(shard, c_.compress)).string()
                   : (dir_ / "work" / fmt::format("segment_{}_{}", k, shard_name(shard, true))).string();
  }
  std::string removed_path(size_t k, int64_t shard) const {
    return (dir_ / "removed" /
            (k == 0 ? shard_name(shard, c_.compress) : fmt::format("segment_{}_{}", k, shard_name(shard, c_.compress))))
        .string();
  }
  std::string stats_path(size_t k, int64_t shard) const {
    return (dir_ / "stats" / fmt::format("segment_{}_shard_{:05}.json", k, shard)).string();
  }
  std::string fingerprints_path(size_t d, int64_t shard) const {
    return (dir_ / "work" / fmt::format("dedup_{}_fingerprints_shard_{:05}.bin", d, shard)).string();
  }
  // A done shard's figures, from its marker.
  ShardStats read_stats(size_t k, int64_t shard) const {
    return ShardStats::from_json(json::parse(read_file(stats_path(k, shard), "shard stats")));
  }

  void run_segment(size_t k) {
    const Segment segment(c_, cuts_[k], segment_end(k), !last(k), o_.skip_bad_lines);
    uint64_t done_bytes = 0;
    int64_t done_docs = 0;
    std::error_code ec;
    total_.docs_out = total_.bytes_out = 0;  // of the last segment run
    for (size_t s = 0; s < shards_.size(); ++s) {
      if (k == 0 && static_cast<int>(s % o_.num_tasks) != o_.task_id) continue;
      ShardStats stats;
      if (path_exists(stats_path(k, s))) {  // done in an earlier run
        stats = read_stats(k, s);
        if (k == 0) ++total_.shards_resumed;
      } else {
        stats = run_shard(segment, k, s, done_bytes, done_docs);
      }
      if (last(k) && !c_.megatron.output_prefix.empty()) tokenize_shard(k, s);
      if (k == 0) {
        for (const std::string& f : shards_[s].files) done_bytes += fs::file_size(f, ec);
        total_.empty_files += stats.empty_file;
      }
      done_docs += stats.docs_in;
      all_.merge(stats);
      total_.docs_out += stats.docs_out, total_.bytes_out += stats.bytes_out;
      if (k == 0) {
        total_.docs_in += stats.docs_in, total_.bytes_in += stats.bytes_in;
        total_.bad_lines += stats.bad_lines, total_.blank_lines += stats.blank_lines;
      }
    }
  }

  // Segment k over shard s: kept and removed records written whole, then the
  // figures, whose file marks the shard done.
  ShardStats run_shard(const Segment& segment, size_t k, size_t s, uint64_t done_bytes, int64_t done_docs) {
    ShardStats stats;
    stats.stages.resize(c_.stages.size());
    ShardWriter kept(out_path(k, s), !last(k) || c_.compress);
    std::optional<ShardWriter> removed;
    if (c_.write_removed) removed.emplace(removed_path(k, s), c_.compress);
    SegmentInput in;
    in.wrapped = k > 0;
    if (k > 0) {
      in.removals = &removals_, in.kept_ids = &kept_ids_, in.removed_by = c_.stages[cuts_[k] - 1].kind;
      in.dedup_stage = cuts_[k] - 1;
      in.paragraph_level = paragraph_level_;
      in.first_doc = out_first_[s];
    }
    const std::string source = k == 0 ? shards_[s].name : out_path(k - 1, s);
    auto consume = [&](auto& pipeline) {
      while (std::optional<ChunkResult> r = pipeline.next()) {
        if (r->failure) std::rethrow_exception(r->failure);
        for (const BadLine& bad : r->bad) {
          if (!o_.skip_bad_lines)
            fail("{}:{}: {} (pass --skip-bad-lines to drop bad lines)", source, bad.line, bad.reason);
          if (all_.bad_lines + stats.bad_lines + 1 <= kMaxBadLineWarnings)
            log::warn("curate", "{}:{}: skipped: {}", source, bad.line, bad.reason);
        }
        stats.bad_lines += static_cast<int64_t>(r->bad.size());
        stats.merge(r->stats);
        kept.write(r->kept);
        if (removed) removed->write(r->removed);
        if (o_.progress)
          o_.progress(input_total_ ? std::min(1.0, double(done_bytes + r->input_offset) / input_total_) : 1.0,
                      done_docs + stats.docs_in, done_bytes + r->input_offset, seconds_since(start_));
      }
    };
    if (k == 0 && c_.text_format) {
      TextFilesReader reader(shards_[s].files);
      OrderedChunkPipeline<ChunkResult, TextFilesReader> p(reader, o_.chunk_bytes, o_.threads,
          [&](const LineChunk& ch) { return segment.process(ch, source, in); });
      consume(p);
    } else {
      JsonlReader reader(source, "input");
      if (k == 0 && reader.input_size() == 0) {
        if (!o_.skip_bad_lines) fail("{}: the file is empty (pass --skip-bad-lines to skip empty files)", source);
        log::warn("curate", "{}: empty file skipped", source);
        stats.empty_file = true;
      }
      OrderedChunkPipeline<ChunkResult> p(reader, o_.chunk_bytes, o_.threads,
          [&](const LineChunk& ch) { return segment.process(ch, source, in); });
      consume(p);
    }
    kept.commit();
    if (removed) removed->commit();
    write_json_file(stats_path(k, s), stats.to_json());
    return stats;
  }

  // [output.megatron]: the kept shard through `claw preprocess`, unless done.
  void tokenize_shard(size_t k, size_t s) {
    const std::string prefix = fmt::format("{}_shard_{:05}", c_.megatron.output_prefix, s);
    const std::string dataset = preprocess_output_prefix(prefix, text_key_);
    if (!path_exists(dataset + ".idx")) {
      if (!tokenizer_) tokenizer_ = make_tokenizer(c_.megatron.tokenizer);
      PreprocessOptions p;
      p.input = out_path(k, s);
      p.json_keys = {text_key_};
      p.output_prefix = prefix;
      p.append_eod = c_.megatron.append_eod;
      p.workers = o_.threads;
      preprocess(p, *tokenizer_);
    }
    total_.megatron.emplace_back(dataset, IndexedDataset(dataset).total_tokens());
  }

  // The fingerprints of the documents of segment k's shard s, computed by
  // the workers and handed to use(i, fingerprint) in document order (i from
  // 0 within the shard) on this thread. A deduplicator without fingerprints
  // (paragraph-level) takes each text in the workers instead, as document
  // `base` + i.
  template <class Use>
  void fingerprint_shard(CorpusDeduplicator& fp, size_t k, size_t s, uint64_t base, Use&& use, StageCounters& sc) {
    JsonlReader reader(out_path(k, s), "intermediate shard");
    struct Prints {
      std::vector<std::byte> bytes;
      int64_t docs = 0;
      uint64_t text_bytes = 0;
      std::exception_ptr failure;
    };
    const size_t n = fp.fingerprint_bytes();
    OrderedChunkPipeline<Prints> p(reader, o_.chunk_bytes, o_.threads, [&](const LineChunk& ch) {
      Prints r;
      r.bytes.resize(static_cast<size_t>(ch.num_lines) * n);
      for_each_line(ch.text, [&](int64_t line_no, std::string_view line) {
        const json j = json::parse(line);
        const std::string& text = j.at("record").at(text_key_).get_ref<const std::string&>();
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
  }

  // An array task: the fingerprints of its shards for the deduplicator after
  // segment k (the costly part: shingling and hashing), saved for the merge run.
  void save_task_fingerprints(size_t k) {
    const size_t d = cuts_[k + 1] - 1;
    StageKeys keys(*c_.stages[d].dedup_keys, c_.stages[d].where);
    const auto fingerprinter = make_deduplicator(c_.stages[d].kind, keys, "");
    const size_t fp_bytes = fingerprinter->fingerprint_bytes();
    for (size_t s = o_.task_id; s < shards_.size() && fp_bytes > 0; s += o_.num_tasks) {
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
  }

  // The deduplicator after segment k, over its output (documents numbered in
  // shard and line order); its removals are saved, and read back on resume.
  void deduplicate(size_t k) {
    out_first_.assign(shards_.size() + 1, 0);
    for (size_t s = 0; s < shards_.size(); ++s) out_first_[s + 1] = out_first_[s] + read_stats(k, s).docs_out;
    const size_t d = cuts_[k + 1] - 1;
    paragraph_level_ = c_.stages[d].kind == "paragraph_dedup";
    const std::string removals_path = (dir_ / "work" / fmt::format("dedup_{}.json", d)).string();
    if (path_exists(removals_path)) {
      const json j = json::parse(read_file(removals_path, "deduplication result"));
      removals_.clear();
      for (const json& r : j.at("removed"))
        removals_.push_back({r[0].get<uint64_t>(), r[1].get<uint64_t>(),
                             r.size() > 2 ? r[2].get<uint32_t>() : kWholeDocument});
      all_.stages[d].merge(counters_from_json(j.at("stats")));
      return;
    }
    StageKeys keys(*c_.stages[d].dedup_keys, c_.stages[d].where);
    const std::string scratch = (dir_ / "work" / fmt::format("dedup_{}", d)).string();
    std::error_code ec;
    fs::create_directories(scratch, ec);
    auto dedup = make_deduplicator(c_.stages[d].kind, keys, scratch);
    StageCounters sc;
    const auto t0 = Clock::now();
    const size_t fp_bytes = dedup->fingerprint_bytes();
    int64_t from_tasks = 0;
    for (size_t s = 0; s < shards_.size(); ++s) {
      const uint64_t base = out_first_[s];
      const uint64_t docs = out_first_[s + 1] - base;
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
    removals_ = dedup->finish(sc);
    sc.seconds = seconds_since(t0);
    // Paragraph-level: the documents it passes on are counted as the next
    // segment edits them.
    sc.docs_out = paragraph_level_ ? 0 : sc.docs_in - static_cast<int64_t>(removals_.size());
    json list = json::array();
    for (const Removal& r : removals_) {
      if (r.paragraph == kWholeDocument) list.push_back({r.doc, r.kept});
      else list.push_back({r.doc, r.kept, r.paragraph});
    }
    write_json_file(removals_path, {{"removed", list}, {"stats", counters_json(sc)}});
    all_.stages[d].merge(sc);
  }

  // The ids of the documents kept for a group, for the removed records.
  void collect_kept_ids(size_t k) {
    kept_ids_.clear();
    std::vector<uint64_t> wanted;
    for (const Removal& r : removals_)
      if (r.paragraph == kWholeDocument) wanted.push_back(r.kept);
    std::sort(wanted.begin(), wanted.end());
    wanted.erase(std::unique(wanted.begin(), wanted.end()), wanted.end());
    if (wanted.empty()) return;
    uint64_t number = 0;
    for (size_t s = 0; s < shards_.size() && number <= wanted.back(); ++s) {
      JsonlReader reader(out_path(k, s), "intermediate shard");
      LineChunk ch;
      while (reader.next(ch, o_.chunk_bytes))
        for_each_line(ch.text, [&](int64_t, std::string_view line) {
          if (std::binary_search(wanted.begin(), wanted.end(), number))
            kept_ids_[number] = json::parse(line).at("origin").at("id").get<std::string>();
          ++number;
        });
    }
  }

  const CurateConfig& c_;
  const CurateOptions& o_;
  const Clock::time_point start_;
  const std::vector<Shard> shards_;
  const fs::path dir_;
  const std::string text_key_;
  std::vector<size_t> cuts_{0};  // segment k runs stages [cuts_[k], dedup or end)
  uint64_t input_total_ = 0;     // bytes of input, for the progress
  CurateStats total_;
  ShardStats all_;
  std::unique_ptr<Tokenizer> tokenizer_;      // [output.megatron], made when first needed
  std::vector<Removal> removals_;             // of the deduplicator before the segment
  bool paragraph_level_ = false;              // whether they name paragraphs
  std::map<uint64_t, std::string> kept_ids_;  // their kept documents' ids
  std::vector<uint64_t> out_first_;           // number of each shard's first document there
};

}  // namespace

CurateStats run_curate(const CurateConfig& c, const CurateOptions& o) {
  if (o.threads < 1) fail("--threads {} is invalid; it must be at least 1", o.threads);
  if (o.num_tasks < 1 || o.task_id < 0 || o.task_id >= o.num_tasks)
    fail("--task-id {} is invalid for --num-tasks {}; it must be in [0, {})", o.task_id, o.num_tasks, o.num_tasks);
  return CurateRun(c, o).run();
}

}  // namespace claw::curate
