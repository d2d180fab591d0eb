#include "claw/plan/memory_model.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "claw/comm/group.h"
#include "claw/core/arena.h"
#include "claw/core/error.h"
#include "claw/model/gpt.h"
#include "claw/optim/adamw.h"
#include "claw/parallel/data_parallel.h"
#include "claw/parallel/pipeline_executor.h"

namespace claw::plan {

StageMemory stage_memory(const Job& job, const Layout& l, int stage, const Precision& prec, const Device* device,
                         int dp_rank) {
  CLAW_CHECK(stage >= 0 && stage < l.pp, "stage {} of {}", stage, l.pp);
  const model::ModelConfig& cfg = job.model;
  const parallel::PipelineLayout pl = pipeline_layout(job, l);
  StageMemory out;
  out.stage = stage;
  if (l.pp > 1) {
    out.slots = parallel::PipelineExecutor::slots_needed(parallel::make_schedule(schedule_config(job, l, pl.chunks)),
                                                         stage);
  } else {
    out.slots = {1};
  }
  // One TP rank's shapes (rank 0; ranks differ only in which rows they hold).
  const bool moe = cfg.moe.enabled();
  const model::TpDims dims{l.tp, l.sequence_parallel, moe ? l.ep : 1};
  comm::ShapeGroup tp_group("tp", l.tp, 0), kv_group("tp_kv", dims.kv_replicas(cfg), 0), ep_group("ep", l.ep, 0);
  model::TensorParallel tp{.group = &tp_group, .kv_group = &kv_group, .sequence_parallel = l.sequence_parallel};
  if (moe) {  // experts [0, E / EP) (rank 0's)
    if (l.ep > 1) tp.ep = &ep_group;
    tp.expert_region = l.expert_region();
  }
  const int shards = l.dp * l.cp / l.instances;  // ZeRO shards over dp x cp (one instance of it)
  model::StoreOptions store = parallel::store_options(l.zero_stage, shards, dp_rank % shards);
  store.expert_shards = l.expert_dp();
  store.allocate = false;
  store.freeze = job.freeze;
  store.dtypes.master = prec.main_params_dtype;
  const parallel::DataParallelConfig dpc{.zero_stage = l.zero_stage, .overlap_grad_reduce = l.overlap_grad_reduce,
                                         .overlap_param_gather = l.overlap_param_gather,
                                         .optimizer_bytes_per_element = static_cast<size_t>(std::lround(2 * prec.moment_bytes)),
                                         .optimizer_fp8_moments = prec.fp8_moments,
                                         .optimizer_fp8_block = optim::AdamW::kFp8Block,
                                         .instances = l.instances,
                                         .diloco_inner_steps = l.diloco_inner_steps,
                                         .diloco_delta_bits = l.diloco_delta_bits};
  const int64_t T = job.seq_length / l.cp;
  double unfused_scores = 0;
  int64_t largest_all_reduce = 0, largest_reduce_scatter = 0;  // bytes, at the stack's 16-bit precision (Korthikanti et al.'s 5 a s^2 b)
  for (int c = 0; c < pl.chunks; ++c) {
    const parallel::LayerRange r = pl.at(stage, c);
    const model::PipelineStage ps{.first_layer = r.first, .num_layers = r.count,
                                  .pre_process = stage == 0 && c == 0,
                                  .post_process = stage == l.pp - 1 && c == pl.chunks - 1};
    const model::GPT shape(cfg, store, tp, ps);
    const parallel::DataParallelMemory dm = parallel::DataParallel::plan_memory(shape, dpc);
    out.arenas.values += dm.values;
    out.arenas.grads += dm.grads;
    out.arenas.optimizer += dm.optimizer;
    out.arenas.gathered += dm.gather_slots;
    out.arenas.staging += dm.staging_slots;
    out.param_elements += shape.store().numel();
    out.frozen_elements += shape.store().frozen_numel();
    largest_all_reduce = std::max(largest_all_reduce, dm.largest_all_reduce);
    largest_reduce_scatter = std::max(largest_reduce_scatter, dm.largest_reduce_scatter);
    const model::Recompute rc{std::min(l.recompute_num_layers, r.count)};
    out.arenas.activations += model::plan_activations(cfg, l.micro_batch_size, T, rc, dims, ps, out.slots[c]).total();
    if (!prec.flash_attention) {  // stored layers' scores for each micro-batch in flight, plus the recompute region's
      const double per_layer = 5.0 * l.micro_batch_size * dims.heads(cfg) * T * job.seq_length;
      unfused_scores += per_layer * (static_cast<double>(r.count - rc.layers) * out.slots[c] + (rc.layers > 0 ? 1 : 0));
    }
  }
  const auto scaled = [](size_t fp32_bytes, double bytes) { return static_cast<double>(fp32_bytes) / 4.0 * bytes; };
  out.params = scaled(out.arenas.values, prec.param_bytes);
  out.grads = scaled(out.arenas.grads, prec.grad_bytes);
  // The optimizer arena holds the two moments per element; a master copy adds master_bytes.
  const double state_bytes = std::round(2 * prec.moment_bytes) + prec.fp8_moments * 4.0 / optim::AdamW::kFp8Block;
  out.optimizer = static_cast<double>(out.arenas.optimizer) / state_bytes * (state_bytes + prec.master_bytes);
  out.zero_buffers = scaled(out.arenas.gathered, prec.param_bytes) + scaled(out.arenas.staging, prec.grad_bytes);
  out.activations = scaled(out.arenas.activations, prec.activation_bytes) + unfused_scores;
  if (device) {
    out.runtime = device->runtime_overhead_bytes;
    if (l.dp * l.cp > 1)
      out.comm_buffers = (device->all_reduce_temp * static_cast<double>(largest_all_reduce) +
                          device->reduce_scatter_temp * static_cast<double>(largest_reduce_scatter)) *
                         prec.grad_bytes;
  }
  return out;
}

StageMemory peak_memory(const Job& job, const Layout& l, const Precision& prec, const Device* device) {
  std::vector<int> stages = {0};
  if (l.first_stage_layers >= 0 || l.last_stage_layers >= 0) {
    for (int s = 1; s < l.pp; ++s) stages.push_back(s);
  } else if (l.pp > 1) {
    stages.push_back(l.pp - 1);
  }
  StageMemory best;
  bool first = true;
  for (int s : stages) {
    StageMemory m = stage_memory(job, l, s, prec, device);
    if (first || m.total() > best.total()) best = std::move(m);
    first = false;
  }
  return best;
}

std::string describe(const StageMemory& m) {
  auto g = [](double b) { return b / (1024.0 * 1024.0 * 1024.0); };
  return fmt::format("params {:.2f}{} + grads {:.2f} + optimizer {:.2f}{} + activations {:.2f} + runtime {:.2f} GiB",
                     g(m.params),
                     m.frozen_elements > 0
                         ? fmt::format(" ({:.0f}% frozen)", 100.0 * static_cast<double>(m.frozen_elements) /
                                                                static_cast<double>(m.param_elements))
                         : "",
                     g(m.grads), g(m.optimizer),
                     m.zero_buffers > 0 ? fmt::format(" + ZeRO buffers {:.2f}", g(m.zero_buffers)) : "",
                     g(m.activations), g(m.runtime)) +
         (m.comm_buffers > 0 ? fmt::format(" + comm buffers {:.2f} GiB", g(m.comm_buffers)) : "");
}

}  // namespace claw::plan
