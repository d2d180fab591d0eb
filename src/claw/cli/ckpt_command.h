// `claw ckpt`: what a distributed checkpoint holds (inspect, with checksum
// verification), and Hugging Face interchange (export --format hf, import
// --format hf). docs/checkpoints.md describes the format.
#pragma once

#include <string>

#include <CLI/CLI.hpp>

namespace claw::cli {

void add_ckpt_command(CLI::App& app);

// `claw ckpt import --format hf`: the Hugging Face directory `input` as a
// one-rank claw checkpoint (iteration 0, parameters only) under `save`,
// which loads at any layout. Returns the line that says what was done.
std::string import_hf_checkpoint(const std::string& input, const std::string& save);

}  // namespace claw::cli
