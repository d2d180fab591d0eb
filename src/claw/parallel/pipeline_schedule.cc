#include "claw/parallel/pipeline_schedule.h"

#include <algorithm>

#include <fmt/format.h>

#include "claw/core/error.h"

namespace claw::parallel {

ScheduleKind parse_schedule_kind(std::string_view name) {
  if (name == "gpipe") return ScheduleKind::gpipe;
  if (name == "1f1b") return ScheduleKind::one_f_one_b;
  if (name == "interleaved") return ScheduleKind::interleaved;
  if (name == "zb-h1") return ScheduleKind::zb_h1;
  fail("--pipeline-schedule: unknown schedule '{}' (expected gpipe, 1f1b, interleaved or zb-h1)", name);
}

std::string_view to_string(ScheduleKind kind) {
  switch (kind) {
    case ScheduleKind::gpipe: return "gpipe";
    case ScheduleKind::one_f_one_b: return "1f1b";
    case ScheduleKind::interleaved: return "interleaved";
    case ScheduleKind::zb_h1: return "zb-h1";
  }
  return "?";
}

std::string_view to_string(ActionKind kind) {
  switch (kind) {
    case ActionKind::forward: return "F";
    case ActionKind::backward: return "B";
    case ActionKind::backward_input: return "Bi";
    case ActionKind::backward_weight: return "W";
    case ActionKind::send_activation: return "send_activation";
    case ActionKind::recv_activation: return "recv_activation";
    case ActionKind::send_grad: return "send_grad";
    case ActionKind::recv_grad: return "recv_grad";
  }
  return "?";
}

bool is_compute(ActionKind kind) {
  return kind == ActionKind::forward || kind == ActionKind::backward || kind == ActionKind::backward_input ||
         kind == ActionKind::backward_weight;
}

bool is_transfer(ActionKind kind) { return !is_compute(kind); }

std::string to_string(const Action& a) {
  std::string s = fmt::format("{} mb{} c{}", to_string(a.kind), a.microbatch, a.chunk);
  if (a.kind == ActionKind::send_activation || a.kind == ActionKind::send_grad) s += fmt::format(" -> {}", a.peer);
  if (a.kind == ActionKind::recv_activation || a.kind == ActionKind::recv_grad) s += fmt::format(" <- {}", a.peer);
  return s;
}

void ScheduleConfig::validate() const {
  if (stages < 1) fail("--pipeline-model-parallel-size must be at least 1, got {}", stages);
  if (microbatches < 1)
    fail("the number of micro-batches per step (--global-batch-size / (--micro-batch-size x data-parallel size)) "
         "must be at least 1, got {}",
         microbatches);
  if (chunks < 1)
    fail("the number of model chunks per stage (from --num-layers-per-virtual-pipeline-stage) must be at least 1, "
         "got {}",
         chunks);
  if (chunks > 1 && kind != ScheduleKind::interleaved)
    fail("{} model chunks per stage (--num-layers-per-virtual-pipeline-stage) need --pipeline-schedule interleaved, "
         "not --pipeline-schedule {}",
         chunks, to_string(kind));
  if (kind != ScheduleKind::interleaved) return;
  // Megatron-Core's interleaved schedule walks micro-batches through a chunk in groups of p.
  if (microbatches < stages)
    fail("--pipeline-schedule interleaved needs at least as many micro-batches per step as pipeline stages: "
         "{} micro-batches < --pipeline-model-parallel-size {}; raise --global-batch-size or lower "
         "--micro-batch-size (or drop --num-layers-per-virtual-pipeline-stage)",
         microbatches, stages);
  if (microbatches % stages != 0)
    fail("--pipeline-schedule interleaved needs the number of micro-batches per step ({}) to be a multiple of "
         "--pipeline-model-parallel-size {}; adjust --global-batch-size or --micro-batch-size "
         "(or drop --num-layers-per-virtual-pipeline-stage)",
         microbatches, stages);
}

int interleaved_warmup_passes(int stages, int microbatches, int chunks, int stage) {
  const int total = microbatches * chunks;
  if (microbatches == stages) return total;  // all forwards, then all backwards
  return std::min(2 * (stages - stage - 1) + (chunks - 1) * stages, total);
}

namespace {

Action compute(ActionKind kind, int mb, int chunk = 0) { return Action{kind, mb, chunk, -1}; }

// The compute order of one stage, without transfers.

std::vector<Action> gpipe_order(const ScheduleConfig& c) {
  std::vector<Action> out;
  for (int mb = 0; mb < c.microbatches; ++mb) out.push_back(compute(ActionKind::forward, mb));
  for (int mb = 0; mb < c.microbatches; ++mb) out.push_back(compute(ActionKind::backward, mb));
  return out;
}

// 1F1B's order of forwards and backwards; `backward` is the action that releases
// the micro-batch's activations (B, or Bi for ZB-H1).
std::vector<Action> one_f_one_b_order(const ScheduleConfig& c, int stage, ActionKind backward) {
  const int m = c.microbatches;
  const int warmup = std::min(c.stages - stage - 1, m);
  std::vector<Action> out;
  for (int i = 0; i < warmup; ++i) out.push_back(compute(ActionKind::forward, i));
  for (int i = 0; i < m - warmup; ++i) {
    out.push_back(compute(ActionKind::forward, warmup + i));
    out.push_back(compute(backward, i));
  }
  for (int i = m - warmup; i < m; ++i) out.push_back(compute(backward, i));
  return out;
}

// ZB-H1: 1F1B's F/Bi order; W(j) follows Bi(j + stage); the rest at the end.
std::vector<Action> zb_h1_order(const ScheduleConfig& c, int stage) {
  const int lag = stage;
  std::vector<Action> out;
  int next_w = 0;
  for (const Action& a : one_f_one_b_order(c, stage, ActionKind::backward_input)) {
    out.push_back(a);
    if (a.kind == ActionKind::backward_input && a.microbatch >= lag)
      out.push_back(compute(ActionKind::backward_weight, next_w++));
  }
  while (next_w < c.microbatches) out.push_back(compute(ActionKind::backward_weight, next_w++));
  return out;
}

// Megatron-Core's interleaved order (see the header).
std::vector<Action> interleaved_order(const ScheduleConfig& c, int stage) {
  const int p = c.stages, v = c.chunks, total = c.microbatches * c.chunks;
  auto pass = [&](ActionKind kind, int k) {
    const int in_group = k % (p * v);
    int chunk = in_group / p;
    if (kind == ActionKind::backward) chunk = v - 1 - chunk;
    return compute(kind, (k / (p * v)) * p + k % p, chunk);
  };
  const int warmup = interleaved_warmup_passes(p, c.microbatches, v, stage);
  std::vector<Action> out;
  for (int k = 0; k < warmup; ++k) out.push_back(pass(ActionKind::forward, k));
  for (int k = 0; k < total - warmup; ++k) {
    out.push_back(pass(ActionKind::forward, warmup + k));
    out.push_back(pass(ActionKind::backward, k));
  }
  for (int k = total - warmup; k < total; ++k) out.push_back(pass(ActionKind::backward, k));
  return out;
}

// Wraps each compute action in the transfers it needs (see the header).
std::vector<Action> with_transfers(const std::vector<Action>& order, int stage, const ScheduleConfig& c) {
  const int p = c.stages, last = c.stages * c.chunks - 1;
  std::vector<Action> out;
  out.reserve(order.size() * 2);
  for (const Action& a : order) {
    const int vs = virtual_stage(stage, a.chunk, p);
    const bool from_prev = vs > 0 && stage_of_virtual(vs - 1, p) != stage;
    const bool to_next = vs < last && stage_of_virtual(vs + 1, p) != stage;
    const int prev = vs > 0 ? stage_of_virtual(vs - 1, p) : -1;
    const int next = vs < last ? stage_of_virtual(vs + 1, p) : -1;
    switch (a.kind) {
      case ActionKind::forward:
        if (from_prev) out.push_back({ActionKind::recv_activation, a.microbatch, a.chunk, prev});
        out.push_back(a);
        if (to_next) out.push_back({ActionKind::send_activation, a.microbatch, a.chunk, next});
        break;
      case ActionKind::backward:
      case ActionKind::backward_input:
        if (to_next) out.push_back({ActionKind::recv_grad, a.microbatch, a.chunk, next});
        out.push_back(a);
        if (from_prev) out.push_back({ActionKind::send_grad, a.microbatch, a.chunk, prev});
        break;
      default: out.push_back(a);
    }
  }
  return out;
}

}  // namespace

Schedule make_schedule(const ScheduleConfig& config) {
  config.validate();
  Schedule s{config, {}};
  s.stages.resize(config.stages);
  for (int stage = 0; stage < config.stages; ++stage) {
    std::vector<Action> order;
    switch (config.kind) {
      case ScheduleKind::gpipe: order = gpipe_order(config); break;
      case ScheduleKind::one_f_one_b: order = one_f_one_b_order(config, stage, ActionKind::backward); break;
      case ScheduleKind::interleaved: order = interleaved_order(config, stage); break;
      case ScheduleKind::zb_h1: order = zb_h1_order(config, stage); break;
    }
    s.stages[stage] = with_transfers(order, stage, config);
  }
  return s;
}

}  // namespace claw::parallel
