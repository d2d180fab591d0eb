// `claw tokenize`: shows what a model sees. Reads UTF-8 text on stdin (or
// --input) and prints token ids; with --decode, reads ids and prints text.
//
// Format (one line per line, so a text file and its ids line up):
//   encode  each input line (without its '\n'; a '\r' before it is text)
//           is encoded on its own and printed as decimal ids separated by
//           single spaces; an empty line gives an empty line.
//   decode  each line of ids prints the decoded bytes and a '\n'.
// So `claw tokenize | claw tokenize --decode` reproduces its input exactly,
// except that a missing final newline is added. --whole-input encodes the
// entire input as one text (newlines included, as a model sees a document)
// and prints one line; with --decode it concatenates all ids' bytes and adds
// no newline, so that round trip is byte-exact.
//
// --special recognises special-token text ("<|endoftext|>") as its id;
// by default it is plain text. Input that is not UTF-8 is an error naming
// the line. --stats prints one machine-readable line of throughput to
// stderr (bench/bench_tokenizer.sh reads it).
//
// Tokenizer flags are Megatron's; with none, GPT-2 BPE from the built-in
// data directory (<data dir>/gpt2), so `echo hi | claw tokenize` works after
// scripts/fetch-data.
#pragma once

#include <CLI/CLI.hpp>

namespace claw::cli {

void add_tokenize_command(CLI::App& app);

}  // namespace claw::cli
