#include "claw/parallel/pipeline_executor.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <utility>

#include "claw/core/error.h"
#include "claw/core/log.h"

namespace claw::parallel {

std::vector<int> PipelineExecutor::slots_needed(const Schedule& schedule, int stage) {
  const int v = schedule.config.chunks;
  std::vector<int> live(v, 0), peak(v, 0);
  for (const Action& a : schedule.stages.at(stage)) {
    if (a.kind == ActionKind::forward) peak[a.chunk] = std::max(peak[a.chunk], ++live[a.chunk]);
    if (a.kind == ActionKind::backward || a.kind == ActionKind::backward_input) --live[a.chunk];
  }
  for (int& p : peak) p = std::max(p, 1);
  return peak;
}

PipelineExecutor::PipelineExecutor(std::vector<model::GPT*> chunks, comm::Group& pp, Schedule schedule, int64_t B,
                                   int64_t T, model::Recompute recompute, std::vector<DataParallel*> engines)
    : chunks_(std::move(chunks)), engines_(std::move(engines)), pp_(pp), schedule_(std::move(schedule)),
      stage_(pp.rank()) {
  const ScheduleConfig& c = schedule_.config;
  CLAW_CHECK(engines_.empty() || engines_.size() == chunks_.size(), "{} data-parallel engines for {} model chunks",
             engines_.size(), chunks_.size());
  CLAW_CHECK(c.stages == pp.size(), "schedule for {} stages on a pipeline group of {}", c.stages, pp.size());
  CLAW_CHECK(static_cast<int>(chunks_.size()) == c.chunks, "{} model chunks for a schedule of {}", chunks_.size(),
             c.chunks);
  CLAW_CHECK(c.stages > 1 || c.chunks == 1, "one pipeline stage holds the whole model in one chunk");
  const std::vector<int> slots = slots_needed(schedule_, stage_);
  slot_of_.assign(c.chunks, std::vector<int>(c.microbatches, -1));
  deferred_of_.assign(c.chunks, std::vector<int>(c.microbatches, -1));
  free_.resize(c.chunks);
  slots_ = slots;
  for (int ch = 0; ch < c.chunks; ++ch) {
    chunks_[ch]->reserve(B, T, recompute, slots[ch]);
    for (int k = slots[ch]; k-- > 0;) free_[ch].push_back(k);
  }
}

int64_t PipelineExecutor::tag(int mb, int vstage, bool grad) const {
  const int64_t V = static_cast<int64_t>(schedule_.config.stages) * schedule_.config.chunks;
  return (static_cast<int64_t>(mb) * V + vstage) * 2 + (grad ? 1 : 0);
}

int PipelineExecutor::acquire(int chunk, int mb) {
  int& slot = slot_of_[chunk][mb];
  if (slot >= 0) return slot;
  CLAW_CHECK(!free_[chunk].empty(), "chunk {} has no free activation slot for micro-batch {}", chunk, mb);
  slot = free_[chunk].back();
  free_[chunk].pop_back();
  return slot;
}

void PipelineExecutor::send(const Tensor& t, int peer, int64_t tag, bool drop_last_row) {
  reap_sends(false);
  Outgoing o;
  if (!spare_.empty()) {
    o.data = std::move(spare_.back());
    spare_.pop_back();
  }
  const auto* bytes = static_cast<const uint8_t*>(t.raw());
  o.data.assign(bytes, bytes + t.nbytes());
  if (drop_last_row) {
    const size_t row = t.nbytes() / static_cast<size_t>(t.numel()) * static_cast<size_t>(t.shape()[-1]);
    std::memset(o.data.data() + o.data.size() - row, 0, row);
    log::warn("fault", "step {}: --test-fault drop-pp-row: the activation sent to stage {} lost its last row", runs_,
              peer);
  }
  o.work = pp_.send_async(o.data.data(), t.numel(), t.dtype(), peer, static_cast<int>(tag));
  outgoing_.push_back(std::move(o));
}

void PipelineExecutor::recv(const Tensor& t, int peer, int64_t tag) {
  pp_.recv(t.raw(), t.numel(), t.dtype(), peer, static_cast<int>(tag));
}

comm::Work PipelineExecutor::recv_async(const Tensor& t, int peer, int64_t tag) {
  return pp_.recv_async(t.raw(), t.numel(), t.dtype(), peer, static_cast<int>(tag));
}

void PipelineExecutor::reap_sends(bool wait_all) {
  for (size_t i = 0; i < outgoing_.size();) {
    if (wait_all) outgoing_[i].work.wait();
    if (wait_all || outgoing_[i].work.test()) {
      spare_.push_back(std::move(outgoing_[i].data));
      outgoing_[i] = std::move(outgoing_.back());
      outgoing_.pop_back();
    } else {
      ++i;
    }
  }
}

namespace {
using Clock = std::chrono::steady_clock;
double seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }
}  // namespace

