// Pipeline schedules (pipeline_schedule.h) checked by structure and by
// simulation (pipeline_sim.h): deadlock-freedom over a grid of layouts, every
// unit of work done exactly once, transfers paired between neighbours, and the
// bubble and in-flight closed forms of the papers.
//
// Bubble fraction, as measured throughout: (makespan x p - sum of busy time) /
// (makespan x p), i.e. the share of stage-time spent idle (before, between and
// after the stage's own work). With uniform costs every stage is busy m (f + b)
// and a schedule whose only idle time is the fill/drain (p - 1)(f + b) per
// stage has makespan (m + p - 1)(f + b), hence bubble (p - 1) / (m + p - 1).
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include <fmt/format.h>

#include "claw/core/error.h"
#include "claw/parallel/pipeline_schedule.h"
#include "claw/parallel/pipeline_sim.h"

namespace claw::parallel {
namespace {

using K = ActionKind;
constexpr ScheduleKind kAllKinds[] = {ScheduleKind::gpipe, ScheduleKind::one_f_one_b, ScheduleKind::interleaved,
                                      ScheduleKind::zb_h1};

bool valid(ScheduleKind kind, int p, int m, int v) {
  if (v > 1 && kind != ScheduleKind::interleaved) return false;
  return kind != ScheduleKind::interleaved || m % p == 0;  // m >= 1 and m % p == 0 imply m >= p
}

template <typename F>
int for_each_valid(F&& f) {
  int n = 0;
  for (ScheduleKind kind : kAllKinds)
    for (int p = 1; p <= 8; ++p)
      for (int m = 1; m <= 16; ++m)
        for (int v = 1; v <= 4; ++v)
          if (valid(kind, p, m, v)) {
            f(ScheduleConfig{kind, p, m, v});
            ++n;
          }
  return n;
}

std::string name(const ScheduleConfig& c) {
  return fmt::format("{} p={} m={} v={}", to_string(c.kind), c.stages, c.microbatches, c.chunks);
}

std::vector<Action> compute_only(const std::vector<Action>& list) {
  std::vector<Action> out;
  for (const Action& a : list)
    if (is_compute(a.kind)) out.push_back(a);
  return out;
}

// Structural check written independently of the simulator: returns the problems found.
std::string structure_problems(const Schedule& s) {
  const int p = s.config.stages, m = s.config.microbatches, v = s.config.chunks, last = p * v - 1;
  const bool split = s.config.kind == ScheduleKind::zb_h1;
  std::string err;
  // (kind, micro-batch, chunk) -> count, per stage; and the transfers as messages.
  using Msg = std::tuple<int, int, int, int, int>;  // grad?, mb, from virtual stage, to virtual stage, to stage
  std::multiset<Msg> sent, received;
  for (int st = 0; st < p; ++st) {
    std::map<std::tuple<K, int, int>, int> count;
    std::map<std::pair<int, int>, int> input_done_at;
    const auto& list = s.stages[st];
    for (size_t i = 0; i < list.size(); ++i) {
      const Action& a = list[i];
      const int vs = a.chunk * p + st;
      if (is_compute(a.kind)) {
        ++count[{a.kind, a.microbatch, a.chunk}];
        if (a.kind == K::backward_input) input_done_at[{a.microbatch, a.chunk}] = int(i);
        if (a.kind == K::backward_weight && !input_done_at.count({a.microbatch, a.chunk}))
          err += fmt::format("stage {}: W before Bi for mb{} c{}\n", st, a.microbatch, a.chunk);
        continue;
      }
      const bool send = a.kind == K::send_activation || a.kind == K::send_grad;
      const bool grad = a.kind == K::send_grad || a.kind == K::recv_grad;
      // Data moves forward for activations and backward for gradients, one virtual stage.
      const int from_vs = send ? vs : (grad ? vs + 1 : vs - 1);
      const int to_vs = send ? (grad ? vs - 1 : vs + 1) : vs;
      if (from_vs < 0 || to_vs < 0 || from_vs > last || to_vs > last) {
        err += fmt::format("stage {}: {} leaves the pipeline\n", st, to_string(a));
        continue;
      }
      const int other = send ? to_vs % p : from_vs % p;
      if (a.peer != other)
        err += fmt::format("stage {}: {} names peer {}, expected {}\n", st, to_string(a), a.peer, other);
      if (other == st) err += fmt::format("stage {}: {} sends to itself\n", st, to_string(a));
      const int hop = (other - st + p) % p;
      if (hop != 1 && hop != p - 1) err += fmt::format("stage {}: {} is not to a neighbour\n", st, to_string(a));
      // The transfer sits right next to the compute action it serves.
      const bool before = !send;
      const size_t j = before ? i + 1 : i - 1;
      const K served = grad ? (split ? K::backward_input : K::backward) : K::forward;
      if (j >= list.size() || list[j].kind != served || list[j].microbatch != a.microbatch || list[j].chunk != a.chunk)
        err += fmt::format("stage {}: {} is not next to its {}\n", st, to_string(a), to_string(served));
      (send ? sent : received).insert({grad, a.microbatch, from_vs, to_vs, to_vs % p});
    }
    for (int mb = 0; mb < m; ++mb)
      for (int c = 0; c < v; ++c) {
        auto n = [&](K k) { return count.count({k, mb, c}) ? count[{k, mb, c}] : 0; };
        const bool ok = n(K::forward) == 1 && (split ? n(K::backward_input) == 1 && n(K::backward_weight) == 1 &&
                                                           n(K::backward) == 0
                                                     : n(K::backward) == 1 && n(K::backward_input) == 0 &&
                                                           n(K::backward_weight) == 0);
        if (!ok) err += fmt::format("stage {}: mb{} c{} not run exactly once (F {} B {} Bi {} W {})\n", st, mb, c,
                                    n(K::forward), n(K::backward), n(K::backward_input), n(K::backward_weight));
      }
    size_t units = 0;
    for (const auto& [key, n] : count) units += n;
    if (units != size_t(m) * v * (split ? 3 : 2)) err += fmt::format("stage {}: {} compute actions\n", st, units);
  }
  if (sent != received) err += fmt::format("{} sends and {} recvs do not pair up\n", sent.size(), received.size());
  // Every hop between virtual stages on different stages carries one activation and one gradient per micro-batch.
  size_t hops = 0;
  for (int vs = 0; vs < last; ++vs) hops += (vs % p) != ((vs + 1) % p);
  if (sent.size() != 2 * hops * m) err += fmt::format("{} sends, expected {}\n", sent.size(), 2 * hops * m);
  return err;
}

// f = 1 and b = 2 (Bi = W = 1) per stage; a chunk of a v-chunk stage costs 1/v of that.
ActionCosts unit_costs(int chunks = 1) { return {1.0 / chunks, 1.0 / chunks, 1.0 / chunks, 0.0}; }

TEST(PipelineSchedule, ParseAndPrintNames) {
  for (ScheduleKind k : kAllKinds) EXPECT_EQ(parse_schedule_kind(to_string(k)), k);
  EXPECT_EQ(parse_schedule_kind("zb-h1"), ScheduleKind::zb_h1);
  EXPECT_EQ(parse_schedule_kind("1f1b"), ScheduleKind::one_f_one_b);
  try {
    parse_schedule_kind("1F1B-interleaved");
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--pipeline-schedule"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("zb-h1"), std::string::npos) << e.what();
  }
  EXPECT_EQ(to_string(Action{K::recv_grad, 3, 1, 2}), "recv_grad mb3 c1 <- 2");
  EXPECT_EQ(to_string(Action{K::forward, 0, 0, -1}), "F mb0 c0");
}

// Each bad config throws claw::Error whose message names every listed flag.
TEST(PipelineSchedule, InvalidConfigsThrowNamingFlags) {
  struct Case {
    ScheduleConfig c;
    std::vector<std::string> flags;
  };
  const std::vector<Case> cases = {
      {{ScheduleKind::one_f_one_b, 0, 4, 1}, {"--pipeline-model-parallel-size"}},
      {{ScheduleKind::gpipe, 2, 0, 1}, {"--global-batch-size", "--micro-batch-size"}},
      {{ScheduleKind::interleaved, 2, 4, 0}, {"--num-layers-per-virtual-pipeline-stage"}},
      {{ScheduleKind::one_f_one_b, 4, 8, 2}, {"--num-layers-per-virtual-pipeline-stage", "--pipeline-schedule"}},
      {{ScheduleKind::zb_h1, 4, 8, 2}, {"--num-layers-per-virtual-pipeline-stage", "--pipeline-schedule"}},
      {{ScheduleKind::interleaved, 4, 2, 2},
       {"--pipeline-model-parallel-size", "--global-batch-size", "--micro-batch-size",
        "--num-layers-per-virtual-pipeline-stage"}},
      {{ScheduleKind::interleaved, 4, 6, 2},
       {"--pipeline-model-parallel-size", "--global-batch-size", "--micro-batch-size", "multiple"}},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(name(k.c));
    try {
      make_schedule(k.c);
      ADD_FAILURE() << "no throw";
    } catch (const Error& e) {
      for (const std::string& f : k.flags) EXPECT_NE(std::string(e.what()).find(f), std::string::npos) << e.what();
    }
  }
  // The grid's invalid interleaved layouts are refused, the valid ones accepted.
  EXPECT_THROW(make_schedule({ScheduleKind::interleaved, 3, 16, 2}), Error);
  EXPECT_NO_THROW(make_schedule({ScheduleKind::interleaved, 4, 16, 4}));
  EXPECT_NO_THROW(make_schedule({ScheduleKind::zb_h1, 8, 1, 1}));  // fewer micro-batches than stages is fine
}

// Worked examples: the compute orders the header promises.
TEST(PipelineSchedule, WorkedExamples) {
  auto F = [](int mb, int c = 0) { return Action{K::forward, mb, c, -1}; };
  auto B = [](int mb, int c = 0) { return Action{K::backward, mb, c, -1}; };
  auto Bi = [](int mb) { return Action{K::backward_input, mb, 0, -1}; };
  auto W = [](int mb) { return Action{K::backward_weight, mb, 0, -1}; };

  // 1F1B, p = 4, m = 6, stage 1: two warm-up forwards, four F/B pairs, two cool-down backwards.
  Schedule s = make_schedule({ScheduleKind::one_f_one_b, 4, 6, 1});
  EXPECT_EQ(compute_only(s.stages[1]),
            (std::vector<Action>{F(0), F(1), F(2), B(0), F(3), B(1), F(4), B(2), F(5), B(3), B(4), B(5)}));

  // Interleaved, p = 2, m = 4, v = 2 (Megatron-Core's order): stage 0 warms up with
  // 2 (p - 1) + (v - 1) p = 4 passes; micro-batches go through a chunk in pairs.
  s = make_schedule({ScheduleKind::interleaved, 2, 4, 2});
  EXPECT_EQ(compute_only(s.stages[0]),
            (std::vector<Action>{F(0, 0), F(1, 0), F(0, 1), F(1, 1), F(2, 0), B(0, 1), F(3, 0), B(1, 1), F(2, 1),
                                 B(0, 0), F(3, 1), B(1, 0), B(2, 1), B(3, 1), B(2, 0), B(3, 0)}));
  EXPECT_EQ(compute_only(s.stages[1]),
            (std::vector<Action>{F(0, 0), F(1, 0), F(0, 1), B(0, 1), F(1, 1), B(1, 1), F(2, 0), B(0, 0), F(3, 0),
                                 B(1, 0), F(2, 1), B(2, 1), F(3, 1), B(3, 1), B(2, 0), B(3, 0)}));
  // Stage 1 chunk 1 is the last virtual stage: nothing to send forward; chunk 0 feeds stage 0's chunk 1.
  EXPECT_EQ(s.stages[1][0], (Action{K::recv_activation, 0, 0, 0}));
  EXPECT_EQ(s.stages[1][2], (Action{K::send_activation, 0, 0, 0}));

  // ZB-H1, p = 3, m = 3: 1F1B's F/Bi order; stage s runs W(j) after Bi(j + s).
  s = make_schedule({ScheduleKind::zb_h1, 3, 3, 1});
  EXPECT_EQ(compute_only(s.stages[0]), (std::vector<Action>{F(0), F(1), F(2), Bi(0), W(0), Bi(1), W(1), Bi(2), W(2)}));
  EXPECT_EQ(compute_only(s.stages[1]), (std::vector<Action>{F(0), F(1), Bi(0), F(2), Bi(1), W(0), Bi(2), W(1), W(2)}));
  EXPECT_EQ(compute_only(s.stages[2]), (std::vector<Action>{F(0), Bi(0), F(1), Bi(1), F(2), Bi(2), W(0), W(1), W(2)}));

  // Transfers wrap the compute they serve; one stage sends nothing.
  s = make_schedule({ScheduleKind::one_f_one_b, 2, 1, 1});
  EXPECT_EQ(s.stages[0], (std::vector<Action>{F(0), {K::send_activation, 0, 0, 1}, {K::recv_grad, 0, 0, 1}, B(0)}));
  EXPECT_EQ(s.stages[1], (std::vector<Action>{{K::recv_activation, 0, 0, 0}, F(0), B(0), {K::send_grad, 0, 0, 0}}));
  s = make_schedule({ScheduleKind::interleaved, 1, 3, 4});
  EXPECT_EQ(compute_only(s.stages[0]).size(), s.stages[0].size());
}

// Every schedule over the grid: well formed, and the simulation finishes with
// nothing left unreceived, whatever the costs and latency.
TEST(PipelineSchedule, GridIsWellFormedAndDeadlockFree) {
  const int n = for_each_valid([](const ScheduleConfig& c) {
    SCOPED_TRACE(name(c));
    const Schedule s = make_schedule(c);
    ASSERT_EQ(int(s.stages.size()), c.stages);
    EXPECT_EQ(structure_problems(s), "");
    for (const ActionCosts& costs : {unit_costs(c.chunks), ActionCosts{1.0, 3.0, 0.5, 0.7}}) {
      const SimResult r = simulate(s, costs);
      EXPECT_TRUE(r.deadlock_free) << r.describe();
      EXPECT_TRUE(r.defects.empty()) << r.describe();
      EXPECT_EQ(r.describe(), "");
      for (const StageStats& st : r.stages) {
        EXPECT_NEAR(st.idle, r.makespan - st.busy, 1e-12);
        EXPECT_LE(st.finish, r.makespan);
      }
    }
  });
  EXPECT_EQ(n, 3 * 8 * 16 + 4 * (16 + 8 + 5 + 4 + 3 + 2 + 2 + 2));  // the invalid interleaved layouts skipped
}

// GPipe and 1F1B: bubble (p - 1) / (m + p - 1) exactly (f = 1, b = 2, no
// latency), makespan (m + p - 1)(f + b); in flight m (GPipe) and min(p - s, m) (1F1B).
TEST(PipelineSchedule, GpipeAndOneFOneBBubbleAndInFlight) {
  for (int p = 1; p <= 8; ++p)
    for (int m = 1; m <= 16; ++m) {
      for (ScheduleKind kind : {ScheduleKind::gpipe, ScheduleKind::one_f_one_b}) {
        const ScheduleConfig c{kind, p, m, 1};
        SCOPED_TRACE(name(c));
        const SimResult r = simulate(make_schedule(c), unit_costs());
        ASSERT_TRUE(r.deadlock_free) << r.describe();
        EXPECT_NEAR(r.makespan, 3.0 * (m + p - 1), 1e-9);
        EXPECT_NEAR(r.bubble_fraction, double(p - 1) / (m + p - 1), 1e-9);
        EXPECT_NEAR(r.total_busy, 3.0 * m * p, 1e-9);
        for (int s = 0; s < p; ++s) {
          const int expected = kind == ScheduleKind::gpipe ? m : std::min(p - s, m);
          EXPECT_EQ(r.stages[s].peak_inflight, expected) << "stage " << s;
          EXPECT_EQ(r.stages[s].peak_pending_weight, expected) << "stage " << s;  // full backward frees both
        }
      }
    }
}

// Interleaved 1F1B with v chunks, each chunk pass costing f/v and b/v.
//
// Narayanan et al. 2021 (section 2.2.2) give the interleaved bubble time as
// (p - 1)(f + b) / v and quote it relative to the ideal time m (f + b):
// (p - 1) / (v m), "divided by v" against 1F1B's (p - 1) / m. The simulator
// measures idle over the makespan instead; with makespan = m (f + b) +
// (p - 1)(f + b) / v this is (p - 1) / (v m + p - 1) = r / (1 + r) for the
// paper's r = (p - 1) / (v m). The simulator reproduces it exactly on every
// valid layout of the grid (m a multiple of p): Megatron-Core's order leaves
// each stage idle only for the p - 1 chunk passes of fill and of drain. (With
// v = 1 it is 1F1B's bubble, though the interleaved warm-up holds more.)
//
// Peak in flight, in (micro-batch, chunk) units, follows from Megatron-Core's
// warm-up count w_s = min(2 (p - s - 1) + (v - 1) p, m v), or m v when m == p:
// the steady phase runs a forward before each backward, so the peak is
// w_s + 1 while any steady pair remains, else m v.
TEST(PipelineSchedule, InterleavedBubbleDividedByChunksAndInFlightFromWarmup) {
  int checked = 0;
  for (int p = 1; p <= 8; ++p)
    for (int m = p; m <= 16; m += p)
      for (int v = 1; v <= 4; ++v) {
        const ScheduleConfig c{ScheduleKind::interleaved, p, m, v};
        SCOPED_TRACE(name(c));
        const SimResult r = simulate(make_schedule(c), unit_costs(v));
        ASSERT_TRUE(r.deadlock_free) << r.describe();
        EXPECT_NEAR(r.bubble_fraction, double(p - 1) / (v * m + p - 1), 1e-9);
        EXPECT_NEAR(r.makespan, 3.0 * m + 3.0 * (p - 1) / v, 1e-9);
        for (int s = 0; s < p; ++s) {
          const int total = m * v;
          const int warmup = m == p ? total : std::min(2 * (p - s - 1) + (v - 1) * p, total);
          EXPECT_EQ(r.stages[s].peak_inflight, warmup < total ? warmup + 1 : total) << "stage " << s;
          EXPECT_EQ(interleaved_warmup_passes(p, m, v, s), warmup);
        }
        ++checked;
      }
  EXPECT_EQ(checked, 4 * (16 + 8 + 5 + 4 + 3 + 2 + 2 + 2));
  // The bubble shrinks strictly with v where there is one (p > 1).
  for (int v = 2; v <= 4; ++v)
    EXPECT_LT(simulate(make_schedule({ScheduleKind::interleaved, 4, 8, v}), unit_costs(v)).bubble_fraction,
              simulate(make_schedule({ScheduleKind::interleaved, 4, 8, v - 1}), unit_costs(v - 1)).bubble_fraction);
}

// ZB-H1 (Qi et al. 2023): with f = bi = w (so 1F1B's b = 2f) the bubble per
// stage falls from 1F1B's 3 (p - 1) f to the paper's (p - 1)(F + B - 2W) =
// (p - 1) f once m >= p, i.e. bubble fraction (p - 1) / (3 m + p - 1); the
// in-flight count per stage is 1F1B's, min(p - s, m); the weight-gradient
// inputs are held for min(p, m) micro-batches on every stage.
TEST(PipelineSchedule, ZeroBubbleH1BeatsOneFOneBAtTheSameInFlight) {
  for (int p = 2; p <= 8; ++p)
    for (int m = 1; m <= 16; ++m) {
      SCOPED_TRACE(fmt::format("p={} m={}", p, m));
      const SimResult zb = simulate(make_schedule({ScheduleKind::zb_h1, p, m, 1}), unit_costs());
      const SimResult fb = simulate(make_schedule({ScheduleKind::one_f_one_b, p, m, 1}), unit_costs());
      ASSERT_TRUE(zb.deadlock_free) << zb.describe();
      EXPECT_LT(zb.bubble_fraction, fb.bubble_fraction);
      EXPECT_NEAR(zb.total_busy, fb.total_busy, 1e-9);
      if (m >= p) {
        EXPECT_NEAR(zb.bubble_fraction, double(p - 1) / (3 * m + p - 1), 1e-9);
      }
      for (int s = 0; s < p; ++s) {
        EXPECT_EQ(zb.stages[s].peak_inflight, fb.stages[s].peak_inflight) << "stage " << s;
        EXPECT_EQ(zb.stages[s].peak_inflight, std::min(p - s, m)) << "stage " << s;
        EXPECT_EQ(zb.stages[s].peak_pending_weight, std::min(p, m)) << "stage " << s;
      }
    }
  // Also with unequal costs and a transfer latency ZB-H1 is never slower here.
  for (int p = 2; p <= 8; ++p)
    for (int m = p; m <= 16; ++m) {
      const ActionCosts costs{1.0, 1.2, 0.8, 0.1};
      EXPECT_LT(simulate(make_schedule({ScheduleKind::zb_h1, p, m, 1}), costs).makespan,
                simulate(make_schedule({ScheduleKind::one_f_one_b, p, m, 1}), costs).makespan)
          << "p=" << p << " m=" << m;
    }
}

// The simulator's own semantics on hand-made lists.
TEST(PipelineSim, LatencyAndPerStageCosts) {
  const Schedule s = make_schedule({ScheduleKind::one_f_one_b, 2, 1, 1});
  // F on stage 0, hop, F + B on stage 1, hop, B on stage 0: 1 + L + 3 + L + 2.
  const SimResult r = simulate(s, ActionCosts{1.0, 1.0, 1.0, 0.25});
  EXPECT_NEAR(r.makespan, 6.5, 1e-12);
  EXPECT_NEAR(r.stages[0].busy, 3.0, 1e-12);
  EXPECT_NEAR(r.stages[0].idle, 3.5, 1e-12);
  EXPECT_NEAR(r.stages[1].finish, 4.25, 1e-12);
  // A per-stage cost: stage 1 twice as slow.
  const SimResult u = simulate(
      s, [](int stage, const Action& a) { return (a.kind == K::forward ? 1.0 : 2.0) * (stage == 1 ? 2.0 : 1.0); },
      0.0);
  EXPECT_NEAR(u.makespan, 1 + 6 + 2, 1e-12);
  EXPECT_NEAR(u.stages[1].busy, 6.0, 1e-12);
  EXPECT_NEAR(u.bubble_fraction, (2 * 9.0 - 9.0) / (2 * 9.0), 1e-12);
}

TEST(PipelineSim, ReportsWhereADeadlockedScheduleIsStuck) {
  Schedule s = make_schedule({ScheduleKind::one_f_one_b, 2, 1, 1});
  // Stage 0 waits for the gradient before sending the activation it depends on.
  std::swap(s.stages[0][1], s.stages[0][2]);
  SimResult r = simulate(s, unit_costs());
  ASSERT_FALSE(r.deadlock_free);
  ASSERT_EQ(r.stuck.size(), 2u);
  EXPECT_EQ(r.stuck[0].stage, 0);
  EXPECT_EQ(r.stuck[0].index, 1u);
  EXPECT_EQ(r.stuck[0].action, (Action{K::recv_grad, 0, 0, 1}));
  EXPECT_NE(r.stuck[0].reason.find("stage 1"), std::string::npos) << r.stuck[0].reason;
  EXPECT_EQ(r.stuck[1].stage, 1);
  EXPECT_EQ(r.stuck[1].action, (Action{K::recv_activation, 0, 0, 0}));
  EXPECT_NE(r.describe().find("stage 0 stuck at action #1 (recv_grad mb0 c0 <- 1)"), std::string::npos)
      << r.describe();

  // A send nobody posts: the receiver is stuck, told no stage sends it.
  s = make_schedule({ScheduleKind::gpipe, 2, 2, 1});
  s.stages[0].erase(s.stages[0].begin() + 1);  // F0's send_activation
  r = simulate(s, unit_costs());
  ASSERT_FALSE(r.deadlock_free);
  ASSERT_EQ(r.stuck.size(), 2u);
  EXPECT_EQ(r.stuck[1].action, (Action{K::recv_activation, 0, 0, 0}));
  EXPECT_NE(r.stuck[1].reason.find("no stage ever sends it"), std::string::npos) << r.stuck[1].reason;

  // A compute whose input never arrived, and a send nobody receives.
  s = make_schedule({ScheduleKind::gpipe, 2, 1, 1});
  s.stages[1].erase(s.stages[1].begin());  // recv_activation before F0
  r = simulate(s, unit_costs());
  ASSERT_FALSE(r.deadlock_free);
  EXPECT_EQ(r.stuck.back().action, (Action{K::forward, 0, 0, -1}));
  EXPECT_NE(r.stuck.back().reason.find("never received"), std::string::npos);
  ASSERT_EQ(r.defects.size(), 1u);
  EXPECT_NE(r.defects[0].find("never received"), std::string::npos) << r.defects[0];

  // A wrong peer is caught, not silently matched.
  s = make_schedule({ScheduleKind::one_f_one_b, 3, 2, 1});
  for (Action& a : s.stages[1])
    if (a.kind == K::send_activation) a.peer = 0;
  r = simulate(s, unit_costs());
  ASSERT_FALSE(r.deadlock_free);
  EXPECT_EQ(r.stuck[0].stage, 0);
  bool wrong_peer = false;
  for (const Stuck& st : r.stuck) wrong_peer |= st.reason.find("not on peer 0") != std::string::npos;
  EXPECT_TRUE(wrong_peer) << r.describe();
}

}  // namespace
}  // namespace claw::parallel
