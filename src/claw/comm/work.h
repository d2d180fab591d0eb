// Work: the handle of one asynchronous communication operation.
//
//   Work w = group.all_reduce_async(buf, n, DType::f32);
//   ... compute ...
//   w.wait();            // or w.test() to poll
//
// Every wait has a deadline: the operation's own timeout (OpOptions) or else
// the world's (--distributed-timeout-minutes), counted from the start of the
// wait. When it passes, wait() throws comm::TimeoutError naming the
// operation, its group and sequence number, and the Work is failed from then
// on: exception() returns that error and test() rethrows it (as c10d's Work
// reports the exception it saw). main() then prints the flight record and
// aborts the job with the retryable exit code, so no rank waits forever. An
// error raised while running the operation (an MPI failure: CommError) is
// carried the same way. A default-constructed Work is complete (what a group
// of size 1 returns).
//
// Thread-safety: a Work may be waited on or tested from any thread.
#pragma once

#include <chrono>
#include <exception>
#include <memory>
#include <string>

#include "claw/core/error.h"

namespace claw::comm {

// A deadline passed: a peer died, hangs or issued a different operation.
// Exit code ExitCode::comm (retryable).
class TimeoutError : public CommError {
 public:
  using CommError::CommError;
};

namespace detail {
struct OpState;
}

class Work {
 public:
  Work() = default;
  explicit Work(std::shared_ptr<detail::OpState> state) : state_(std::move(state)) {}

  // Whether this refers to an operation (false for a default-constructed Work).
  bool valid() const { return state_ != nullptr; }
  // True once the operation completed; rethrows its failure, if any.
  bool test() const;
  // Blocks until the operation completes, at most its timeout.
  void wait() const;
  // Blocks at most `timeout` (never longer than the operation's timeout). A
  // shorter wait that expires throws TimeoutError but leaves the operation
  // in flight: a later wait may still succeed.
  void wait(std::chrono::milliseconds timeout) const;
  // wait(), by a communication thread before an operation issued to start
  // after this one (OpOptions::after): not counted in blocked_seconds(),
  // which is the issuing threads' time.
  void wait_dependency() const;
  // Gives the operation up (its peer is known to be gone): it fails with
  // CommError(`why`) from now on, and a point-to-point transfer still in
  // flight is cancelled by the backend. A receive's buffer must stay valid
  // until then; a send may go on reading its buffer (a send to a dead peer
  // cannot always be cancelled inside the library).
  void abandon(const std::string& why) const;
  // The failure this operation saw (what the backend raised, or the timeout
  // of a wait that reached the operation's deadline); null while it is
  // pending and after it succeeded.
  std::exception_ptr exception() const;
  // "all_reduce #12 on group dp (4096 bytes)": for messages.
  std::string describe() const;

 private:
  void wait(std::chrono::milliseconds timeout, bool count_blocked) const;
  std::shared_ptr<detail::OpState> state_;
};

// Seconds this process's threads have spent blocked in Work::wait on an
// unfinished operation, since the start: what the straggler report takes
// off a step's wall time to leave the rank's own work.
double blocked_seconds();

}  // namespace claw::comm
