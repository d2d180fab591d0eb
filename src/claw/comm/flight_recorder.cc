#include <fmt/format.h>

#include "claw/comm/op_state.h"

namespace claw::comm::detail {

FlightRecorder& FlightRecorder::instance() {
  static FlightRecorder r;
  return r;
}

void FlightRecorder::resize(int capacity) {
  std::lock_guard<std::mutex> lk(mu_);
  ring_.assign(std::max(1, capacity), Entry{});
}

uint64_t FlightRecorder::add(const OpState& op) {
  std::lock_guard<std::mutex> lk(mu_);
  const uint64_t id = next_++;
  ring_[id % ring_.size()] = Entry{.id = id, .kind = op.kind, .group = op.group, .seq = op.seq, .bytes = op.bytes,
                                   .state = State::queued, .submitted = Clock::now()};
  return id;
}

void FlightRecorder::set(uint64_t id, State s) {
  std::lock_guard<std::mutex> lk(mu_);
  Entry& e = ring_[id % ring_.size()];
  if (e.id != id) return;  // already overwritten
  e.state = s;
  (s == State::running ? e.started : e.ended) = Clock::now();
}

std::string FlightRecorder::dump() const {
  std::lock_guard<std::mutex> lk(mu_);
  const uint64_t total = next_ - 1;
  if (total == 0) return "";
  const auto now = Clock::now();
  const auto ms = [](Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); };
  const uint64_t first = total >= ring_.size() ? total - ring_.size() + 1 : 1;
  std::string out = fmt::format("flight record: last {} of {} operations, oldest first\n", total - first + 1, total);
  for (uint64_t id = first; id <= total; ++id) {
    const Entry& e = ring_[id % ring_.size()];
    if (e.id != id) continue;
    std::string state;
    switch (e.state) {
      case State::queued: state = fmt::format("QUEUED for {:.1f} ms", ms(now - e.submitted)); break;
      case State::running: state = fmt::format("RUNNING for {:.1f} ms", ms(now - e.started)); break;
      case State::done: state = fmt::format("done in {:.3f} ms", ms(e.ended - e.started)); break;
      case State::failed: state = "FAILED"; break;
    }
    out += fmt::format("  op {:>6}  group {:<10} {:<14} seq {:>6}  {:>12} bytes  {}\n", id, e.group, to_string(e.kind),
                       e.seq, e.bytes, state);
  }
  return out;
}

}  // namespace claw::comm::detail

namespace claw::comm {
std::string flight_record() { return detail::FlightRecorder::instance().dump(); }
}  // namespace claw::comm
