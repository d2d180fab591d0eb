// `claw preprocess`: a JSONL corpus to Megatron .bin/.idx datasets, with the
// flags of Megatron-LM's tools/preprocess_data.py (--input, --json-keys,
// --tokenizer-type, --vocab-file, --merge-file, --tokenizer-model,
// --append-eod, --output-prefix, --workers, --log-interval) plus
// --skip-bad-lines and --dtype. The engine is data/preprocess.h.
//
// Progress goes to stderr (a bar redrawn in place on a terminal, a log line
// every --log-interval documents otherwise); the summary goes to stdout.
// --split-sentences and --keep-newlines are refused with the alternative.
// SIGINT or SIGTERM stops the run after the chunk being written, removing
// every temporary (a second signal kills at once).
#pragma once

#include <CLI/CLI.hpp>

namespace claw::cli {

void add_preprocess_command(CLI::App& app);

}  // namespace claw::cli
