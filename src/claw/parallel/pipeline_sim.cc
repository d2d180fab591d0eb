#include "claw/parallel/pipeline_sim.h"

#include <algorithm>
#include <compare>
#include <cstdint>
#include <map>
#include <utility>

#include <fmt/format.h>

#include "claw/core/error.h"

namespace claw::parallel {

namespace {

constexpr double kNotPosted = -1.0;

// A message is named by what it carries and where it goes: (activation or
// gradient, micro-batch, destination virtual stage).
struct Mailbox {
  int m = 0, vstages = 0;
  std::vector<double> posted[2];  // send time, or kNotPosted
  std::vector<uint8_t> received[2];

  Mailbox(int m_, int vstages_) : m(m_), vstages(vstages_) {
    for (int t = 0; t < 2; ++t) {
      posted[t].assign(size_t(m) * vstages, kNotPosted);
      received[t].assign(size_t(m) * vstages, 0);
    }
  }
  size_t at(int mb, int vs) const { return size_t(mb) * vstages + vs; }
};

// What a stage has done and holds for each of its (micro-batch, chunk) units.
struct StageState {
  size_t pc = 0;
  double clock = 0.0, busy = 0.0;
  int inflight = 0, pending_weight = 0, peak_inflight = 0, peak_pending_weight = 0;
  std::vector<uint8_t> forward_done, input_grad_done, weight_done, have_activation, have_grad;
  std::string blocked;  // why the action at pc cannot run (when it cannot)
};

class Simulator {
 public:
  Simulator(const Schedule& s, const ComputeCost& cost, double latency)
      : sched_(s), cost_(cost), latency_(latency), p_(s.config.stages), v_(s.config.chunks),
        m_(s.config.microbatches), mail_(s.config.microbatches, s.config.stages * s.config.chunks),
        state_(s.stages.size()) {
    for (StageState& st : state_) {
      const size_t units = size_t(m_) * v_;
      for (auto* f : {&st.forward_done, &st.input_grad_done, &st.weight_done, &st.have_activation, &st.have_grad})
        f->assign(units, 0);
    }
    index_sends();
  }

  SimResult run() {
    SimResult r;
    if (int(sched_.stages.size()) != p_) {
      r.deadlock_free = false;
      r.defects.push_back(fmt::format("the schedule has {} stage lists for {} stages", sched_.stages.size(), p_));
      return r;
    }
    for (bool progress = true; progress;) {
      progress = false;
      for (int s = 0; s < p_; ++s)
        while (state_[s].pc < sched_.stages[s].size() && step(s)) progress = true;
    }
    r.stages.resize(p_);
    for (int s = 0; s < p_; ++s) {
      const StageState& st = state_[s];
      r.makespan = std::max(r.makespan, st.clock);
      r.stages[s] = {.busy = st.busy, .finish = st.clock, .peak_inflight = st.peak_inflight,
                     .peak_pending_weight = st.peak_pending_weight};
      r.total_busy += st.busy;
      if (st.pc < sched_.stages[s].size()) {
        r.deadlock_free = false;
        r.stuck.push_back({s, st.pc, sched_.stages[s][st.pc], st.blocked});
      }
    }
    for (StageStats& ss : r.stages) ss.idle = r.makespan - ss.busy;
    if (r.makespan > 0) r.bubble_fraction = (r.makespan * p_ - r.total_busy) / (r.makespan * p_);
    for (int t = 0; t < 2; ++t)
      for (int mb = 0; mb < m_; ++mb)
        for (int vs = 0; vs < mail_.vstages; ++vs) {
          const size_t i = mail_.at(mb, vs);
          if (mail_.posted[t][i] != kNotPosted && !mail_.received[t][i])
            r.defects.push_back(fmt::format("{} of micro-batch {} for virtual stage {} is sent but never received",
                                            t == 0 ? "activation" : "gradient", mb, vs));
        }
    r.defects.insert(r.defects.end(), defects_.begin(), defects_.end());
    return r;
  }

