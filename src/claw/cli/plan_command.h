// `claw plan`: which TP / CP / PP / DP, micro-batch, ZeRO stage and
// recompute setting to use for a model on a cluster, whether it fits, and
// how fast it will run (src/claw/plan). Prints a ranked table, or --json.
#pragma once

#include <CLI/CLI.hpp>

namespace claw::cli {

void add_plan_command(CLI::App& app);

}  // namespace claw::cli
