// The stages of a tokenizer.json as claw runs them (hf_tokenizer.h): what
// hf_tokenizer_spec.cc reads from the file and hf_tokenizer.cc executes.
// Internal to those two files.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "claw/data/bpe_encoder.h"
#include "claw/data/hf_tokenizer.h"
#include "claw/data/pretokenizer.h"

#include <unicode/regex.h>

namespace claw::data::hf {

// A compiled regular expression (ICU); matchers are made per thread.
struct Regex {
  std::string source;  // as the file writes it
  int index = 0;       // slot of this regex's matcher in a thread's state
  std::shared_ptr<icu::RegexPattern> pattern;
};

struct NormalizerStep {
  enum Kind { nfc, nfd, nfkc, nfkd, lowercase, prepend, replace, strip } kind;
  std::string text, content;        // prepend: text; replace: text (a string pattern) -> content
  std::shared_ptr<Regex> regex;     // replace with a regex pattern
  bool left = false, right = false; // strip
};

enum class SplitBehavior { removed, isolated, merged_with_previous, merged_with_next, contiguous };

struct PreStep {
  enum Kind { split, byte_level, metaspace, digits } kind;
  // split: a hand-written scanner when the regex is one of theirs, else a
  // regex or a literal string.
  bool scanner = false;
  Pretokenizer scanner_kind = Pretokenizer::gpt2;
  std::shared_ptr<Regex> regex;
  std::string literal;
  SplitBehavior behavior = SplitBehavior::isolated;
  bool invert = false;
  bool add_prefix_space = false;  // byte_level
  bool use_regex = true;          // byte_level: then split as GPT-2
  std::string replacement;        // metaspace, e.g. "▁"
  enum Prepend { always, first, never } prepend = always;
  bool split_on_replacement = true;  // metaspace
  bool individual_digits = false;    // digits
};

struct DecodeStep {
  enum Kind { byte_level, byte_fallback, fuse, strip, replace, metaspace } kind;
  std::string text, content;  // replace: text -> content; strip: content; metaspace: text = replacement
  int start = 0, stop = 0;    // strip
  PreStep::Prepend prepend = PreStep::always;  // metaspace
};

struct Pipeline {
  std::string source;  // the file, for errors
  std::vector<HfAddedToken> added;
  std::vector<NormalizerStep> normalizer;
  std::vector<PreStep> pre;
  std::vector<DecodeStep> decoder;
  std::vector<int32_t> prefix, suffix;  // the post-processor's single template

  // The BPE model.
  bool byte_level = false;
  bool byte_fallback = false, fuse_unk = false;
  int32_t unk = -1;
  std::unique_ptr<BpeEncoder> encoder;
  // Character mode: an id >= vocab_size is a byte string of a partial
  // character (or a byte) that the vocabulary lacks; these are its ids.
  std::vector<std::vector<int32_t>> fallback;
  int32_t vocab_size = 0;
  int32_t eod = -1;

  std::vector<std::string> token_text;  // id -> token as the file writes it (added tokens' content included)
  std::vector<std::string> byte_text;   // byte-level with a plain ByteLevel decoder: id -> decoded bytes
  std::unordered_map<std::string, int32_t> id_of;  // token text -> id
  std::vector<std::shared_ptr<Regex>> regexes;     // every regex above, by index
  uint64_t tag = 0;                                // per pipeline; tags per-thread caches

  // Added tokens matched in the raw text and (normalized ones, by their
  // normalized content) after normalization: indexes into `added` grouped
  // by their text's first byte, longest first, so a scan looks only at the
  // positions where one could start.
  struct AddedSet {
    std::vector<std::vector<int32_t>> by_first_byte = std::vector<std::vector<int32_t>>(256);
    bool empty() const {
      for (const auto& v : by_first_byte)
        if (!v.empty()) return false;
      return true;
    }
  };
  AddedSet raw_matches, normalized_matches;
  std::vector<std::string> normalized_content;  // by index into `added`

  // The pre-tokenizer when it is one hand-written scanner (a known Split
  // regex, or ByteLevel's own), optionally followed by a ByteLevel that
  // only maps bytes: pieces are then cut straight from the text.
  PretokenEnd fast_scanner = nullptr;
  // Character mode with no splitting pre-tokenizer (SentencePiece-style:
  // the whole text is one word) when no token holds the space marker
  // ("▁") after another character: no merge can then join across the
  // start of a marker run, so the text is cut before each one and the
  // pieces cached, with the same ids.
  std::string word_marker;
};

// Byte length of the UTF-8 character whose first byte is `lead` (1 for a
// byte that starts none).
inline size_t utf8_length(unsigned char lead) {
  return lead < 0xC0 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : lead < 0xF8 ? 4 : 1;
}

// Reads a tokenizer.json's text (hf_tokenizer_spec.cc).
std::shared_ptr<Pipeline> read_pipeline(std::string_view json_text, const std::string& source,
                                        const std::string& eod_token);
// The same from the document already parsed.
std::shared_ptr<Pipeline> read_pipeline(const nlohmann::json& doc, const std::string& source,
                                        const std::string& eod_token);

// The normalizer applied to `text` (hf_tokenizer.cc); used by the reader
// for normalized added tokens.
std::string normalize(const Pipeline& p, std::string text);

}  // namespace claw::data::hf
