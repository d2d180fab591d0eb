// The vocabulary a GGUF file carries (tokenizer.ggml.*), as llama.cpp reads
// it, with the special ids (bos, eos, eot), whether a BOS is added, and
// tokenizer.chat_template.
//
// tokenizer.ggml.model "gpt2" (byte-level BPE: tokens, merges, token types):
//   - pre "gpt-2", "llama-bpe" / "llama3" / "dbrx" / "smaug-bpe" / ...
//     (Llama 3's, cl100k_base's pattern, a piece that is a token taken
//     whole) and "qwen2" / "deepseek-r1-qwen" / ... (one digit a piece, NFC)
//     run on data::BpeTokenizer with claw's hand-written scanners;
//   - "qwen35", "deepseek-llm", "deepseek-coder", "starcoder" (and "refact",
//     "command-r", "smollm", "codeshell", "exaone", "minerva-7b": one digit
//     a piece, then GPT-2's pattern), GPT-2's pattern under other names
//     ("mpt", "olmo", "phi-2", ...) are written as the tokenizer.json their
//     families publish (Split regexes, Digits, ByteLevel) and run by
//     data::HfTokenizer. The names are llama.cpp's.
// "llama" (SentencePiece: tokens and scores, byte tokens) becomes the BPE
// that transformers derives from it (merges ranked by score, a prefix ▁ and
// spaces as ▁, byte fallback); "gemma4" the same with its own merges and no
// prefix. Control and user-defined tokens (types 3, 4) are matched as whole
// strings when special tokens are recognised, never merged; unused ones
// (type 5, padding) are never produced. Any other model or pre-tokenizer is
// refused naming the field.
#pragma once

#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "claw/data/tokenizer.h"

namespace claw::ckpt {

struct GgufVocabulary {
  std::unique_ptr<data::Tokenizer> tokenizer;
  std::string model, pre;
  int32_t bos = -1, eos = -1, eot = -1;
  bool add_bos = false;
  std::string chat_template;  // "" when the file has none
};

// From a GGUF file's metadata (gguf::Reader::metadata()); `source` names the
// file in errors.
GgufVocabulary gguf_vocabulary(const nlohmann::json& metadata, const std::string& source);

}  // namespace claw::ckpt
