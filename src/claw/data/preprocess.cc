#include "claw/data/preprocess.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <exception>
#include <filesystem>
#include <limits>
#include <memory>
#include <optional>

#include "claw/core/error.h"
#include "claw/core/log.h"
#include "claw/data/chunk_pipeline.h"
#include "claw/data/jsonl_reader.h"
#include "claw/data/jsonl_record.h"
#include "claw/data/preference.h"
#include "claw/data/sft.h"

namespace claw::data {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kMaxBadLineWarnings = 10;

struct BadLine {
  int64_t line;
  std::string reason;
};

// A worker's result for one chunk. For output k, texts holds the token ids
// of every text of the chunk's documents in order, and texts_per_document
// how many of them each document has.
struct EncodedChunk {
  struct Output {
    std::vector<std::vector<int32_t>> texts;
    std::vector<int32_t> texts_per_document;
    std::vector<std::vector<uint8_t>> loss_masks;  // sft: one per text
  };
  std::vector<Output> outputs;
  std::vector<BadLine> bad_lines;  // in line order; without skipping, only the first
  int64_t lines = 0, documents = 0, blank_lines = 0;
  uint64_t text_bytes = 0, input_offset = 0;
  std::exception_ptr failure;  // the reader's or the worker's exception: rethrown in input order
};

// The chunk's lines in order: blank ones counted, the others given to
// use(line), which returns why a line is bad ("" when it was used). Returns
// false when a bad line ends the chunk (without --skip-bad-lines).
template <typename F>
bool each_line(const LineChunk& chunk, EncodedChunk& r, const PreprocessOptions& o, F&& use) {
  r.lines = chunk.num_lines;
  r.text_bytes = chunk.text.size();
  r.input_offset = chunk.input_offset;
  std::string_view rest = chunk.text;
  for (int64_t line_no = chunk.first_line; !rest.empty(); ++line_no) {
    const size_t nl = rest.find('\n');
    const std::string_view line = rest.substr(0, nl);
    rest.remove_prefix(nl == std::string_view::npos ? rest.size() : nl + 1);
    if (is_blank_line(line)) {
      ++r.blank_lines;
      continue;
    }
    std::string bad = use(line);
    if (bad.empty()) {
      ++r.documents;
      continue;
    }
    r.bad_lines.push_back({line_no, std::move(bad)});
    if (!o.skip_bad_lines) return false;  // the writer stops at this chunk anyway
  }
  return true;
}

// Chat lines (--sft, --dpo): one output, each line a document of the
// examples encode(line, examples) makes (SFT: one; DPO: chosen, rejected),
// or the reason it returns for a bad line.
template <typename F>
EncodedChunk encode_chat_chunk(const LineChunk& chunk, const PreprocessOptions& o, F&& encode) {
  EncodedChunk r;
  r.outputs.resize(1);
  EncodedChunk::Output& out = r.outputs[0];
  std::vector<SftExample> examples;
  each_line(chunk, r, o, [&](std::string_view line) {
    examples.clear();
    std::string error = encode(line, examples);
    if (!error.empty()) return error;
    for (SftExample& ex : examples) {
      out.texts.push_back(std::move(ex.tokens));
      out.loss_masks.push_back(std::move(ex.loss_mask));
    }
    out.texts_per_document.push_back(static_cast<int32_t>(examples.size()));
    return std::string();
  });
  return r;
}

EncodedChunk encode_sft_chunk(const LineChunk& chunk, const SftEncoder& encoder, const PreprocessOptions& o) {
  return encode_chat_chunk(chunk, o, [&](std::string_view line, std::vector<SftExample>& out) {
    const SftRecord record = parse_sft_line(line);
    if (record.error.empty()) out.push_back(encoder.encode(record));
    return record.error;
  });
}

EncodedChunk encode_dpo_chunk(const LineChunk& chunk, const SftEncoder& encoder, const PreprocessOptions& o) {
  return encode_chat_chunk(chunk, o, [&](std::string_view line, std::vector<SftExample>& out) {
    const PreferenceRecord record = parse_preference_line(line);
    if (!record.error.empty()) return record.error;
    PreferenceExample ex = encode_preference(encoder, record);
    out.push_back(std::move(ex.chosen));
    out.push_back(std::move(ex.rejected));
    return std::string();
  });
}

EncodedChunk encode_chunk(const LineChunk& chunk, const Tokenizer& tokenizer, const PreprocessOptions& o) {
  const size_t num_keys = o.json_keys.size();
  EncodedChunk r;
  r.outputs.resize(num_keys);
  std::vector<std::vector<std::string>> texts(num_keys);
  if (!each_line(chunk, r, o, [&](std::string_view line) {
        JsonlFields fields = parse_jsonl_line(line, o.json_keys);
        if (!fields.error.empty()) return std::move(fields.error);
        for (size_t k = 0; k < num_keys; ++k) {
          r.outputs[k].texts_per_document.push_back(static_cast<int32_t>(fields.texts[k].size()));
          for (std::string& t : fields.texts[k]) texts[k].push_back(std::move(t));
        }
        return std::string();
      }))
    return r;

  for (size_t k = 0; k < num_keys; ++k) {
    EncodedChunk::Output& out = r.outputs[k];
    // One thread: this worker is one of --workers; the tokenizer's caches
    // then span the whole chunk.
    out.texts = tokenizer.encode_batch(texts[k], 1);
    texts[k] = {};
    if (!o.append_eod) continue;
    // Megatron appends eod to the document's last non-empty text.
    size_t first = 0;
    for (int32_t n : out.texts_per_document) {
      for (size_t t = first + n; t > first; --t) {
        if (!out.texts[t - 1].empty()) {
          out.texts[t - 1].push_back(tokenizer.eod());
          break;
        }
      }
      first += n;
    }
  }
  return r;
}

void validate(const PreprocessOptions& o) {
  if (o.input.empty()) fail("--input is required: a JSONL file (optionally zstd-compressed)");
  if (o.output_prefix.empty()) fail("--output-prefix is required: the path prefix of the output datasets");
  if (o.json_keys.empty()) fail("--json-keys needs at least one key");
  for (size_t i = 0; i < o.json_keys.size(); ++i) {
    if (o.json_keys[i].empty()) fail("--json-keys: a key is empty");
    if (std::find(o.json_keys.begin(), o.json_keys.begin() + i, o.json_keys[i]) != o.json_keys.begin() + i)
      fail("--json-keys names \"{}\" twice; each key is one output", o.json_keys[i]);
  }
  if (o.workers < 1 || o.workers > 1024) fail("--workers {} is invalid; it must be in [1, 1024]", o.workers);
  if (!o.chat() && !o.chat_template.empty())
    fail("--chat-template {} applies to --sft and --dpo data only", o.chat_template);
  if (o.sft && o.dpo) fail("--sft and --dpo make different datasets; give one");
  CLAW_CHECK(o.chunk_bytes > 0);
}

// Largest token id a dtype holds.
int64_t dtype_max(IndexDType t) {
  switch (t) {
    case IndexDType::u8: return std::numeric_limits<uint8_t>::max();
    case IndexDType::i8: return std::numeric_limits<int8_t>::max();
    case IndexDType::i16: return std::numeric_limits<int16_t>::max();
    case IndexDType::u16: return std::numeric_limits<uint16_t>::max();
    case IndexDType::i32: return std::numeric_limits<int32_t>::max();
    case IndexDType::i64: return std::numeric_limits<int64_t>::max();
    case IndexDType::f32:
    case IndexDType::f64: break;
  }
  return -1;
}

IndexDType choose_dtype(const PreprocessOptions& o, const Tokenizer& tokenizer) {
  const int64_t vocab = tokenizer.vocab_size();
  if (!o.dtype) return optimal_index_dtype(vocab);
  const IndexDType t = *o.dtype;
  if (!index_dtype_is_integer(t))
    fail("--dtype {} cannot hold token ids; use an integer dtype such as uint16 or int32", index_dtype_numpy_name(t));
  if (vocab - 1 > dtype_max(t))
    fail("--dtype {} holds ids up to {}, but the {} vocabulary has {} ids (up to {}); use --dtype {}, or leave "
         "--dtype out for Megatron's choice",
         index_dtype_numpy_name(t), dtype_max(t), tokenizer.name(), vocab, vocab - 1,
         vocab - 1 <= dtype_max(IndexDType::u16) ? "uint16" : "int32");
  return t;
}

void check_output_directory(const std::string& prefix) {
  fs::path dir = fs::path(prefix).parent_path();
  if (dir.empty()) dir = ".";
  std::error_code ec;
  if (!fs::exists(dir, ec))
    fail("--output-prefix {}: directory {} does not exist; create it first", prefix, dir.string());
  if (!fs::is_directory(dir, ec)) fail("--output-prefix {}: {} is not a directory", prefix, dir.string());
  if (::access(dir.c_str(), W_OK) != 0)
    fail("--output-prefix {}: cannot write to directory {} ({})", prefix, dir.string(), std::strerror(errno));
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

std::string preprocess_output_prefix(const std::string& output_prefix, const std::string& key) {
  return output_prefix + "_" + key + "_document";
}

PreprocessResult preprocess(const PreprocessOptions& o, const Tokenizer& tokenizer) {
  const auto t0 = std::chrono::steady_clock::now();
  validate(o);
  PreprocessResult result;
  result.dtype = choose_dtype(o, tokenizer);
  check_output_directory(o.output_prefix);
  std::optional<SftEncoder> sft;
  if (o.chat()) {
    ChatTemplate tmpl = chat_template_for(tokenizer, o.chat_template);
    result.chat_template = tmpl.name;
    sft.emplace(tokenizer, std::move(tmpl), true);
  }
  JsonlReader reader(o.input, "--input");

  // Created before any work, so an unwritable output fails at once.
  std::vector<std::unique_ptr<IndexedDatasetBuilder>> builders;
  std::unique_ptr<IndexedDatasetBuilder> masks;  // sft, dpo
  auto create = [&](const std::string& prefix, IndexDType dtype) {
    try {
      return std::make_unique<IndexedDatasetBuilder>(prefix, dtype);
    } catch (const Error& e) {
      fail("--output-prefix {}: {}", o.output_prefix, e.what());
    }
  };
  for (const std::string& key : o.chat() ? std::vector<std::string>{o.dpo ? "dpo" : "sft"} : o.json_keys) {
    result.output_prefixes.push_back(preprocess_output_prefix(o.output_prefix, key));
    builders.push_back(create(result.output_prefixes.back(), result.dtype));
  }
  if (o.chat()) masks = create(sft_loss_mask_prefix(result.output_prefixes[0]), IndexDType::u8);

  PreprocessProgress& p = result.totals;
  p.input_size = reader.input_size();
  {
    const SftEncoder* chat = sft ? &*sft : nullptr;
    OrderedChunkPipeline<EncodedChunk> pipeline(reader, o.chunk_bytes, o.workers, [&](const LineChunk& c) {
      return !chat ? encode_chunk(c, tokenizer, o) : o.dpo ? encode_dpo_chunk(c, *chat, o) : encode_sft_chunk(c, *chat, o);
    });
    std::vector<int32_t> mask;
    while (std::optional<EncodedChunk> chunk = pipeline.next()) {
      if (chunk->failure) std::rethrow_exception(chunk->failure);
      for (const BadLine& bad : chunk->bad_lines) {
        if (!o.skip_bad_lines)
          fail("{}:{}: {} (pass --skip-bad-lines to drop bad lines)", o.input, bad.line, bad.reason);
        if (++p.skipped_lines <= kMaxBadLineWarnings)
          log::warn("preprocess", "{}:{}: skipped: {}{}", o.input, bad.line, bad.reason,
                    p.skipped_lines == kMaxBadLineWarnings ? " (further bad lines are counted, not shown)" : "");
      }
      for (size_t k = 0; k < builders.size(); ++k) {
        const EncodedChunk::Output& out = chunk->outputs[k];
        size_t t = 0;
        for (int32_t n : out.texts_per_document) {
          for (size_t end = t + n; t < end; ++t)
            if (!out.texts[t].empty()) {
              builders[k]->add_sequence(out.texts[t]);
              p.tokens += static_cast<int64_t>(out.texts[t].size());
              if (masks) {
                mask.assign(out.loss_masks[t].begin(), out.loss_masks[t].end());
                masks->add_sequence(mask);
              }
            }
          builders[k]->end_document();
          if (masks) masks->end_document();
        }
      }
      p.lines += chunk->lines;
      p.documents += chunk->documents;
      p.blank_lines += chunk->blank_lines;
      p.text_bytes += chunk->text_bytes;
      p.input_bytes = chunk->input_offset;
      p.seconds = seconds_since(t0);
      if (o.progress) o.progress(p);
    }
  }

  if (p.documents == 0) {
    if (p.lines == 0)
      fail("--input {}: the file is empty{}; there is nothing to preprocess", o.input,
           reader.compressed() ? " after zstd decompression" : "");
    if (p.blank_lines == p.lines) fail("--input {}: all {} lines are blank; there is nothing to preprocess", o.input,
                                       p.lines);
    fail("--input {}: every one of its {} non-blank lines was bad and skipped (--skip-bad-lines); no dataset written",
         o.input, p.lines - p.blank_lines);
  }
  // Every output complete before any is published.
  if (masks) builders.push_back(std::move(masks));
  for (auto& b : builders) b->finish();
  for (auto& b : builders) b->publish();
  p.seconds = seconds_since(t0);
  return result;
}

}  // namespace claw::data
