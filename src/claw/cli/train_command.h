// `claw train`: trains a model. With no arguments it trains the default small
// model (gpt2-tiny) on the built-in corpus.
#pragma once

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace claw::cli {

// Registers the subcommand; the returned callback runs it after parsing.
void add_train_command(CLI::App& app);
// `claw eval --load DIR --data-path ...`: a checkpoint's loss and perplexity,
// with train's flags (the model's come from the checkpoint).
void add_eval_command(CLI::App& app);

// Names of `claw train`'s flags (the keys of its --config TOML files) and of
// those that are switches; `claw plan --model FILE` reads the same files.
std::vector<std::string> train_flag_names();
std::vector<std::string> train_switch_names();

}  // namespace claw::cli
