#include "claw/core/fault_injector.h"

#include <unistd.h>

#include <algorithm>

#include <charconv>
#include <cmath>
#include <cstdlib>

#include "claw/core/error.h"

namespace claw {

namespace {

std::vector<std::string_view> split_colons(std::string_view s) {
  std::vector<std::string_view> parts;
  for (size_t b = 0;;) {
    const size_t e = s.find(':', b);
    parts.push_back(s.substr(b, e == std::string_view::npos ? std::string_view::npos : e - b));
    if (e == std::string_view::npos) return parts;
    b = e + 1;
  }
}

template <typename T>
bool parse_number(std::string_view s, T& out) {
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && end == s.data() + s.size();
}

}  // namespace

FaultInjector FaultInjector::parse(const std::vector<std::string>& specs, std::string_view flag) {
  FaultInjector f;
  for (const std::string& spec : specs) {
    const std::vector<std::string_view> p = split_colons(spec);
    if (p[0] == "hang") {
      Hang h{};
      if (p.size() != 4 || !parse_number(p[1], h.rank) || h.rank < 0 || p[2].empty() || !parse_number(p[3], h.seq) ||
          h.seq == 0)
        fail("{} '{}': expected hang:RANK:GROUP:SEQ (a world rank, a group name, an operation number from 1)", flag,
             spec);
      h.group = std::string(p[2]);
      f.hangs_.push_back(std::move(h));
    } else if (p[0] == "crash-in-save") {
      int64_t it = 0;
      if (p.size() != 2 || !parse_number(p[1], it) || it < 0)
        fail("{} '{}': expected crash-in-save:ITER (a checkpoint iteration)", flag, spec);
      f.crash_in_save_.push_back(it);
    } else if (p[0] == "inf-grad") {
      int64_t step = 0;
      if (p.size() != 2 || !parse_number(p[1], step) || step < 1)
        fail("{} '{}': expected inf-grad:STEP (a training step from 1)", flag, spec);
      f.inf_grad_.push_back(step);
    } else if (p[0] == "bit-flip") {
      BitFlip b;
      const bool on_host = p.size() == 3 && !p[1].empty() && p[1][0] == '@';
      if (on_host) b.host = std::string(p[1].substr(1));
      if (p.size() != 3 || (on_host ? b.host.empty() : !parse_number(p[1], b.rank) || b.rank < 0) ||
          !parse_number(p[2], b.step) || b.step < 1)
        fail("{} '{}': expected bit-flip:RANK:STEP or bit-flip:@HOST:STEP (a world rank or every rank on a host, a "
             "training step from 1)", flag, spec);
      f.bit_flips_.push_back(std::move(b));
    } else if (p[0] == "slow") {
      int rank = -1;
      const std::string factor = p.size() == 3 ? std::string(p[2]) : std::string();
      char* end = nullptr;
      const double times = std::strtod(factor.c_str(), &end);
      if (p.size() != 3 || !parse_number(p[1], rank) || rank < 0 || factor.empty() || *end != '\0' || !(times >= 1))
        fail("{} '{}': expected slow:RANK:FACTOR (a world rank, a slowdown >= 1)", flag, spec);
      f.slow_.emplace_back(rank, times);
    } else if (p[0] == "skip-grad-reduce" || p[0] == "drop-pp-row") {
      int64_t step = 0;
      if (p.size() != 2 || !parse_number(p[1], step) || step < 1)
        fail("{} '{}': expected {}:STEP (a training step from 1)", flag, spec, p[0]);
      (p[0] == "skip-grad-reduce" ? f.skip_grad_reduce_ : f.drop_pp_row_).push_back(step);
    } else if (p[0] == "scale-grad") {
      ScaleGrad g;
      const std::string factor = p.size() == 4 ? std::string(p[3]) : std::string();
      char* end = nullptr;
      g.factor = std::strtod(factor.c_str(), &end);
      if (p.size() != 4 || !parse_number(p[1], g.rank) || g.rank < 0 || !parse_number(p[2], g.step) || g.step < 1 ||
          factor.empty() || *end != '\0' || !std::isfinite(g.factor))
        fail("{} '{}': expected scale-grad:RANK:STEP:FACTOR (a world rank, a training step from 1, a finite factor)",
             flag, spec);
      f.scale_grad_.push_back(g);
    } else if (p[0] == "shift-cp-chunk" || p[0] == "drop-ep-row" || p[0] == "skip-optimizer-load") {
      int rank = -1;
      if (p.size() != 2 || !parse_number(p[1], rank) || rank < 0)
        fail("{} '{}': expected {}:RANK (a world rank)", flag, spec, p[0]);
      (p[0] == "shift-cp-chunk" ? f.shift_cp_chunk_ : p[0] == "drop-ep-row" ? f.drop_ep_row_ : f.skip_optimizer_load_)
          .push_back(rank);
    } else {
      fail("{} '{}': unknown fault; valid: hang:RANK:GROUP:SEQ, crash-in-save:ITER, inf-grad:STEP, "
           "bit-flip:RANK|@HOST:STEP, slow:RANK:FACTOR, skip-grad-reduce:STEP, scale-grad:RANK:STEP:FACTOR, "
           "drop-pp-row:STEP, shift-cp-chunk:RANK, drop-ep-row:RANK, skip-optimizer-load:RANK",
           flag, spec);
    }
  }
  return f;
}

bool FaultInjector::hangs(int world_rank, std::string_view group, uint64_t seq) const {
  for (const Hang& h : hangs_)
    if (h.rank == world_rank && h.group == group && h.seq == seq) return true;
  return false;
}

bool FaultInjector::crashes_in_save(int64_t iteration, int rank, int size) const {
  if (rank != size - 1) return false;
  for (int64_t it : crash_in_save_)
    if (it == iteration) return true;
  return false;
}

double FaultInjector::slowdown(int world_rank) const {
  for (const auto& [r, f] : slow_)
    if (r == world_rank) return f;
  return 1.0;
}

bool FaultInjector::bit_flip(int world_rank, int64_t step) const {
  for (const BitFlip& b : bit_flips_) {
    if (b.step != step) continue;
    if (b.host.empty() ? b.rank == world_rank : b.host == this_host()) return true;
  }
  return false;
}

std::string FaultInjector::this_host() {
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  return host;
}

bool FaultInjector::inf_grad(int64_t step) const {
  return std::find(inf_grad_.begin(), inf_grad_.end(), step) != inf_grad_.end();
}

bool FaultInjector::skips_grad_reduce(int64_t step) const {
  return std::find(skip_grad_reduce_.begin(), skip_grad_reduce_.end(), step) != skip_grad_reduce_.end();
}

double FaultInjector::grad_scale(int world_rank, int64_t step) const {
  double factor = 1;
  for (const ScaleGrad& g : scale_grad_)
    if (g.rank == world_rank && g.step == step) factor *= g.factor;
  return factor;
}

bool FaultInjector::drops_pp_row(int64_t step) const {
  return std::find(drop_pp_row_.begin(), drop_pp_row_.end(), step) != drop_pp_row_.end();
}

int64_t FaultInjector::cp_chunk_shift(int world_rank) const {
  return std::count(shift_cp_chunk_.begin(), shift_cp_chunk_.end(), world_rank);
}

bool FaultInjector::drops_ep_row(int world_rank) const {
  return std::find(drop_ep_row_.begin(), drop_ep_row_.end(), world_rank) != drop_ep_row_.end();
}

bool FaultInjector::skips_optimizer_load(int world_rank) const {
  return std::find(skip_optimizer_load_.begin(), skip_optimizer_load_.end(), world_rank) != skip_optimizer_load_.end();
}

std::string FaultInjector::describe_hang(int world_rank, std::string_view group, uint64_t seq) {
  return fmt::format("hang:{}:{}:{}", world_rank, group, seq);
}

}  // namespace claw
