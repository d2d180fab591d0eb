// The supervisor of `claw launch`: runs a job through the launcher that
// already runs it (mpirun with an optional host file, or srun inside a Slurm
// allocation), listens to every rank's heartbeats (comm::Watchdog) and, when
// the job fails, ends it and starts it again from the last complete
// checkpoint, up to max_restarts times.
//
// A failure is one of: the launcher exits with a retryable code (a rank
// died: a signal, ExitCode::comm, ExitCode::non_finite, ExitCode::stopped
// when the supervisor did not ask for the stop); a rank's heartbeats stop
// for heartbeat_timeout_s; a rank reports a hang (a section over its
// learned timeout). A bad configuration (ExitCode::bad_input, usage) or a
// bug (internal) ends the job without a restart: a retry would fail the same
// way. SIGTERM/SIGUSR1 to the supervisor stop the job cleanly (the ranks
// save and exit 6) and are not restarted.
//
// A restart adds `--load SAVE` (the command's --save directory, when it
// holds a checkpoint) so the job resumes from its last complete save. The
// time from the failure to the first step of the resumed job is measured
// and logged, with the steps lost; events_file gets one JSON object per
// event (start, failure, resumed, done) for benchmarks.
//
// The launcher runs in its own process group, killed as a whole; it is also
// killed when the supervisor dies (PR_SET_PDEATHSIG), and every rank ends
// itself when the supervisor stops answering its heartbeats, so a killed
// supervisor leaves no rank behind.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace claw::launch {

struct LaunchConfig {
  std::string launcher = "auto";           // --launcher auto|mpirun|srun (auto: srun inside Slurm, else mpirun)
  int nproc = 1;                           // --nproc: ranks (mpirun -np, srun -n)
  std::string hostfile;                    // --hostfile: mpirun's host file
  std::vector<std::string> launcher_args;  // --launcher-arg: passed to the launcher as given
  std::vector<std::string> command;        // after `--`: the claw subcommand and its flags (train ...)
  std::string binary;                      // the claw binary the ranks run (this one)
  int max_restarts = 3;                    // --max-restarts
  double heartbeat_interval_s = 1;         // --heartbeat-interval
  double heartbeat_timeout_s = 30;         // --heartbeat-timeout: a rank silent this long has failed
  std::string supervisor_host;             // --supervisor-host: the address ranks reach ("": loopback, or this host's name with a host file or srun)
  std::string events_file;                 // --events-file: JSONL of the supervisor's events
  // Elastic restart (mpirun with --hostfile): before a restart every host is
  // probed (mpirun -np 1 --host H true within probe_timeout_s); when hosts
  // are gone and at least min_ranks slots remain, the job restarts on them
  // with the layout the planner chooses (--parallel auto, the layout flags
  // dropped) and reloads its checkpoint resharded. 0: not elastic.
  int min_ranks = 0;                       // --min-ranks
  double probe_timeout_s = 20;             // --host-probe-timeout
  void validate() const;                   // throws claw::Error naming the flag
};

// Runs the job to completion or to a failure that is not restarted; the
// return value is the process exit code (claw::ExitCode of the last attempt).
int supervise(const LaunchConfig& cfg);

// The value of `--flag V` or `--flag=V` in `args` ("" when absent).
std::string flag_value(const std::vector<std::string>& args, const std::string& flag);
// `args` without `--flag V` / `--flag=V` (a switch when !takes_value).
std::vector<std::string> without_flag(std::vector<std::string> args, const std::string& flag, bool takes_value = true);
// A host file's hosts and slots (OpenMPI's "HOST slots=N" lines; # comments).
std::vector<std::pair<std::string, int>> read_hostfile(const std::string& path);
// `args` with `--flag V` / `--flag=V` set to `value` (appended when absent).
std::vector<std::string> with_flag(std::vector<std::string> args, const std::string& flag, const std::string& value);

}  // namespace claw::launch
