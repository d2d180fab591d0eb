// `claw curate`: a corpus through a pipeline of stages read from a TOML
// file, streamed with memory bounded by the worker threads, not the corpus.
//
//   [input]
//   paths = ["corpus/", "extra/*.jsonl.zst"]  # files, directories, globs
//   format = "jsonl"          # or "text": every file one document
//   text_key = "text"         # jsonl: the field holding the text
//   id_key = "id"             # jsonl: the field naming a document
//   [output]
//   dir = "curated"
//   compression = "zstd"      # or "none"
//   write_removed = true      # removed documents, with stage and reason
//   [output.megatron]         # optional: each kept shard also tokenized by
//   output_prefix = "tok/c"   # `claw preprocess` into a Megatron dataset
//   tokenizer_type = "GPT2BPETokenizer"  # vocab_file, merge_file,
//   append_eod = true         # tokenizer_model as preprocess's flags
//   [[stage]]
//   kind = "clean"            # then the stage's keys (stages.h)
//
// Shards: every input file (every directory, for text) is one shard, and
// writes <dir>/shard_NNNNN.jsonl[.zst] (kept documents: the input record
// with its text field replaced by the curated text) and
// <dir>/removed/shard_NNNNN.jsonl[.zst] (each removed record with a
// "curate": {"stage", "reason"} field), then <dir>/stats/shard_NNNNN.json,
// the shard's figures, which also marks it done. Each file is written under
// a temporary name and renamed when complete, so a shard is either done or
// absent: an interrupted run resumes where it stopped (done shards are read
// back, not redone) and gives the same output as an uninterrupted one.
//
// Deduplication stages (exact_dedup, minhash_dedup, paragraph_dedup) need
// every document before they can decide: the stages before one run over
// every shard into <dir>/work/segment_K/, the deduplicator reads those, and
// the stages after it run over them, dropping the duplicates it found
// (reason "duplicate", with the id of the document kept) or, for
// paragraph_dedup, the repeated lines (a document left blank: reason
// "duplicate_paragraphs"). Task sharding (num_tasks, task_id) splits the
// shards of the first segment between processes, which also fingerprint
// them for a document-level deduplicator.
//
// Bad input: a line that is not a UTF-8 JSON object with a string text
// field, or an empty input file, is a claw::Error naming the file and line;
// with skip_bad_lines it is counted and dropped.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "claw/curate/document.h"
#include "claw/curate/stage.h"
#include "claw/data/tokenizer_factory.h"

namespace claw::curate {

// One [[stage]] of the file: a streaming stage, or the keys of a
// deduplication stage (built when the run reaches it).
struct StageSpec {
  std::string kind;
  std::string where;  // "pipeline.toml [[stage]] 3 (gopher_quality)" for messages
  std::unique_ptr<Stage> stream;
  std::shared_ptr<toml::table> dedup_keys;  // set for a deduplication stage
};

// [output.megatron]: the kept shards as Megatron indexed datasets,
// <output_prefix>_shard_NNNNN_text_document.{bin,idx}, one per shard.
struct MegatronOutput {
  std::string output_prefix;  // empty: none
  data::TokenizerOptions tokenizer;
  bool append_eod = true;
};

struct CurateConfig {
  std::string file;  // the TOML file, for messages
  std::vector<std::string> inputs;  // input paths as written
  bool text_format = false;
  std::string text_key = "text", id_key = "id";
  std::string output_dir;
  bool compress = true, write_removed = true;
  MegatronOutput megatron;
  std::vector<StageSpec> stages;
};

// Parses and checks the file: unknown sections, keys and stage kinds, and
// values of the wrong type, are claw::Error naming the file and the key.
CurateConfig load_curate_config(const std::string& path);
CurateConfig parse_curate_config(const std::string& toml_text, const std::string& file);

struct CurateOptions {
  int threads = 1;
  bool skip_bad_lines = false;
  int num_tasks = 1, task_id = 0;
  size_t chunk_bytes = 256 << 10;  // small enough for every thread to have work on a few MB
  // Called on the writing thread after each chunk: fraction of the input
  // bytes done, documents done, input bytes done, seconds.
  std::function<void(double, int64_t, uint64_t, double)> progress;
};

struct CurateStats {
  int64_t shards = 0, shards_resumed = 0;
  int64_t docs_in = 0, docs_out = 0, bad_lines = 0, blank_lines = 0, empty_files = 0;
  uint64_t bytes_in = 0, bytes_out = 0;
  double seconds = 0;
  std::vector<std::string> kinds;       // per stage, in pipeline order
  std::vector<StageCounters> stages;    // per stage
  // [output.megatron]: each shard's dataset prefix and its tokens.
  std::vector<std::pair<std::string, int64_t>> megatron;
};

CurateStats run_curate(const CurateConfig& config, const CurateOptions& options);

// The shard files of an output directory (name, e.g. "shard_00003.jsonl.zst").
std::string shard_name(int64_t shard, bool compress);

}  // namespace claw::curate
