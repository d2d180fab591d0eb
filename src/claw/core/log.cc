#include "claw/core/log.h"

#include <cstdio>
#include <mutex>

namespace claw::log {
namespace {
struct State {
  int rank = 0;
  int world = 1;
  Level level = Level::info;
  bool all_ranks = false;
  std::mutex mu;
};
State& state() {
  static State s;
  return s;
}
}  // namespace

void set_rank(int rank, int world_size) {
  state().rank = rank;
  state().world = world_size;
}
void set_level(Level level) { state().level = level; }
void set_all_ranks(bool all) { state().all_ranks = all; }

std::string rank_tag() {
  const State& s = state();
  return s.world > 1 ? fmt::format(" (rank {}/{})", s.rank, s.world) : std::string();
}

void write(Level level, std::string_view component, const std::string& msg) {
  State& s = state();
  if (level < s.level) return;
  if (level <= Level::info && s.rank != 0 && !s.all_ranks) return;
  static const char* names[] = {"debug", "info", "warning", "error"};
  std::string prefix = s.world > 1 ? fmt::format("[claw {}/{}] ", s.rank, s.world) : "[claw] ";
  std::string tag = level >= Level::warn ? fmt::format("{}: ", names[static_cast<int>(level)]) : "";
  std::lock_guard<std::mutex> lock(s.mu);
  std::fprintf(stderr, "%s%.*s: %s%s\n", prefix.c_str(), static_cast<int>(component.size()),
               component.data(), tag.c_str(), msg.c_str());
  std::fflush(stderr);
}

}  // namespace claw::log
