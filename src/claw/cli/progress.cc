#include "claw/cli/progress.h"

#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdio>

#include <fmt/format.h>

#include "claw/core/error.h"
#include "claw/core/log.h"

namespace claw::cli {
namespace {

volatile std::sig_atomic_t g_interrupted = 0;

void record_interrupt(int signal) { g_interrupted = signal; }

}  // namespace

std::string format_duration(double s) {
  const int64_t t = static_cast<int64_t>(s + 0.5);
  if (t >= 3600) return fmt::format("{}:{:02}:{:02}", t / 3600, t / 60 % 60, t % 60);
  return fmt::format("{}:{:02}", t / 60, t % 60);
}

ProgressLine::ProgressLine(std::string tag, int64_t log_interval)
    : tag_(std::move(tag)), tty_(::isatty(2) == 1), interval_(log_interval) {}

void ProgressLine::update(double f, int64_t documents, double seconds, const std::string& rates) {
  f = std::clamp(f, 0.0, 1.0);
  const std::string eta = f > 0 ? format_duration(std::max(seconds, 0.0) * (1 - f) / f) : "?";
  const auto now = std::chrono::steady_clock::now();
  if (tty_) {
    if (drawn_ && now - last_ < std::chrono::milliseconds(100)) return;
    last_ = now;
    drawn_ = true;
    constexpr int kWidth = 24;
    const int filled = static_cast<int>(f * kWidth);
    std::fprintf(stderr, "\r[%s%s] %5.1f%%  %s, ETA %s\033[K", std::string(filled, '#').c_str(),
                 std::string(kWidth - filled, '.').c_str(), 100 * f, rates.c_str(), eta.c_str());
    std::fflush(stderr);
  } else if (interval_ > 0 && documents / interval_ > printed_) {
    printed_ = documents / interval_;
    log::info(tag_.c_str(), "{:.1f}% {}, ETA {}", 100 * f, rates, eta);
  }
}

void ProgressLine::finish() {
  if (tty_ && drawn_) std::fputc('\n', stderr);
  drawn_ = false;
}

InterruptGuard::InterruptGuard() {
  struct sigaction sa = {};
  sa.sa_handler = record_interrupt;
  sa.sa_flags = SA_RESETHAND;
  ::sigemptyset(&sa.sa_mask);
  ::sigaction(SIGINT, &sa, &old_int_);
  ::sigaction(SIGTERM, &sa, &old_term_);
}

InterruptGuard::~InterruptGuard() {
  ::sigaction(SIGINT, &old_int_, nullptr);
  ::sigaction(SIGTERM, &old_term_, nullptr);
}

void InterruptGuard::check(const char* after) {
  if (g_interrupted != 0)
    fail("interrupted by signal {} ({}); {}", static_cast<int>(g_interrupted),
         g_interrupted == SIGINT ? "SIGINT" : "SIGTERM", after);
}

}  // namespace claw::cli
