#include "claw/parallel/pipeline_layout.h"

#include "claw/core/error.h"

namespace claw::parallel {

PipelineLayout make_pipeline_layout(const PipelineLayoutConfig& c) {
  const int64_t L = c.num_layers;
  const int p = c.stages;
  if (L < 1) fail("--num-layers must be positive, got {}", L);
  if (p < 1) fail("--pipeline-model-parallel-size must be at least 1, got {}", p);
  const bool uneven = c.first_stage_layers >= 0 || c.last_stage_layers >= 0;
  if (c.layers_per_virtual_stage < 0)
    fail("--num-layers-per-virtual-pipeline-stage must be positive, got {}", c.layers_per_virtual_stage);
  if (c.layers_per_virtual_stage > 0 && uneven)
    fail("--num-layers-per-virtual-pipeline-stage cannot be combined with --decoder-first-pipeline-num-layers / "
         "--decoder-last-pipeline-num-layers yet; use one or the other");
  if (uneven && p == 1)
    fail("--decoder-first-pipeline-num-layers / --decoder-last-pipeline-num-layers need "
         "--pipeline-model-parallel-size > 1");
  PipelineLayout out;
  out.stages = p;

  if (c.layers_per_virtual_stage > 0) {
    const int64_t n = c.layers_per_virtual_stage;
    if (L % (static_cast<int64_t>(p) * n) != 0)
      fail("--num-layers {} does not split into --pipeline-model-parallel-size {} stages of chunks of "
           "--num-layers-per-virtual-pipeline-stage {} layers; the layer count must be a multiple of {}",
           L, p, n, static_cast<int64_t>(p) * n);
    out.chunks = static_cast<int>(L / (static_cast<int64_t>(p) * n));
    out.ranges.assign(p, std::vector<LayerRange>(out.chunks));
    for (int s = 0; s < p; ++s)
      for (int ch = 0; ch < out.chunks; ++ch)
        out.ranges[s][ch] = {.first = (static_cast<int64_t>(ch) * p + s) * n, .count = n};
    return out;
  }

  std::vector<int64_t> counts(p, 0);
  if (!uneven) {
    if (L % p != 0)
      fail("--num-layers {} is not divisible by --pipeline-model-parallel-size {}; use a layer count that is a "
           "multiple of {}, or give the first/last stage its own count with --decoder-first-pipeline-num-layers / "
           "--decoder-last-pipeline-num-layers",
           L, p, p);
    counts.assign(p, L / p);
  } else {
    int64_t rest = L;
    int middle = p;
    if (c.first_stage_layers >= 0) {
      if (c.first_stage_layers < 1)
        fail("--decoder-first-pipeline-num-layers must be at least 1, got {}", c.first_stage_layers);
      counts[0] = c.first_stage_layers;
      rest -= c.first_stage_layers;
      --middle;
    }
    if (c.last_stage_layers >= 0) {
      if (c.last_stage_layers < 1)
        fail("--decoder-last-pipeline-num-layers must be at least 1, got {}", c.last_stage_layers);
      counts[p - 1] = c.last_stage_layers;
      rest -= c.last_stage_layers;
      --middle;
    }
    if (rest < 0 || (middle == 0 && rest != 0) || (middle > 0 && (rest < middle || rest % middle != 0)))
      fail("--num-layers {} minus --decoder-first-pipeline-num-layers {} and --decoder-last-pipeline-num-layers {} "
           "leaves {} layers for {} other stage(s); they must split evenly with at least one layer each",
           L, c.first_stage_layers < 0 ? 0 : c.first_stage_layers, c.last_stage_layers < 0 ? 0 : c.last_stage_layers,
           rest, middle);
    for (int s = 0; s < p; ++s)
      if ((s > 0 || c.first_stage_layers < 0) && (s < p - 1 || c.last_stage_layers < 0)) counts[s] = rest / middle;
  }
  out.ranges.assign(p, std::vector<LayerRange>(1));
  int64_t next = 0;
  for (int s = 0; s < p; ++s) {
    out.ranges[s][0] = {.first = next, .count = counts[s]};
    next += counts[s];
  }
  return out;
}

}  // namespace claw::parallel
