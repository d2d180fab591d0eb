#include "claw/comm/work.h"

#include <sched.h>

#include <atomic>
#include <chrono>
#include <optional>

#include <fmt/format.h>

#include "claw/comm/op_state.h"

namespace claw::comm {

namespace detail {

void OpState::complete(std::exception_ptr e) {
  // The record first: a waiter that wakes and prints the flight record must
  // not see its own finished operation as RUNNING.
  if (record) FlightRecorder::instance().set(record, e ? FlightRecorder::State::failed : FlightRecorder::State::done);
  {
    std::lock_guard<std::mutex> lk(mu);
    if (e && !error) {
      error = e;
      failed.store(true, std::memory_order_release);
    }
    done.store(true, std::memory_order_release);
  }
  cv.notify_all();
}

void OpState::expire(std::exception_ptr e) {
  {
    std::lock_guard<std::mutex> lk(mu);
    if (error) return;
    error = e;
    failed.store(true, std::memory_order_release);
  }
  cv.notify_all();
}

std::exception_ptr OpState::exception() {
  std::lock_guard<std::mutex> lk(mu);
  return error;
}

std::string OpState::describe() const {
  return fmt::format("{} #{} on group {}{} ({} bytes)", to_string(kind), seq, group, span.empty() ? "" : " " + span,
                     bytes);
}

}  // namespace detail

bool Work::test() const {
  if (!state_) return true;
  if (state_->failed.load(std::memory_order_acquire)) std::rethrow_exception(state_->exception());
  return state_->done.load(std::memory_order_acquire);
}

void Work::wait() const {
  if (state_) wait(state_->timeout);
}

namespace {
std::atomic<int64_t> g_blocked_ns{0};

// Adds the time from construction to destruction to g_blocked_ns.
struct BlockedTimer {
  detail::Clock::time_point t0 = detail::Clock::now();
  ~BlockedTimer() {
    g_blocked_ns.fetch_add(std::chrono::duration_cast<std::chrono::nanoseconds>(detail::Clock::now() - t0).count(),
                           std::memory_order_relaxed);
  }
};
}  // namespace

double blocked_seconds() { return static_cast<double>(g_blocked_ns.load(std::memory_order_relaxed)) * 1e-9; }

void Work::wait(std::chrono::milliseconds timeout) const { wait(timeout, true); }

void Work::wait_dependency() const {
  if (state_) wait(state_->timeout, false);
}

void Work::wait(std::chrono::milliseconds timeout, bool count_blocked) const {
  if (!state_) return;
  const auto finished = [&] {
    return state_->done.load(std::memory_order_acquire) || state_->failed.load(std::memory_order_acquire);
  };
  if (!finished()) {
    std::optional<BlockedTimer> blocked;
    if (count_blocked) blocked.emplace();
    const bool own_deadline = timeout >= state_->timeout;
    const auto limit = std::min(timeout, state_->timeout);
    const auto deadline = detail::Clock::now() + limit;
    // Stay on the CPU for a short while (small collectives finish within
    // microseconds, and a sleeping waiter pays a scheduler wake-up), but
    // yield while doing so: with more threads than cores (ranks x (caller +
    // communication thread), as on an oversubscribed node) a busy spin takes
    // the core from the very thread doing the transfer. Measured with
    // bench/bench_comm on 2 cores: an 8-byte all_reduce's overhead over a
    // direct MPI call fell from 17-23 us (2000-pause spin) to ~3.5 us with 2
    // ranks, and from ~62 us to ~10 us with 4 (bench/RESULTS.md).
    const auto spin_until = std::min(deadline, detail::Clock::now() + std::chrono::microseconds(50));
    for (int i = 0; !finished(); ++i) {
      sched_yield();
      if ((i & 7) == 7 && detail::Clock::now() >= spin_until) break;
    }
    std::unique_lock<std::mutex> lk(state_->mu);
    if (!state_->cv.wait_until(lk, deadline, finished)) {
      lk.unlock();
      const std::string why = state_->world_timeout
                                  ? std::string("--distributed-timeout-minutes")
                                  : fmt::format("the {} ms timeout of this operation", state_->timeout.count());
      TimeoutError e(fmt::format(
          "{} did not complete within {:.1f} s ({}): a rank of the group died, hangs, or issued a different "
          "operation",
          state_->describe(), std::chrono::duration<double>(limit).count(), own_deadline ? why : "this wait"));
      if (own_deadline) state_->expire(std::make_exception_ptr(e));
      throw e;
    }
  }
  if (state_->failed.load(std::memory_order_acquire)) std::rethrow_exception(state_->exception());
}

void Work::abandon(const std::string& why) const {
  if (state_ && !state_->done.load(std::memory_order_acquire))
    state_->expire(std::make_exception_ptr(CommError(fmt::format("{} abandoned: {}", state_->describe(), why))));
}

std::exception_ptr Work::exception() const { return state_ ? state_->exception() : nullptr; }

std::string Work::describe() const { return state_ ? state_->describe() : "completed no-op"; }

}  // namespace claw::comm
