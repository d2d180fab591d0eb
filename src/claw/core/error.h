// Errors in three tiers (STYLE.md #15):
//   claw::Error      bad input at the edge (flag, file, shape); the message names
//                    the input and what would be valid. Raised before any work.
//   CLAW_CHECK       an internal invariant; reports file:line and the condition.
//   CLAW_*_CHECK     foreign status codes (MPI, CUDA, ...) turned into Error
//                    (defined next to the backend that needs them).
// Library code throws; only main() decides how the process ends: each error
// type carries the exit code a supervisor can act on (README "Exit codes").
#pragma once

#include <stdexcept>
#include <string>

#include <fmt/format.h>

namespace claw {

// How a claw process ends, for whoever restarts it: the codes a supervisor
// (claw launch, a Slurm requeue script) can act on. mpirun exits with the
// code the first aborting rank passed to MPI_Abort.
enum class ExitCode : int {
  ok = 0,
  bad_input = 1,   // claw::Error: a flag, config or file is wrong; a retry fails the same way
  usage = 2,       // the command line does not parse (unknown flag, missing value)
  internal = 3,    // CLAW_CHECK or an unexpected exception: a bug
  comm = 4,        // a peer died or hung, a timeout, an MPI failure: retryable (resume from the last checkpoint)
  non_finite = 5,  // the loss or gradient norm is not finite: resume from an earlier checkpoint or change the run
  stopped = 6,     // SIGTERM/SIGUSR1 asked the run to stop: it finished its step and saved; resume with --load
};

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
  virtual ExitCode exit_code() const noexcept { return ExitCode::bad_input; }
};

// An internal invariant failed (CLAW_CHECK).
class InternalError : public Error {
 public:
  using Error::Error;
  ExitCode exit_code() const noexcept override { return ExitCode::internal; }
};

// Communication failed: an MPI error, a transfer never matched, a deadline
// passed (comm::TimeoutError). The input was fine; the job may be retried.
class CommError : public Error {
 public:
  using Error::Error;
  ExitCode exit_code() const noexcept override { return ExitCode::comm; }
};

// Training diverged: a non-finite loss or gradient norm.
class NonFiniteError : public Error {
 public:
  using Error::Error;
  ExitCode exit_code() const noexcept override { return ExitCode::non_finite; }
};

// Not a failure: the command stopped early on request, cleanly on every
// rank (they agreed), after saving what it had. main ends with `code`
// without aborting the job.
class CleanExit : public std::runtime_error {
 public:
  CleanExit(ExitCode code, const std::string& what) : std::runtime_error(what), code_(code) {}
  ExitCode exit_code() const noexcept { return code_; }

 private:
  ExitCode code_;
};

// Throws E (claw::Error unless given: fail<NonFiniteError>(...)) with a
// fmt-formatted message.
template <typename E = Error, typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> f, Args&&... args) {
  throw E(fmt::format(f, std::forward<Args>(args)...));
}

namespace detail {
[[noreturn]] void check_failed(const char* file, int line, const char* cond, const std::string& msg);
inline std::string check_msg() { return {}; }
template <typename... Args>
std::string check_msg(fmt::format_string<Args...> f, Args&&... args) {
  return fmt::format(f, std::forward<Args>(args)...);
}
}  // namespace detail

}  // namespace claw

// CLAW_CHECK(cond) or CLAW_CHECK(cond, "fmt {}", args...): internal invariant.
#define CLAW_CHECK(cond, ...)                                                                  \
  do {                                                                                         \
    if (!(cond)) [[unlikely]]                                                                  \
      ::claw::detail::check_failed(__FILE__, __LINE__, #cond, ::claw::detail::check_msg(__VA_ARGS__)); \
  } while (0)
