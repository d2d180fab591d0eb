#include "claw/cli/launch_command.h"

#include <unistd.h>

#include <climits>
#include <memory>
#include <sstream>

#include "claw/core/error.h"
#include "claw/launch/supervisor.h"

namespace claw::cli {

void add_launch_command(CLI::App& app) {
  auto cfg = std::make_shared<launch::LaunchConfig>();
  auto launcher_args = std::make_shared<std::vector<std::string>>();
  CLI::App* sub = app.add_subcommand(
      "launch",
      "run a job under a supervisor: start it with mpirun or srun, watch every rank's heartbeats, and on a failure "
      "end it and restart it from the last checkpoint (e.g. claw launch --nproc 4 -- train --save ckpt ...)");
  sub->add_option("--launcher", cfg->launcher, "auto (srun inside a Slurm allocation, else mpirun), mpirun or srun")
      ->capture_default_str();
  sub->add_option("--nproc,-n", cfg->nproc, "ranks to start")->capture_default_str();
  sub->add_option("--hostfile", cfg->hostfile, "mpirun's host file");
  sub->add_option("--launcher-args", *launcher_args,
                  "arguments passed to the launcher as they are, split at spaces (e.g. '--oversubscribe --bind-to none')");
  sub->add_option("--max-restarts", cfg->max_restarts, "restarts after failures before the supervisor gives up")
      ->capture_default_str();
  sub->add_option("--heartbeat-interval", cfg->heartbeat_interval_s, "seconds between a rank's heartbeats")
      ->capture_default_str();
  sub->add_option("--heartbeat-timeout", cfg->heartbeat_timeout_s,
                  "seconds without a heartbeat after which a rank has failed")
      ->capture_default_str();
  sub->add_option("--supervisor-host", cfg->supervisor_host,
                  "the address ranks reach the supervisor at (default: loopback; this host's name with --hostfile or srun)");
  sub->add_option("--events-file", cfg->events_file,
                  "append one JSON object per supervisor event (start, failure, resumed, done) to this file");
  sub->add_option("--min-ranks", cfg->min_ranks,
                  "elastic restart (mpirun with --hostfile): when hosts are gone, go on with the ranks that remain if "
                  "there are at least this many, in the layout the planner chooses (0: not elastic)")
      ->capture_default_str();
  sub->add_option("--host-probe-timeout", cfg->probe_timeout_s,
                  "seconds a host has to run `mpirun -np 1 --host H true` before a restart to count as present")
      ->capture_default_str();
  sub->add_option("command", cfg->command, "the job after `--`: a claw subcommand and its flags (train ...)")
      ->required();
  sub->callback([cfg, launcher_args] {
    for (const std::string& s : *launcher_args) {
      std::istringstream in(s);
      for (std::string w; in >> w;) cfg->launcher_args.push_back(w);
    }
    char self[PATH_MAX] = {};
    const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) fail("claw launch: cannot find its own binary (/proc/self/exe)");
    cfg->binary = std::string(self, static_cast<size_t>(n));
    const int code = launch::supervise(*cfg);
    if (code != 0) throw CleanExit(static_cast<ExitCode>(code), fmt::format("claw launch: the job ended with exit code {}", code));
  });
}

}  // namespace claw::cli
