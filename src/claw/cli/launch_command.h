// `claw launch`: the supervisor (launch/supervisor.h) that runs a job
// through mpirun or srun, watches its heartbeats and restarts it from the
// last checkpoint when it fails.
#pragma once

#include <CLI/CLI.hpp>

namespace claw::cli {

void add_launch_command(CLI::App& app);

}  // namespace claw::cli
