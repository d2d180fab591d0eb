// `claw train`: trains a model. With no arguments it trains the default small
// model (gpt2-tiny) on the built-in corpus.
#pragma once

#include <CLI/CLI.hpp>

namespace claw::cli {

// Registers the subcommand; the returned callback runs it after parsing.
void add_train_command(CLI::App& app);

}  // namespace claw::cli
