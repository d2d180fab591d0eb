// The engine of `claw preprocess`: a JSONL corpus (plain or zstd) to one
// Megatron indexed dataset per JSON key, as Megatron-LM's
// tools/preprocess_data.py writes them.
//
// Output, for each key K of json_keys: <output_prefix>_K_document.{bin,idx}
// with one document per usable input line, in input order. A document's
// sequences are its texts (one for a string field, one per element for a
// list of strings) that have at least one token; with append_eod the last
// of them ends in tokenizer.eod(). A text without tokens gives a document
// with no sequences, as in Megatron. The dtype is Megatron's
// DType.optimal_dtype of the vocabulary size (optimal_index_dtype) unless
// options.dtype says otherwise.
//
// Bad lines (invalid UTF-8, malformed JSON, not an object, a missing key, a
// non-text field; see jsonl_record.h) are fatal by default: claw::Error
// "<input>:<line>: <reason>", the earliest bad line of the file whatever
// the thread timing. With skip_bad_lines they are dropped from every output
// (keeping the outputs' documents aligned), the first few are logged as
// warnings, and all are counted. Blank lines are ignored and counted.
//
// Pipeline, with memory bounded by the workers, not the input: a reader
// thread cuts the input into chunks of whole lines (chunk_bytes each); the
// workers each parse a chunk's lines and tokenize them
// (Tokenizer::encode_batch on one thread, so the tokenizer's caches span
// the chunk); the calling thread writes finished chunks in input order. At
// most 2 * workers + 2 chunks are in flight and the index arrays stream to
// disk (IndexedDatasetBuilder), so peak memory is about
// (2 * workers + 2) * chunk_bytes * (1 + 4 / bytes per token) on top of the
// tokenizer and does not grow with the corpus. A single line longer than
// chunk_bytes is held whole.
//
// SFT (sft.h): with `sft`, each line is a conversation ("messages") or a
// prompt/completion pair, rendered with `chat_template` (default: the
// tokenizer's, default_chat_template) and written as one document ending
// in eod to <output_prefix>_sft_document, and its loss mask (1: learned) as
// a u8 dataset of the same sequence lengths to
// <output_prefix>_sft_document_loss_mask (sft_loss_mask_prefix). json_keys
// and append_eod do not apply. A line that is not a usable SFT record is a
// bad line like any other.
//
// DPO (preference.h): with `dpo`, each line is a preference pair, written as
// one document of two sequences, the chosen then the rejected side (each
// ending in eod), to <output_prefix>_dpo_document with its loss mask.
//
// Nothing half-written: outputs are written under temporary names and
// renamed only after every output is complete; any failure (bad line,
// unreadable input, full disk, an exception in a worker) removes the
// temporaries and leaves existing files under the output names untouched.
// Checks before any work: the tokenizer's vocabulary fits the dtype, the
// output directory exists and is writable, the input exists.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "claw/data/indexed_dataset.h"
#include "claw/data/tokenizer.h"

namespace claw::data {

// Where the engine is, passed to PreprocessOptions::progress.
struct PreprocessProgress {
  int64_t lines = 0;          // input lines consumed
  int64_t documents = 0;      // documents written (per output)
  int64_t skipped_lines = 0;  // bad lines dropped (skip_bad_lines)
  int64_t blank_lines = 0;
  int64_t tokens = 0;            // tokens written, all outputs together
  uint64_t text_bytes = 0;       // JSONL bytes consumed (decompressed)
  uint64_t input_bytes = 0;      // file bytes consumed (compressed for zstd)
  uint64_t input_size = 0;       // file size (compressed for zstd)
  double seconds = 0;            // since preprocess() started
};

struct PreprocessOptions {
  std::string input;                          // --input: JSONL, or JSONL compressed with zstd
  std::vector<std::string> json_keys{"text"};  // --json-keys: one output per key
  std::string output_prefix;                  // --output-prefix
  bool append_eod = false;                    // --append-eod: end each document with tokenizer.eod()
  int workers = 1;                            // --workers: tokenizing threads
  bool skip_bad_lines = false;                // --skip-bad-lines: drop bad lines instead of failing
  std::optional<IndexDType> dtype;            // --dtype; default optimal_index_dtype(vocab size)
  bool sft = false;                           // --sft: chat / prompt-completion lines, tokens and loss masks
  bool dpo = false;                           // --dpo: preference pairs, two sequences per document
  std::string chat_template;                  // --chat-template (with sft or dpo; "": the tokenizer's default)
  bool chat() const { return sft || dpo; }
  size_t chunk_bytes = size_t{1} << 21;       // text per work item
  // Called on the calling thread after each chunk is written. It may throw
  // to cancel the run (e.g. on SIGINT), which then fails like any other
  // error: temporaries removed, nothing published.
  std::function<void(const PreprocessProgress&)> progress;
};

struct PreprocessResult {
  PreprocessProgress totals;
  IndexDType dtype = IndexDType::u16;
  std::vector<std::string> output_prefixes;  // one per key, in json_keys order (sft/dpo: the tokens' dataset)
  std::string chat_template;                 // sft/dpo: the template used
};

// <output_prefix>_<key>_document: Megatron's name for key's output.
std::string preprocess_output_prefix(const std::string& output_prefix, const std::string& key);

// Runs the whole conversion; claw::Error as described above.
PreprocessResult preprocess(const PreprocessOptions& options, const Tokenizer& tokenizer);

}  // namespace claw::data
