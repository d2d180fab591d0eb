// Pipeline schedules in the simulator (parallel/pipeline_sim.h): bubble
// fraction and peak in-flight micro-batches per stage for each schedule,
// with backward = 2 x forward (input and weight halves equal) and a
// point-to-point latency given as a fraction of a forward.
//
//   build/bin/bench_pipeline_sim [latency]
//   build/bin/bench_pipeline_sim --predict SCHEDULE P M V FWD_MS BWD_MS [W_MS]
//       FWD_MS / BWD_MS / W_MS: comma-separated per-stage costs of one chunk
//       pass: forward, backward (full, or the input-gradient part when W_MS
//       is given) and weight gradient (measured, e.g. by
//       bench/drivers/bench_pipeline.py); prints the simulated step time and each
//       stage's idle time in ms.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "claw/parallel/pipeline_schedule.h"
#include "claw/parallel/pipeline_sim.h"

using namespace claw::parallel;

namespace {
std::vector<double> parse_list(const char* s) {
  std::vector<double> out;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ',')) out.push_back(std::atof(item.c_str()));
  return out;
}

int predict(int argc, char** argv) {
  if (argc < 8) {
    std::fprintf(stderr, "usage: bench_pipeline_sim --predict SCHEDULE P M V FWD_MS BWD_MS [W_MS]\n");
    return 2;
  }
  const Schedule s = make_schedule({.kind = parse_schedule_kind(argv[2]), .stages = std::atoi(argv[3]),
                                    .microbatches = std::atoi(argv[4]), .chunks = std::atoi(argv[5])});
  const std::vector<double> fwd = parse_list(argv[6]), bwd = parse_list(argv[7]);
  const std::vector<double> w = argc > 8 ? parse_list(argv[8]) : std::vector<double>(fwd.size(), 0.0);
  const SimResult r = simulate(
      s,
      [&](int stage, const Action& a) {
        if (a.kind == ActionKind::forward) return fwd.at(stage);
        if (a.kind == ActionKind::backward_weight) return w.at(stage);
        return bwd.at(stage);
      },
      0.0);
  std::printf("makespan_ms %.3f bubble %.4f idle_ms", r.makespan, r.bubble_fraction);
  for (const StageStats& st : r.stages) std::printf(" %.3f", st.idle);
  std::printf("\n");
  return r.deadlock_free ? 0 : 1;
}
}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "--predict") == 0) return predict(argc, argv);
  const double latency = argc > 1 ? std::atof(argv[1]) : 0.0;
  std::printf("forward 1, backward_input 1, backward_weight 1 (per stage; / v per chunk), p2p latency %.2f\n\n",
              latency);
  std::printf("| schedule | p | m | v | makespan | bubble | closed form | peak in-flight (stage 0..p-1) | "
              "pending W (stage 0..p-1) |\n|---|---|---|---|---|---|---|---|---|\n");
  struct Row {
    ScheduleKind kind;
    int p, m, v;
  };
  const Row rows[] = {{ScheduleKind::gpipe, 4, 8, 1},       {ScheduleKind::one_f_one_b, 4, 8, 1},
                      {ScheduleKind::interleaved, 4, 8, 2}, {ScheduleKind::zb_h1, 4, 8, 1},
                      {ScheduleKind::gpipe, 4, 16, 1},      {ScheduleKind::one_f_one_b, 4, 16, 1},
                      {ScheduleKind::interleaved, 4, 16, 4}, {ScheduleKind::zb_h1, 4, 16, 1},
                      {ScheduleKind::one_f_one_b, 8, 32, 1}, {ScheduleKind::interleaved, 8, 32, 2},
                      {ScheduleKind::zb_h1, 8, 32, 1}};
  for (const Row& r : rows) {
    const Schedule s = make_schedule({.kind = r.kind, .stages = r.p, .microbatches = r.m, .chunks = r.v});
    const double v = r.v;
    const SimResult res =
        simulate(s, ActionCosts{.forward = 1 / v, .backward_input = 1 / v, .backward_weight = 1 / v,
                                .p2p_latency = latency});
    double closed = 0;
    const double p = r.p, m = r.m;
    switch (r.kind) {
      case ScheduleKind::gpipe:
      case ScheduleKind::one_f_one_b: closed = (p - 1) / (m + p - 1); break;
      case ScheduleKind::interleaved: closed = (p - 1) / (v * m + p - 1); break;
      case ScheduleKind::zb_h1: closed = (p - 1) / (3 * m + p - 1); break;
    }
    std::string inflight, pending;
    for (const StageStats& st : res.stages) {
      inflight += (inflight.empty() ? "" : " ") + std::to_string(st.peak_inflight);
      pending += (pending.empty() ? "" : " ") + std::to_string(st.peak_pending_weight);
    }
    std::printf("| %s | %d | %d | %d | %.2f | %.4f | %.4f | %s | %s |\n", std::string(to_string(r.kind)).c_str(),
                r.p, r.m, r.v, res.makespan, res.bubble_fraction, closed, inflight.c_str(), pending.c_str());
    if (!res.deadlock_free) std::printf("  DEADLOCK: %s\n", res.describe().c_str());
  }
  return 0;
}