 private:
  static int mail_type(ActionKind k) {
    return k == ActionKind::send_activation || k == ActionKind::recv_activation ? 0 : 1;
  }

  // Where each message's send sits, to tell "not reached yet" from "never sent".
  void index_sends() {
    for (int s = 0; s < int(sched_.stages.size()); ++s)
      for (size_t i = 0; i < sched_.stages[s].size(); ++i) {
        const Action& a = sched_.stages[s][i];
        if (a.kind != ActionKind::send_activation && a.kind != ActionKind::send_grad) continue;
        if (!in_range(a)) continue;
        const int dst = destination(s, a);
        if (dst < 0 || dst >= mail_.vstages) continue;
        sends_at_[{mail_type(a.kind), a.microbatch, dst}] = {s, i};
      }
  }

  bool in_range(const Action& a) const {
    return a.microbatch >= 0 && a.microbatch < m_ && a.chunk >= 0 && a.chunk < v_;
  }
  // The virtual stage a send's data is for.
  int destination(int stage, const Action& a) const {
    const int vs = virtual_stage(stage, a.chunk, p_);
    return a.kind == ActionKind::send_activation ? vs + 1 : vs - 1;
  }

  bool block(StageState& st, std::string why) {
    st.blocked = std::move(why);
    return false;
  }

  // Runs the action at pc of stage s if it can run; false when it must wait
  // (or never can: the reason is kept either way).
  bool step(int s) {
    StageState& st = state_[s];
    const Action& a = sched_.stages[s][st.pc];
    if (!in_range(a))
      return block(st, fmt::format("micro-batch {} or chunk {} out of range (m = {}, v = {})", a.microbatch, a.chunk,
                                   m_, v_));
    const int vs = virtual_stage(s, a.chunk, p_);
    const int last = mail_.vstages - 1;
    const size_t u = size_t(a.microbatch) * v_ + a.chunk;
    switch (a.kind) {
      case ActionKind::forward:
        if (vs > 0 && !st.have_activation[u]) return block(st, "its input activation was never received");
        if (st.forward_done[u]) defects_.push_back(fmt::format("stage {} repeats {}", s, to_string(a)));
        st.forward_done[u] = 1;
        st.peak_inflight = std::max(st.peak_inflight, ++st.inflight);
        st.peak_pending_weight = std::max(st.peak_pending_weight, ++st.pending_weight);
        run_compute(s, a);
        if (vs < last) produce_locally(s, 0, a.microbatch, vs + 1);
        break;
      case ActionKind::backward:
      case ActionKind::backward_input:
        if (!st.forward_done[u]) return block(st, "its forward has not run on this stage");
        if (vs < last && !st.have_grad[u]) return block(st, "its output gradient was never received");
        if (st.input_grad_done[u]) defects_.push_back(fmt::format("stage {} repeats {}", s, to_string(a)));
        st.input_grad_done[u] = 1;
        --st.inflight;
        if (a.kind == ActionKind::backward) {
          st.weight_done[u] = 1;
          --st.pending_weight;
        }
        run_compute(s, a);
        if (vs > 0) produce_locally(s, 1, a.microbatch, vs - 1);
        break;
      case ActionKind::backward_weight:
        if (!st.input_grad_done[u]) return block(st, "its backward_input has not run on this stage");
        if (st.weight_done[u]) defects_.push_back(fmt::format("stage {} repeats {}", s, to_string(a)));
        st.weight_done[u] = 1;
        --st.pending_weight;
        run_compute(s, a);
        break;
      case ActionKind::send_activation:
      case ActionKind::send_grad: {
        const bool act = a.kind == ActionKind::send_activation;
        if (act ? !st.forward_done[u] : !st.input_grad_done[u])
          return block(st, "the data it sends has not been computed on this stage");
        const int dst = destination(s, a);
        if (dst < 0 || dst > last) return block(st, "there is no virtual stage to send it to");
        if (a.peer != stage_of_virtual(dst, p_))
          return block(st, fmt::format("virtual stage {} lives on stage {}, not on peer {}", dst,
                                       stage_of_virtual(dst, p_), a.peer));
        const size_t i = mail_.at(a.microbatch, dst);
        const int t = mail_type(a.kind);
        if (mail_.posted[t][i] != kNotPosted) defects_.push_back(fmt::format("stage {} repeats {}", s, to_string(a)));
        mail_.posted[t][i] = st.clock;
        break;
      }
      case ActionKind::recv_activation:
      case ActionKind::recv_grad: {
        const bool act = a.kind == ActionKind::recv_activation;
        const int src = act ? vs - 1 : vs + 1;
        if (src < 0 || src > last) return block(st, "no virtual stage sends this chunk such data");
        if (a.peer != stage_of_virtual(src, p_))
          return block(st, fmt::format("virtual stage {} lives on stage {}, not on peer {}", src,
                                       stage_of_virtual(src, p_), a.peer));
        const int t = mail_type(a.kind);
        const size_t i = mail_.at(a.microbatch, vs);
        if (mail_.posted[t][i] == kNotPosted) {
          auto it = sends_at_.find({t, a.microbatch, vs});
          if (it == sends_at_.end()) return block(st, "no stage ever sends it");
          return block(st, fmt::format("waiting for stage {}'s {} (its action #{}, not reached)", it->second.first,
                                       to_string(sched_.stages[it->second.first][it->second.second]),
                                       it->second.second));
        }
        st.clock = std::max(st.clock, mail_.posted[t][i] + latency_);
        mail_.received[t][i] = 1;
        (act ? st.have_activation : st.have_grad)[u] = 1;
        break;
      }
    }
    st.blocked.clear();
    ++st.pc;
    return true;
  }

