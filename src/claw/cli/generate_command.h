// `claw generate`: text in, text out, through the serving engine.
//
//   claw generate --model CKPT_OR_HF_DIR --prompt "Four score" [--max-tokens 64]
//                 [--temperature 0.8 --top-p 0.95 --seed 1] [--stop "\n\n"]
//   claw generate --model DIR --prompt-file prompt.txt
//   claw generate --model DIR --prompt-tokens 464,3290 --output-format json
//
// Greedy by default (temperature 0). The continuation streams to stdout as
// it is generated (--echo prints the prompt first); a summary line (tokens,
// time to first token, decode tokens/s, finish reason) goes to stderr.
// --output-format json prints one object instead: prompt and generated
// token ids, their log-probabilities (with --logprobs N, the N most likely
// alternatives at each step), the text and the finish reason.
#pragma once

#include <CLI/CLI.hpp>

namespace claw::cli {

void add_generate_command(CLI::App& app);

}  // namespace claw::cli
