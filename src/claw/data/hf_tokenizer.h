// Hugging Face `tokenizer.json` files (the `tokenizers` library's format):
// the tokenizer of nearly every model on the Hub, read and run by claw with
// the library's results.
//
// A tokenizer.json is a pipeline, and each stage is read into a list of
// steps (hf_tokenizer_spec.h):
//
//   added_tokens    matched in the raw text before anything else
//                   (leftmost, longest first); lstrip/rstrip take the
//                   whitespace beside a match, single_word refuses a match
//                   inside a word; `normalized` ones are matched after the
//                   normalizer, against their own normalized text
//   normalizer      NFC/NFD/NFKC/NFKD, Lowercase, Prepend, Replace (string
//                   or regex), Strip, Sequence
//   pre_tokenizer   Split (string or regex; every behaviour; invert),
//                   ByteLevel, Metaspace, Digits, Sequence
//   model           BPE (merges, ignore_merges, byte_fallback, unk_token,
//                   fuse_unk)
//   post_processor  TemplateProcessing, ByteLevel, Sequence
//   decoder         ByteLevel, ByteFallback, Fuse, Strip, Replace,
//                   Metaspace, Sequence
//
// Anything else (WordPiece, Unigram, BertPreTokenizer, a continuing
// subword prefix, BPE dropout...) is a claw::Error naming the file and the
// field, never a silent difference.
//
// BPE runs on claw's one core (bpe_encoder.h, with the per-thread piece
// cache of bpe_piece_cache.h) in one of two modes:
//   byte-level  a ByteLevel pre-tokenizer (GPT-2, Llama 3, Qwen, DeepSeek,
//               StarCoder...): tokens are GPT-2's byte alphabet, read back
//               to raw bytes, and pieces are merged as bytes;
//   character   otherwise (the SentencePiece-style BPE of Llama 2, Mistral,
//               Phi-3, Gemma): a piece starts as its characters, a
//               character outside the vocabulary as its bytes' <0xXX>
//               tokens (byte_fallback) or unk_token. The core starts from
//               bytes, so each character's bytes are first joined by merges
//               ranked below every real one.
// Split regexes that are GPT-2's, Llama 3's (= cl100k_base's) or Qwen 2's
// run on claw's hand-written scanners (pretokenizer.h); any other runs on
// ICU's regex engine, with \s meaning White_Space as in the library.
//
// encode() is the library's encode(text, add_special_tokens=False):
// with SpecialTokens::recognise every added token is matched (the library's
// default); with ::as_text the special ones are not (its
// `encode_special_tokens = True`), non-special added tokens still are.
// add_special_tokens() applies the post-processor (e.g. Llama's leading
// <s>). decode() is decode(ids, skip_special_tokens=False), except that
// bytes that are not UTF-8 stay bytes (tokenizer.h's contract) where the
// library writes U+FFFD.
//
// eod(): the end-of-text id, from the `eos_token` of a tokenizer_config.json
// beside the file, else the first of <|endoftext|>, </s>, <|end_of_text|>,
// <eos>, <｜end▁of▁sentence｜> that the vocabulary has; load() names the
// file when none is found.
//
// Thread-safety: immutable after construction; every const method may run
// on any number of threads (piece caches and regex matchers are per thread).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "claw/data/tokenizer.h"

namespace claw::data {

namespace hf {
struct Pipeline;
}

struct HfAddedToken {
  std::string content;
  int32_t id = -1;
  bool special = false, lstrip = false, rstrip = false, single_word = false, normalized = false;
};

class HfTokenizer final : public Tokenizer {
 public:
  // `path` is a tokenizer.json; eod_token names the end-of-text token ("":
  // see above); a tokenizer_config.json beside it also names bos().
  // Every error names the path and the field.
  static HfTokenizer load(const std::string& path, const std::string& eod_token = "");
  // The same from the file's text; `source` names it in errors.
  static HfTokenizer parse(std::string_view json_text, const std::string& source, const std::string& eod_token);
  // The same from the document as a JSON value (a tokenizer.json written by
  // another reader, e.g. a GGUF vocabulary's: no text in between).
  static HfTokenizer from_json(const nlohmann::json& doc, const std::string& source, const std::string& eod_token);

  std::string decode(std::span<const int32_t> ids) const override;
  int32_t vocab_size() const override;
  int32_t eod() const override;
  // tokenizer_config.json's bos_token; -1 when it names none.
  int32_t bos() const { return bos_; }
  // Its chat template (Jinja source, read_hf_tokenizer_config); "" when
  // none; and the file that holds it.
  const std::string& chat_template() const { return chat_template_; }
  const std::string& chat_template_file() const { return chat_template_file_; }
  std::string name() const override;

  // The post-processor's single-sequence template around `ids`.
  std::vector<int32_t> add_special_tokens(std::span<const int32_t> ids) const;
  // The id of a vocabulary token or an added token, by its text as the
  // file writes it.
  std::optional<int32_t> token_to_id(std::string_view token) const;
  const std::vector<HfAddedToken>& added_tokens() const;
  // "byte-level" or "character" (see above), for logs.
  std::string_view mode() const;

 private:
  explicit HfTokenizer(std::shared_ptr<const hf::Pipeline> p) : p_(std::move(p)) {}
  std::vector<int32_t> encode_impl(std::string_view text, SpecialTokens special) const override;

  std::shared_ptr<const hf::Pipeline> p_;
  int32_t bos_ = -1;
  std::string chat_template_, chat_template_file_;
};

// What a Hugging Face directory's tokenizer_config.json says beyond
// tokenizer.json: chat_template (a string, or the "default" of a list of
// {name, template}; else a chat_template.jinja beside it), bos_token and
// eos_token (HfTokenizer::load makes these bos() and eod()). `path` is the
// directory or its tokenizer.json; fields are empty when it says nothing.
struct HfTokenizerConfig {
  std::string chat_template, bos_token, eos_token;
  std::string chat_template_file;  // the file it came from, for errors
};
HfTokenizerConfig read_hf_tokenizer_config(const std::string& path);
// The tokenizer.json of `path` (itself, or the one in the directory it names).
std::string hf_tokenizer_json(const std::string& path);

}  // namespace claw::data