  void run_compute(int s, const Action& a) {
    const double c = cost_(s, a);
    state_[s].clock += c;
    state_[s].busy += c;
  }

  // Consecutive virtual stages on the same stage (p = 1) hand data over in place.
  void produce_locally(int s, int type, int mb, int to_vs) {
    if (stage_of_virtual(to_vs, p_) != s) return;
    const size_t u = size_t(mb) * v_ + chunk_of_virtual(to_vs, p_);
    (type == 0 ? state_[s].have_activation : state_[s].have_grad)[u] = 1;
  }

  struct Key {
    int type, mb, vs;
    auto operator<=>(const Key&) const = default;
  };

  const Schedule& sched_;
  const ComputeCost& cost_;
  double latency_;
  int p_, v_, m_;
  Mailbox mail_;
  std::vector<StageState> state_;
  std::map<Key, std::pair<int, size_t>> sends_at_;
  std::vector<std::string> defects_;
};

}  // namespace

std::string SimResult::describe() const {
  std::string out;
  for (const Stuck& s : stuck)
    out += fmt::format("stage {} stuck at action #{} ({}): {}\n", s.stage, s.index, to_string(s.action), s.reason);
  for (const std::string& d : defects) out += d + "\n";
  return out;
}

SimResult simulate(const Schedule& schedule, const ComputeCost& cost, double p2p_latency) {
  const ScheduleConfig& c = schedule.config;
  CLAW_CHECK(c.stages >= 1 && c.microbatches >= 1 && c.chunks >= 1, "stages {}, micro-batches {}, chunks {}", c.stages,
             c.microbatches, c.chunks);
  return Simulator(schedule, cost, p2p_latency).run();
}

SimResult simulate(const Schedule& schedule, const ActionCosts& costs) {
  const ComputeCost cost = [&costs](int, const Action& a) {
    switch (a.kind) {
      case ActionKind::forward: return costs.forward;
      case ActionKind::backward: return costs.backward_input + costs.backward_weight;
      case ActionKind::backward_input: return costs.backward_input;
      case ActionKind::backward_weight: return costs.backward_weight;
      default: return 0.0;
    }
  };
  return simulate(schedule, cost, costs.p2p_latency);
}

}  // namespace claw::parallel
