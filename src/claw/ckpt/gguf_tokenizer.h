// The vocabulary a GGUF file carries (tokenizer.ggml.*), as llama.cpp reads
// it: tokenizer.ggml.model "gpt2" (byte-level BPE: tokens, merges, token
// types) with the pre-tokenizer tokenizer.ggml.pre names, the special ids
// (bos, eos, eot) and whether a BOS is added, and tokenizer.chat_template.
//
// Pre-tokenizers: "gpt-2" (GPT-2's), "llama-bpe" / "llama3" / "dbrx" /
// "smaug-bpe" (Llama 3's, which is cl100k_base's, with a piece that is a
// token taken whole: tokenizer.json's ignore_merges), "qwen2" (the same with
// one digit a piece, merges applied). Control and user-defined
// tokens (types 3 and 4) are special: matched as whole strings when special
// tokens are recognised, never merged; unused ones (type 5, padding) are
// never produced. Others (SentencePiece "llama", and
// the other pre-tokenizers) are refused naming the field.
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
