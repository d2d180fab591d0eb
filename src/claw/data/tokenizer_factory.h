// Building a tokenizer from Megatron-style flags:
//   --tokenizer-type GPT2BPETokenizer --vocab-file encoder.json --merge-file vocab.bpe
//   --tokenizer-type TikTokenizer --tokenizer-model cl100k_base.tiktoken [--tiktoken-pattern cl100k|o200k|gpt2]
//   --tokenizer-type SentencePieceTokenizer --tokenizer-model spm.model
//   --tokenizer-type HFTokenizer --tokenizer-model tokenizer.json|MODEL_DIR
// Unknown types and missing files are claw::Error naming the flag and what is valid.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "claw/data/tokenizer.h"

namespace claw::data {

struct TokenizerOptions {
  std::string type = "GPT2BPETokenizer";  // --tokenizer-type
  std::string vocab_file;                 // --vocab-file (GPT-2: encoder.json)
  std::string merge_file;                 // --merge-file (GPT-2: vocab.bpe)
  std::string model_file;                 // --tokenizer-model (tiktoken rank file, SentencePiece .model,
                                          // tokenizer.json or its directory)
  std::string tiktoken_pattern;           // --tiktoken-pattern: pre-tokenizer of a rank file (default from its name)
};

std::vector<std::string> tokenizer_types();
std::unique_ptr<Tokenizer> make_tokenizer(const TokenizerOptions& options);

}  // namespace claw::data