double PipelineExecutor::run(const std::function<PipelineMicroBatch(int)>& micro, double dloss_scale,
                             const std::function<void(int, double)>& on_loss) {
  const int p = schedule_.config.stages, m = schedule_.config.microbatches;
  double loss_sum = 0;
  timing_ = {};
  ++runs_;
  drop_row_ = pp_.faults() && pp_.faults()->drops_pp_row(runs_);
  const auto start = Clock::now();
  const std::vector<Action>& list = schedule_.stages[stage_];
  std::vector<comm::Work> posted(list.size());  // receives posted ahead of their action
  // Posts the receives that the compute action after list[i] needs, so their
  // transfers run while list[i] computes. An activation receive needs a free
  // slot now (else it is posted at its own action); a gradient lands in its
  // slot's output buffer, which the current action must not be writing.
  const auto post_ahead = [&](size_t i) {
    for (size_t j = i + 1; j < list.size() && !is_compute(list[j].kind); ++j) {
      const Action& r = list[j];
      if (r.kind != ActionKind::recv_activation && r.kind != ActionKind::recv_grad) continue;
      model::GPT& g = *chunks_[r.chunk];
      const model::StepCtx& rctx = micro(r.microbatch).ctx;
      const int vstage = virtual_stage(stage_, r.chunk, p);
      if (r.kind == ActionKind::recv_activation) {
        if (slot_of_[r.chunk][r.microbatch] < 0 && free_[r.chunk].empty()) continue;
        g.use_slot(acquire(r.chunk, r.microbatch));
        posted[j] = recv_async(g.stage_input(rctx), r.peer, tag(r.microbatch, vstage, false));
      } else {
        const Action& now = list[i];
        if (now.kind == ActionKind::forward && now.chunk == r.chunk && now.microbatch == r.microbatch) continue;
        g.use_slot(slot_of_[r.chunk][r.microbatch]);
        posted[j] = recv_async(g.stage_output(rctx), r.peer, tag(r.microbatch, vstage, true));
      }
    }
  };
  for (size_t i = 0; i < list.size(); ++i) {
    const Action& a = list[i];
    model::GPT& g = *chunks_[a.chunk];
    const int vstage = virtual_stage(stage_, a.chunk, p);
    const PipelineMicroBatch mb = micro(a.microbatch);
    if (is_compute(a.kind)) {
      post_ahead(i);
      if (!engines_.empty()) engines_[a.chunk]->begin_micro_batch(a.microbatch + 1 == m);
    }
    if ((a.kind == ActionKind::recv_activation || a.kind == ActionKind::recv_grad) && posted[i].valid()) {
      posted[i].wait();
      continue;
    }
    switch (a.kind) {
      case ActionKind::recv_activation:
        g.use_slot(acquire(a.chunk, a.microbatch));
        recv(g.stage_input(mb.ctx), a.peer, tag(a.microbatch, vstage, false));
        break;
      case ActionKind::forward: {
        g.use_slot(acquire(a.chunk, a.microbatch));
        const bool first = g.stage().pre_process, last = g.stage().post_process;
        double loss = 0;
        const auto t0 = Clock::now();
        g.forward_stage(mb.ctx, mb.tokens, first ? Tensor() : g.stage_input(mb.ctx), mb.targets, dloss_scale,
                        last ? &loss : nullptr);
        timing_.forward_s += seconds(t0, Clock::now());
        ++timing_.forwards;
        if (last && on_loss) on_loss(a.microbatch, loss);
        loss_sum += loss;
        break;
      }
      case ActionKind::send_activation:
        g.use_slot(slot_of_[a.chunk][a.microbatch]);
        send(g.stage_output(mb.ctx), a.peer, tag(a.microbatch, vstage + 1, false), std::exchange(drop_row_, false));
        break;
      case ActionKind::recv_grad:
        g.use_slot(slot_of_[a.chunk][a.microbatch]);
        recv(g.stage_output(mb.ctx), a.peer, tag(a.microbatch, vstage, true));
        break;
      case ActionKind::backward:
      case ActionKind::backward_input:
      case ActionKind::backward_weight:
        run_backward(a, mb);
        break;
      case ActionKind::send_grad:  // right after its backward: the shared scratch still holds the gradient
        send(g.stage_input_grad(mb.ctx), a.peer, tag(a.microbatch, vstage - 1, true));
        break;
    }
    const bool backward = a.kind == ActionKind::backward || a.kind == ActionKind::backward_input;
    if (a.kind == ActionKind::send_grad || (backward && vstage == 0))
      slot_of_[a.chunk][a.microbatch] = -1;
  }
  reap_sends(true);
  timing_.wall_s = seconds(start, Clock::now());
  for (int ch = 0; ch < schedule_.config.chunks; ++ch)
    CLAW_CHECK(static_cast<int>(free_[ch].size()) == slots_[ch], "chunk {}: {} activation slots still held after "
               "the step", ch, slots_[ch] - static_cast<int>(free_[ch].size()));
  return loss_sum;
}

