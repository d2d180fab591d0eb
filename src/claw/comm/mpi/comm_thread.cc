#include "claw/comm/mpi/comm_thread.h"

#include <fmt/format.h>

#include "claw/comm/mpi/communicator.h"
#include "claw/comm/work.h"
#include "claw/core/error.h"
#include "claw/core/log.h"

namespace claw::comm::mpi {

using detail::Clock;
using detail::FlightRecorder;
using detail::OpState;

CommThread::CommThread(int world_rank, std::shared_ptr<const FaultInjector> faults)
    : world_rank_(world_rank), faults_(std::move(faults)) {}

CommThread::~CommThread() {
  if (thread_.joinable()) {
    request_stop(Clock::now());
    join();
  }
}

void CommThread::enqueue(std::shared_ptr<OpState> op, std::function<void()> fn) {
  bool wake;
  {
    std::lock_guard<std::mutex> lk(mu_);
    CLAW_CHECK(!stopping_, "{} issued after its group was shut down", op ? op->describe() : "an operation");
    if (!thread_.joinable()) thread_ = std::thread([this] { loop(); });
    queue_.push_back({std::move(op), std::move(fn)});
    wake = sleeping_;
  }
  // No wake-up (a system call) while the thread is busy: it takes the next
  // task before it sleeps.
  if (wake) cv_.notify_one();
}

void CommThread::track(std::shared_ptr<OpState> op, MPI_Request req) { inflight_.push_back({std::move(op), req}); }

void CommThread::run_sync(std::function<void()> fn, std::chrono::milliseconds timeout, const std::string& what) {
  auto op = std::make_shared<OpState>();
  op->group = "world";
  op->timeout = timeout;
  enqueue(op, [fn = std::move(fn), op] {
    fn();
    op->complete();
  });
  try {
    Work(op).wait();
  } catch (const TimeoutError&) {
    throw TimeoutError(fmt::format(
        "{} did not complete within {:.1f} s (--distributed-timeout-minutes): a rank did not make the same call, "
        "hangs, or died",
        what, std::chrono::duration<double>(timeout).count()));
  }
}

void CommThread::request_stop(Clock::time_point drain_deadline) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (stopping_) return;
    stopping_ = true;
    stop_deadline_ = drain_deadline;
  }
  cv_.notify_all();
}

void CommThread::join() {
  if (thread_.joinable()) thread_.join();
}

void CommThread::detach() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    detached_ = true;
  }
  request_stop(Clock::now());
  if (thread_.joinable()) thread_.detach();
}

// A transfer whose waiter timed out or gave it up (its peer died or hangs)
// is cancelled, so that a receive never lands in a buffer its owner has
// given up and the shutdown's drain does not wait for it. The request is
// freed at once: a send to a dead peer may never let its cancellation
// complete (a send only reads its buffer).
void CommThread::cancel_expired() {
  for (size_t i = 0; i < inflight_.size();) {
    Inflight& f = inflight_[i];
    if (!f.op->failed.load(std::memory_order_acquire)) {
      ++i;
      continue;
    }
    MPI_Cancel(&f.req);
    MPI_Request_free(&f.req);
    f.op->complete(f.op->exception());
    inflight_.erase(inflight_.begin() + static_cast<long>(i));
  }
}

void CommThread::poll_inflight() {
  cancel_expired();
  for (size_t i = 0; i < inflight_.size();) {
    int flag = 0;
    const int rc = MPI_Test(&inflight_[i].req, &flag, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS || flag) {
      OpState& op = *inflight_[i].op;
      op.complete(rc == MPI_SUCCESS
                      ? nullptr
                      : std::make_exception_ptr(CommError(fmt::format("{}: {}", op.describe(), error_string(rc)))));
      inflight_.erase(inflight_.begin() + static_cast<long>(i));
    } else {
      ++i;
    }
  }
}

// At exit, transfers that no peer matched within the deadline are cancelled
// and reported instead of holding the process forever.
void CommThread::abandon_inflight() {
  for (Inflight& f : inflight_) {
    log::warn("comm", "at exit, {} was never matched by its peer; cancelled", f.op->describe());
    MPI_Cancel(&f.req);
    MPI_Request_free(&f.req);
    f.op->complete(std::make_exception_ptr(CommError(f.op->describe() + " cancelled at exit: never matched")));
  }
  inflight_.clear();
}

// The injected fault: this rank never starts `op`, as a hung process would;
// its peers time out. The thread wakes only for an orderly shutdown; when
// the job is being aborted it stays, and the flight record shows `op`
// RUNNING, as it would for a real hang.
void CommThread::hang(const std::shared_ptr<OpState>& op) {
  FlightRecorder::instance().set(op->record, FlightRecorder::State::running);
  log::warn("comm", "test fault {}: this rank never joins {}",
            FaultInjector::describe_hang(world_rank_, op->group, op->seq), op->describe());
  std::unique_lock<std::mutex> lk(mu_);
  cv_.wait(lk, [&] { return stopping_ && !detached_; });
  lk.unlock();
  op->complete(std::make_exception_ptr(CommError(op->describe() + " never ran (injected hang)")));
}

void CommThread::loop() {
  for (;;) {
    Task t;
    {
      std::unique_lock<std::mutex> lk(mu_);
      if (queue_.empty()) {
        sleeping_ = true;
        if (inflight_.empty())
          cv_.wait(lk, [&] { return stopping_ || !queue_.empty(); });
        else
          cv_.wait_for(lk, std::chrono::microseconds(50), [&] { return stopping_ || !queue_.empty(); });
        sleeping_ = false;
      }
      if (queue_.empty()) {
        if (stopping_ && inflight_.empty()) return;
        if (stopping_ && Clock::now() > stop_deadline_) {
          abandon_inflight();
          return;
        }
        lk.unlock();
        poll_inflight();
        continue;
      }
      t = std::move(queue_.front());
      queue_.pop_front();
    }
    if (t.op && faults_ && faults_->hangs(world_rank_, t.op->group, t.op->seq)) {
      hang(t.op);
      hung_ = true;
      continue;
    }
    if (hung_) {  // shutting down after an injected hang: what followed it never runs either
      if (t.op) t.op->complete(std::make_exception_ptr(CommError(t.op->describe() + " never ran (injected hang)")));
      continue;
    }
    // Transfers given up before this op was submitted are cancelled before
    // it runs: a message this op lets a peer send must not match them.
    cancel_expired();
    if (t.op && t.op->record) FlightRecorder::instance().set(t.op->record, FlightRecorder::State::running);
    try {
      t.fn();
    } catch (...) {
      if (t.op) t.op->complete(std::current_exception());
    }
    if (!inflight_.empty()) poll_inflight();
  }
}

}  // namespace claw::comm::mpi
