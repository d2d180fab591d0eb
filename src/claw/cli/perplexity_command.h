// `claw perplexity`: a model's perplexity on a text file through the
// generation path, in the weight type it runs at (--dtype), to measure what
// quantization costs (llama.cpp's llama-perplexity, with its -c/--chunks):
//
//   claw perplexity --model DIR_OR_GGUF --text-file held_out.txt [--dtype q8_0]
//                   [--ctx-size 256] [--chunks 0] [--output-format json]
#pragma once

#include <CLI/CLI.hpp>

namespace claw::cli {

void add_perplexity_command(CLI::App& app);

}  // namespace claw::cli
