// `claw info`: what this machine gives claw (BLAS kernel, threads, measured
// SGEMM throughput), the first thing to check when a run is slow.
#pragma once

#include <CLI/CLI.hpp>

namespace claw::cli {

void add_info_command(CLI::App& app);

}  // namespace claw::cli
