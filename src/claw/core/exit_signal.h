// Stopping a run cleanly on request (Slurm preemption, a supervisor, a
// person): SIGTERM or SIGUSR1 while an ExitSignalGuard lives only records
// the signal; the run polls received() at a point where stopping is safe
// (the trainer: after a step, every rank agreeing), saves and ends with
// ExitCode::stopped. The handler is one-shot: a second signal of the same
// kind takes its default action (a second SIGTERM ends the process at once).
// SIGUSR1 is the one mpirun forwards to the ranks and otherwise leaves
// alone; a SIGTERM to mpirun itself is forwarded too but followed by a kill.
#pragma once

#include <csignal>

namespace claw {

class ExitSignalGuard {
 public:
  ExitSignalGuard();
  ~ExitSignalGuard();
  ExitSignalGuard(const ExitSignalGuard&) = delete;
  ExitSignalGuard& operator=(const ExitSignalGuard&) = delete;
  // The signal received since the guard was made (0: none).
  static int received();
  static const char* name(int signal);

 private:
  struct sigaction old_term_ = {}, old_usr1_ = {};
};

}  // namespace claw