void PipelineExecutor::run_backward(const Action& a, const PipelineMicroBatch& mb) {
  model::GPT& g = *chunks_[a.chunk];
  if (a.kind == ActionKind::backward_weight) {
    int& d = deferred_of_[a.chunk][a.microbatch];
    CLAW_CHECK(d >= 0, "weight gradient of micro-batch {} chunk {} before its input gradient", a.microbatch, a.chunk);
    const auto t0 = Clock::now();
    deferred_[d]->run(mb.ctx.cpu);
    timing_.weight_s += seconds(t0, Clock::now());
    ++timing_.weights;
    free_deferred_.push_back(d);
    d = -1;
    return;
  }
  int& slot = slot_of_[a.chunk][a.microbatch];
  CLAW_CHECK(slot >= 0, "backward of micro-batch {} chunk {} before its forward", a.microbatch, a.chunk);
  g.use_slot(slot);
  model::StepCtx ctx = mb.ctx;
  if (a.kind == ActionKind::backward_input) {
    // Input gradients now; the weight-gradient GEMMs wait in a list.
    int& d = deferred_of_[a.chunk][a.microbatch];
    if (free_deferred_.empty()) {
      free_deferred_.push_back(static_cast<int>(deferred_.size()));
      deferred_.push_back(std::make_unique<model::DeferredWeightGrads>());
    }
    d = free_deferred_.back();
    free_deferred_.pop_back();
    ctx.defer_weight_grads = deferred_[d].get();
  }
  const auto t0 = Clock::now();
  g.backward_stage(ctx, mb.tokens, g.stage().post_process ? Tensor() : g.stage_output(mb.ctx));
  timing_.backward_s += seconds(t0, Clock::now());
  ++timing_.backwards;
  free_[a.chunk].push_back(slot);
}

double PipelineExecutor::run_forward(const std::function<PipelineMicroBatch(int)>& micro, int microbatches) {
  const int p = schedule_.config.stages, v = schedule_.config.chunks, V = p * v;
  double loss_sum = 0;
  for (int k = 0; k < microbatches; ++k) {
    const PipelineMicroBatch mb = micro(k);
    for (int ch = 0; ch < v; ++ch) {
      model::GPT& g = *chunks_[ch];
      const int vstage = virtual_stage(stage_, ch, p);
      g.use_slot(0);
      if (vstage > 0) recv(g.stage_input(mb.ctx), stage_of_virtual(vstage - 1, p), tag(k, vstage, false));
      double loss = 0;
      g.forward_stage(mb.ctx, mb.tokens, vstage == 0 ? Tensor() : g.stage_input(mb.ctx), mb.targets, 0.0,
                      vstage == V - 1 ? &loss : nullptr);
      loss_sum += loss;
      if (vstage + 1 < V) send(g.stage_output(mb.ctx), stage_of_virtual(vstage + 1, p), tag(k, vstage + 1, false));
    }
  }
  reap_sends(true);
  return loss_sum;
}

}  // namespace claw::parallel
