// CommThread: the thread that runs one communicator's operations, in the
// order they were issued.
//
// Collectives run as MPI's blocking calls (Open MPI's tuned algorithms; the
// non-blocking ones go through a different, slower component) while the
// issuing thread goes on computing. Point-to-point transfers are started
// non-blocking and polled between operations, so sends and receives posted
// in any order cannot deadlock each other.
//
// One thread per communicator is what lets groups progress independently:
// MPI orders operations within a communicator only, and under
// MPI_THREAD_MULTIPLE any thread inside MPI advances every pending transfer
// of the process (Open MPI has no progress thread of its own), so a thread
// blocked in a dp all-reduce does not stall a pp send running on another.
//
// Waiting is done by the caller on the operation's completion flag, with a
// deadline; the thread itself has none (when a peer is lost it stays inside
// MPI until the job is aborted).
#pragma once

#include <mpi.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "claw/comm/op_state.h"
#include "claw/core/fault_injector.h"

namespace claw::comm::mpi {

class CommThread {
 public:
  // `faults` (tests only) may make this thread hang before an operation of
  // world rank `world_rank`.
  CommThread(int world_rank, std::shared_ptr<const FaultInjector> faults);
  ~CommThread();
  CommThread(const CommThread&) = delete;
  CommThread& operator=(const CommThread&) = delete;

  // Runs `fn` on the thread after everything enqueued before it (starting
  // the thread on first use). `fn` completes `op`, or starts a transfer and
  // hands it to track().
  void enqueue(std::shared_ptr<detail::OpState> op, std::function<void()> fn);
  // On the thread only: a non-blocking request that completes `op` when done.
  void track(std::shared_ptr<detail::OpState> op, MPI_Request req);

  // Runs fn on the thread and waits at most `timeout` (setup: communicator
  // splits, which are ordered with the parent's collectives). A rank that
  // never makes the same call must not leave the others inside MPI forever.
  // `fn` may outlive the caller (timeout), so it owns what it writes.
  void run_sync(std::function<void()> fn, std::chrono::milliseconds timeout, const std::string& what);

  // Ends the thread once the queue is empty and every transfer completed;
  // transfers still unmatched at `drain_deadline` are cancelled and reported.
  // request_stop() only signals, so that several threads drain at once.
  void request_stop(detail::Clock::time_point drain_deadline);
  void join();
  // The job is being aborted (an error is unwinding): the thread may be stuck
  // inside MPI, so it is detached and this object must never be destroyed.
  void detach();

 private:
  struct Task {
    std::shared_ptr<detail::OpState> op;
    std::function<void()> fn;
  };
  struct Inflight {
    std::shared_ptr<detail::OpState> op;
    MPI_Request req;
  };

  void loop();
  void poll_inflight();
  void cancel_expired();
  void abandon_inflight();
  void hang(const std::shared_ptr<detail::OpState>& op);

  const int world_rank_;
  const std::shared_ptr<const FaultInjector> faults_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Task> queue_;
  bool sleeping_ = false;  // the thread waits on cv_ (guarded by mu_)
  bool stopping_ = false;  // guarded by mu_
  bool detached_ = false;  // the job is being aborted (guarded by mu_)
  detail::Clock::time_point stop_deadline_;
  std::vector<Inflight> inflight_;  // touched only by the thread
  bool hung_ = false;               // an injected hang happened (touched only by the thread)
  std::thread thread_;
};

}  // namespace claw::comm::mpi
