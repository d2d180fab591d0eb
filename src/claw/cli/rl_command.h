// `claw rl`: reinforcement learning (GRPO) of a model on prompts with
// verifiable answers, learners and generators in one job (rl/grpo_trainer.h).
#pragma once

#include <CLI/CLI.hpp>

namespace claw::cli {

void add_rl_command(CLI::App& app);

}  // namespace claw::cli
