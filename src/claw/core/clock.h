// Wall-clock intervals for logs and timers: one steady clock for the whole project.
#pragma once

#include <chrono>

namespace claw {

using SteadyClock = std::chrono::steady_clock;

// Seconds from t to now.
inline double seconds_since(SteadyClock::time_point t) {
  return std::chrono::duration<double>(SteadyClock::now() - t).count();
}

}  // namespace claw
