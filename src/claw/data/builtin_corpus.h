// claw's built-in training corpus: the 233 State of the Union addresses
// (1790-2021, public domain; scripts/fetch-data puts them in
// <data_dir>/sotu/*.txt) tokenized with GPT-2 BPE (<data_dir>/gpt2/) into a
// Megatron indexed dataset <data_dir>/sotu_gpt2_text_document.{bin,idx}:
// u16 tokens, one document per speech in file-name order (so by year), each
// followed by <|endoftext|>.
//
// It is built the way users build theirs: the speeches become a JSONL corpus
// <data_dir>/sotu.jsonl ({"text": speech, "file": name} per line), which
// goes through the `claw preprocess` engine (preprocess.h), i.e.
//   claw preprocess --input <data_dir>/sotu.jsonl --output-prefix <data_dir>/sotu_gpt2
//       --tokenizer-type GPT2BPETokenizer --vocab-file <data_dir>/gpt2/encoder.json
//       --merge-file <data_dir>/gpt2/vocab.bpe --append-eod
// which writes what Megatron's preprocess_data.py writes with the same flags.
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

// <data_dir>/sotu.jsonl
std::string builtin_corpus_jsonl(const std::string& data_dir);

// Returns builtin_corpus_prefix(data_dir), first building the dataset from
// the raw speeches (rewriting sotu.jsonl) if its .bin or .idx is missing,
// tokenizing on num_threads workers and logging progress. Missing raw files
// or tokenizer files are a claw::Error naming the directory or file and
// saying to run scripts/fetch-data.
std::string ensure_builtin_corpus(const std::string& data_dir, int num_threads);

}  // namespace claw::data
