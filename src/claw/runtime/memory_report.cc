#include "claw/runtime/memory_report.h"

#include <algorithm>
#include <map>

#include <unistd.h>

#include <fmt/format.h>

#include "claw/comm/group.h"
#include "claw/core/error.h"
#include "claw/core/memory.h"

namespace claw::runtime {

MemoryPlan make_memory_plan(const parallel::DataParallelMemory& m, int zero_stage, int dp, const ArenaPlan& acts) {
  MemoryPlan p;
  p.params = m.values;
  p.grads = m.grads;
  p.optimizer = m.optimizer;  // AdamW exp_avg + exp_avg_sq of this rank's segments
  p.gathered = m.gather_slots;
  p.staging = m.staging_slots;
  p.zero_stage = zero_stage;
  p.dp = dp;
  p.activations = acts.total();
  // Entries are 64-byte rounded in the arena. A stored layer is the largest
  // "layers.N." group (recomputed layers keep only their output).
  std::map<std::string, size_t> layer_bytes;
  for (const auto& e : acts.entries()) {
    size_t bytes = (e.bytes + 63) / 64 * 64;
    if (e.name.rfind("layers.", 0) == 0) layer_bytes[e.name.substr(0, e.name.find('.', 7))] += bytes;
    if (e.name.rfind("scratch.", 0) == 0) p.scratch += bytes;
    if (e.name.rfind("recompute.", 0) == 0) p.recompute_region += bytes;
    if (e.name.rfind("half_work.", 0) == 0) p.half_work += bytes;
  }
  for (const auto& [name, bytes] : layer_bytes) p.per_layer_activations = std::max(p.per_layer_activations, bytes);
  return p;
}

std::string format_memory_plan(const MemoryPlan& p, const model::ModelConfig& cfg, int64_t num_params, int64_t B,
                               int64_t T, int64_t recomputed_layers) {
  auto row = [](const char* what, size_t bytes, const std::string& note) {
    return fmt::format("  {:<16} {:>12}  {}\n", what, format_bytes(static_cast<double>(bytes)), note);
  };
  std::string s = "memory plan (allocated before step 1):\n";
  const std::string shard = fmt::format("1/{} shard (ZeRO-{})", p.dp, p.zero_stage);
  const std::string frozen =
      p.frozen_params > 0 ? fmt::format(" ({:.2f}M frozen: no gradients or optimizer state)", p.frozen_params / 1e6)
                          : "";
  const std::string master = p.master == DType::f16 ? "fp16 master" : "fp32";
  s += row("parameters", p.params,
           fmt::format("{:.2f}M {} parameters{}{}", num_params / 1e6, master, frozen,
                       p.zero_stage >= 3 ? ", " + shard : ""));
  const std::string grads_of = p.frozen_params > 0 ? "trainable parameters" : "same layout";
  s += row("gradients", p.grads, p.zero_stage >= 2 ? "fp32, " + grads_of + ", " + shard : "fp32, " + grads_of);
  if (p.optimizer)  // none when the model only runs forward (claw eval)
    s += row("optimizer", p.optimizer,
             p.zero_stage >= 1 ? "AdamW exp_avg + exp_avg_sq, " + shard : "AdamW exp_avg + exp_avg_sq");
  if (p.gathered && p.zero_stage >= 3)
    s += row("gathered", p.gathered,
             p.master == DType::f32 ? "ZeRO-3: units all-gathered just before use"
                                    : "ZeRO-3: units all-gathered and widened to fp32 just before use");
  else if (p.gathered)
    s += row("working copies", p.gathered, "fp32 copies of the units in use, widened from the fp16 masters");
  if (p.staging) s += row("grad staging", p.staging, "ZeRO-2/3: unit gradients until reduce-scattered");
  std::string layers =
      recomputed_layers == 0
          ? fmt::format("{} layers x {}", cfg.num_layers, format_bytes(static_cast<double>(p.per_layer_activations)))
          : fmt::format("{}{} recomputed layers keeping their output, sharing {}",
                        recomputed_layers == cfg.num_layers
                            ? ""
                            : fmt::format("{} layers x {} + ", cfg.num_layers - recomputed_layers,
                                          format_bytes(static_cast<double>(p.per_layer_activations))),
                        recomputed_layers, format_bytes(static_cast<double>(p.recompute_region)));
  if (p.half_work > 0)
    layers = fmt::format("{} ({}) + fp32 working region {}", layers, p.activation_dtype == DType::f16 ? "fp16" : "bf16",
                         format_bytes(static_cast<double>(p.half_work)));
  s += row("activations", p.activations,
           fmt::format("micro-batch {}x{}: {} + scratch {}", B, T, layers, format_bytes(static_cast<double>(p.scratch))));
  s += row("total", p.total(), "");
  return s;
}

void check_device_memory(const plan::StageMemory& mine, const kernels::cuda::DeviceInfo& device) {
  const double needed = mine.total() * 1.03;
  if (needed <= static_cast<double>(device.free_bytes)) return;
  fail("the memory plan needs {} on GPU {} ({}; + 3% margin), more than its {} free; fewer --num-layers, a smaller "
       "--micro-batch-size or --seq-length, or --recompute-granularity full would lower it",
       format_bytes(needed), device.index, plan::describe(mine), format_bytes(static_cast<double>(device.free_bytes)));
}

void check_node_memory(const plan::StageMemory& mine, comm::Group& world) {
  // Ranks on one host, found by its name (hashed to fit a double exactly).
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  const double key = static_cast<double>(std::hash<std::string>{}(host) & ((uint64_t{1} << 52) - 1));
  std::vector<double> all = {key, mine.total()};
  if (world.size() > 1) {
    const std::vector<double> own = all;
    all.resize(2 * static_cast<size_t>(world.size()));
    world.all_gather(own.data(), all.data(), 2, DType::f64);
  }
  double node = 0;
  int ranks = 0;
  for (size_t r = 0; r < all.size(); r += 2)
    if (all[r] == key) {
      node += all[r + 1];
      ++ranks;
    }
  // The model matches claw's arenas to the byte and the measured peak RSS
  // within about 1% (bench/drivers/planner_memory.py); 3% leaves room for the rest.
  const double needed = node * 1.03;
  const MemoryLimit avail = available_memory();
  if (needed <= static_cast<double>(avail.bytes)) return;
  const std::string rank = mine.stage > 0 ? fmt::format("this one, pipeline stage {}", mine.stage) : "this one";
  fail("the memory plan needs {} on this node ({}; {}: {}; + 3% margin), more than the {} available ({}); fewer "
       "--num-layers, a smaller --micro-batch-size or --seq-length, more ranks over more nodes "
       "(--tensor-/--pipeline-model-parallel-size), --recompute-granularity full, or --use-distributed-optimizer / "
       "--zero-stage 3 would lower it",
       format_bytes(needed), ranks == 1 ? "1 rank" : fmt::format("{} ranks", ranks), rank, plan::describe(mine),
       format_bytes(static_cast<double>(avail.bytes)), avail.source);
}

}  // namespace claw::runtime
