// `claw train-tokenizer`: trains a SentencePiece model (BPE or unigram) on
// text or JSONL files with the SentencePiece library's trainer
// (data/sentencepiece_trainer.h), writing <output-prefix>.model for
// --tokenizer-type SentencePieceTokenizer --tokenizer-model.
#pragma once

#include <CLI/CLI.hpp>

namespace claw::cli {

void add_train_tokenizer_command(CLI::App& app);

}  // namespace claw::cli
