// Progress and interruption for the long data commands (preprocess,
// curate).
//
// ProgressLine: on a terminal, one line redrawn in place at most ten times
// a second; otherwise a log line each time another log_interval documents
// are done. InterruptGuard: SIGINT/SIGTERM during a run only record the
// signal; check(), called by the engine's progress callback on its writing
// thread, turns it into a claw::Error, so the engine unwinds and removes its
// temporaries. The handler is one-shot: a second signal ends the process.
#pragma once

#include <signal.h>

#include <chrono>
#include <cstdint>
#include <string>

namespace claw::cli {

// "1:02:03" or "2:03".
std::string format_duration(double seconds);

class ProgressLine {
 public:
  ProgressLine(std::string tag, int64_t log_interval);
  // fraction of the input done; `rates` ends the line (documents, speeds).
  void update(double fraction, int64_t documents, double seconds, const std::string& rates);
  // Ends the redrawn line (also on failure, so an error starts on a line of its own).
  void finish();

 private:
  std::string tag_;
  bool tty_;
  int64_t interval_;
  bool drawn_ = false;
  int64_t printed_ = 0;
  std::chrono::steady_clock::time_point last_;
};

class InterruptGuard {
 public:
  InterruptGuard();
  InterruptGuard(const InterruptGuard&) = delete;
  InterruptGuard& operator=(const InterruptGuard&) = delete;
  ~InterruptGuard();
  // claw::Error "interrupted by signal N (SIGINT); <after>" once a signal came.
  static void check(const char* after);

 private:
  struct sigaction old_int_ = {}, old_term_ = {};
};

}  // namespace claw::cli
