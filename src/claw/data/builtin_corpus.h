// claw's built-in training corpus: the 233 State of the Union addresses
// (1790-2021, public domain; scripts/fetch-data puts them in
// <data_dir>/sotu/*.txt) tokenized with GPT-2 BPE (<data_dir>/gpt2/) into a
// Megatron indexed dataset <data_dir>/sotu_gpt2_text_document.{bin,idx}:
// u16 tokens, one document per speech in file-name order (so by year), each
// followed by <|endoftext|>, exactly as Megatron's
//   preprocess_data.py --tokenizer-type GPT2BPETokenizer --append-eod
// would write it.
//
// Building is idempotent and safe to race: each builder writes its own
// temporary files and publishes by rename (indexed_dataset.h), so ranks
// that build at once all end with the same complete files.
#pragma once

#include <string>

namespace claw::data {

// $CLAW_DATA_DIR if set and non-empty, else the build's CLAW_DATA_DIR
// (the repository's data/ unless configured otherwise).
std::string default_data_dir();

// <data_dir>/sotu_gpt2_text_document
std::string builtin_corpus_prefix(const std::string& data_dir);

// Returns builtin_corpus_prefix(data_dir), first building the dataset from
// the raw speeches if its .bin or .idx is missing, encoding on num_threads
// threads and logging progress. Missing raw files or tokenizer files are a
// claw::Error naming the directory or file and saying to run
// scripts/fetch-data.
std::string ensure_builtin_corpus(const std::string& data_dir, int num_threads);

}  // namespace claw::data
