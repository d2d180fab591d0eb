// `claw inspect-dataset PREFIX`: opens a Megatron .bin/.idx dataset with
// every check the trainer applies and prints what it holds, one
// "key: value" line each, then the first documents' token ids:
//
//   prefix: data/sotu_gpt2_text_document
//   dtype: u16
//   sequences: 233
//   documents: 233
//   tokens: 2074512
//   token_range: 0 50256
//   document 0: 1 sequences, 9012 tokens: 37 5... (--tokens of them)
//
// A document of several sequences shows them separated by " | ". Ids can be
// turned back into text with `claw tokenize --decode`.
#pragma once

#include <CLI/CLI.hpp>

namespace claw::cli {

void add_inspect_dataset_command(CLI::App& app);

}  // namespace claw::cli
