// Internals shared by Work, the backends and the flight recorder.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>
#include <string>

#include "claw/comm/group.h"

namespace claw::comm::detail {

using Clock = std::chrono::steady_clock;

// One submitted operation: what it is (for messages and the flight record),
// whether it is done, and the failure seen, if any.
struct OpState {
  OpKind kind = OpKind::barrier;
  std::string group;
  std::string span;     // Group::span()
  uint64_t seq = 0;     // per group, from 1
  int64_t bytes = 0;
  uint64_t record = 0;  // flight-record id
  std::chrono::milliseconds timeout{0};
  bool world_timeout = true;  // timeout is the world's, not the operation's own (OpOptions)

  std::mutex mu;
  std::condition_variable cv;
  std::atomic<bool> done{false};    // the backend finished with the operation
  std::atomic<bool> failed{false};  // error is set (guarded by mu; set once)
  std::exception_ptr error;

  // The backend finished; `e` is what went wrong, if anything.
  void complete(std::exception_ptr e = nullptr);
  // A waiter saw the operation's deadline pass: the operation is failed from
  // now on, whatever the backend does later (it may still be inside MPI).
  void expire(std::exception_ptr e);
  std::exception_ptr exception();
  std::string describe() const;
};

// A ring of the last operations of this process (all groups).
class FlightRecorder {
 public:
  enum class State : uint8_t { queued, running, done, failed };
  static FlightRecorder& instance();
  void resize(int capacity);
  uint64_t add(const OpState& op);
  void set(uint64_t id, State s);
  std::string dump() const;

 private:
  struct Entry {
    uint64_t id = 0;
    OpKind kind = OpKind::barrier;
    std::string group;
    uint64_t seq = 0;
    int64_t bytes = 0;
    State state = State::queued;
    Clock::time_point submitted, started, ended;
  };
  mutable std::mutex mu_;
  std::vector<Entry> ring_ = std::vector<Entry>(32);
  uint64_t next_ = 1;
};

// Copies and no-ops of a group of one rank; also used by the MPI backend's
// size-1 groups.
void run_self(const Request& r);

}  // namespace claw::comm::detail
