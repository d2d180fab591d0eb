#include "claw/train/memory_report.h"

#include <fmt/format.h>

namespace claw::train {

MemoryPlan make_memory_plan(size_t params_bytes, const ArenaPlan& acts) {
  MemoryPlan p;
  p.params = params_bytes;
  p.grads = params_bytes;
  p.optimizer = 2 * params_bytes;  // AdamW exp_avg + exp_avg_sq at the parameters' offsets
  p.activations = acts.total();
  for (const auto& e : acts.entries()) {
    if (e.name.rfind("layers.0.", 0) == 0) p.per_layer_activations += (e.bytes + 63) / 64 * 64;
    if (e.name.rfind("scratch.", 0) == 0) p.scratch += (e.bytes + 63) / 64 * 64;
  }
  return p;
}

std::string format_memory_plan(const MemoryPlan& p, const model::ModelConfig& cfg, int64_t num_params, int64_t B,
                               int64_t T) {
  auto row = [](const char* what, size_t bytes, const std::string& note) {
    return fmt::format("  {:<16} {:>12}  {}\n", what, format_bytes(static_cast<double>(bytes)), note);
  };
  std::string s = "memory plan (allocated before step 1):\n";
  s += row("parameters", p.params, fmt::format("{:.2f}M fp32 parameters", num_params / 1e6));
  s += row("gradients", p.grads, "fp32, same layout");
  s += row("optimizer", p.optimizer, "AdamW exp_avg + exp_avg_sq");
  s += row("activations", p.activations,
           fmt::format("micro-batch {}x{}: {} layers x {} + scratch {}", B, T, cfg.num_layers,
                       format_bytes(static_cast<double>(p.per_layer_activations)),
                       format_bytes(static_cast<double>(p.scratch))));
  s += row("total", p.total(), "");
  return s;
}

}  // namespace claw::train
