// One leveled, rank-aware logger (STYLE.md #17). Lines look like
//   [claw rank 3/8] train: step 10 ...
// Only rank 0 prints info by default; warnings and errors print on every rank.
// The rank tag is the one piece of process-wide state: it describes the
// process, not the parallel layout, and is set once by main().
#pragma once

#include <string>
#include <string_view>

#include <fmt/format.h>

namespace claw::log {

enum class Level { debug = 0, info = 1, warn = 2, error = 3 };

// Sets this process's rank and world size (for the prefix and the rank-0 rule).
void set_rank(int rank, int world_size);
// Lowest level printed; and whether non-zero ranks print info.
void set_level(Level level);
void set_all_ranks(bool all);
// " (rank r/w)" when the world has more than one rank, else "".
std::string rank_tag();

void write(Level level, std::string_view component, const std::string& msg);

template <typename... Args>
void info(std::string_view component, fmt::format_string<Args...> f, Args&&... args) {
  write(Level::info, component, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void warn(std::string_view component, fmt::format_string<Args...> f, Args&&... args) {
  write(Level::warn, component, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void error(std::string_view component, fmt::format_string<Args...> f, Args&&... args) {
  write(Level::error, component, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void debug(std::string_view component, fmt::format_string<Args...> f, Args&&... args) {
  write(Level::debug, component, fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace claw::log
