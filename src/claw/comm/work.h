// Work: the handle of one asynchronous communication operation.
//
//   Work w = group.all_reduce_async(buf, n, DType::f32);
//   ... compute ...
//   w.wait();            // or w.test() to poll
//
// Every wait has a deadline (the world's --distributed-timeout-minutes unless
// a shorter one is given). When it expires, wait() throws comm::TimeoutError
// naming the operation, its group and sequence number; main() then prints the
// flight record and aborts the job, so no rank waits forever. An error raised
// while running the operation is carried inside and rethrown by wait()/test().
// A default-constructed Work is complete (what a group of size 1 returns).
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "claw/core/error.h"

namespace claw::comm {

class TimeoutError : public Error {
 public:
  using Error::Error;
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
  // True once the operation completed (rethrows its error, if any).
  bool test() const;
  // Blocks until the operation completes, at most the world's timeout.
  void wait() const;
  // Blocks at most `timeout` (never longer than the world's timeout).
  void wait(std::chrono::milliseconds timeout) const;
  // "all_reduce #12 on dp": for messages.
  std::string describe() const;

 private:
  std::shared_ptr<detail::OpState> state_;
};

}  // namespace claw::comm
