// Training a SentencePiece model (`claw train-tokenizer`) with Debian's
// libsentencepiece trainer, on plain text or JSONL corpora.
//
// Input: each file is read line by line, streamed into the trainer. A file
// named *.jsonl or *.json holds one JSON object per line (Megatron's
// preprocess input) whose --json-keys string fields are the text; any other
// file is plain text. Every line of text (a JSON value is split at '\n') is
// one training sentence; empty lines are skipped, and a line longer than
// the trainer's 4192-byte limit (one document per line is common) is cut
// at spaces into sentences under it instead of being dropped. Bad input stops training
// with a claw::Error naming the file and line: invalid UTF-8, a line that is
// not a JSON object, a missing or non-string key.
//
// Output: <output_prefix>.model (load it with --tokenizer-type
// SentencePieceTokenizer --tokenizer-model) and <output_prefix>.vocab
// (piece and score per line), as spm_train writes them.
//
// Ids: <unk> 0, <s> 1, </s> 2 (SentencePiece's defaults), so eod() = 2.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace claw::data {

struct SentencePieceTrainOptions {
  std::vector<std::string> inputs;               // text or JSONL files
  std::vector<std::string> json_keys = {"text"};  // fields read from JSONL files
  int64_t vocab_size = 32000;                    // pieces, <unk> <s> </s> and byte pieces included
  std::string model_type = "bpe";                // bpe or unigram
  std::string output_prefix = "tokenizer";       // writes <prefix>.model and <prefix>.vocab
  double character_coverage = 0.9995;            // share of characters kept as pieces (the rest: bytes or <unk>)
  bool byte_fallback = true;                     // characters without a piece become UTF-8 byte pieces, not <unk>
  int64_t max_sentences = 0;                     // sample this many sentences (0: use all)
  int64_t num_threads = 1;
  uint32_t seed = 1234;                          // for sampling sentences: same corpus and seed, same model
  // Special tokens (SentencePiece's control symbols: ids 3, 4, ... after
  // </s>), such as a chat template's "<|im_start|>": never made from text,
  // recognised with SpecialTokens::recognise.
  std::vector<std::string> control_symbols;
};

// Checks the options (claw::Error naming the flag) and trains; returns the
// number of sentences read.
int64_t train_sentencepiece(const SentencePieceTrainOptions& options);

}  // namespace claw::data
