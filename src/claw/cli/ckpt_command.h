// `claw ckpt`: what a distributed checkpoint holds (inspect, with checksum
// verification), and Hugging Face interchange (export --format hf, import
// --format hf). docs/checkpoint-format.md describes the format.
#pragma once

#include <CLI/CLI.hpp>

namespace claw::cli {

void add_ckpt_command(CLI::App& app);

}  // namespace claw::cli
