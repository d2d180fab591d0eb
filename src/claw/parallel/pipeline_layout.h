// Which transformer layers each pipeline stage (and each of its model
// chunks) holds: a pure function of the layer count and the pipeline flags,
// as Megatron-Core assigns them (get_num_layers_to_build /
// get_transformer_layer_offset).
//
//   even          L / p consecutive layers per stage: stage s holds
//                 [s L/p, (s+1) L/p). L % p must be 0.
//   interleaved   --num-layers-per-virtual-pipeline-stage n: v = L / (p n)
//                 chunks per stage; chunk c of stage s is virtual stage
//                 c p + s and holds [(c p + s) n, (c p + s + 1) n), so the
//                 layers visit stages 0..p-1, then 0..p-1 again (v times).
//                 L must be divisible by p n.
//   uneven        --decoder-first-pipeline-num-layers a and/or
//                 --decoder-last-pipeline-num-layers z: the first (last)
//                 stage holds a (z) layers and the stages between share the
//                 rest evenly, which must divide with at least one layer
//                 per stage (a stage without layers would only relay).
//                 Not combined with interleaving (refused, naming both flags).
//
// Errors name the flags and say what would be valid.
#pragma once

#include <cstdint>
#include <vector>

namespace claw::parallel {

struct PipelineLayoutConfig {
  int64_t num_layers = 0;                   // --num-layers
  int stages = 1;                           // --pipeline-model-parallel-size
  int64_t layers_per_virtual_stage = 0;     // --num-layers-per-virtual-pipeline-stage (0: not interleaved)
  int64_t first_stage_layers = -1;          // --decoder-first-pipeline-num-layers (-1: unset)
  int64_t last_stage_layers = -1;           // --decoder-last-pipeline-num-layers (-1: unset)
};

struct LayerRange {
  int64_t first = 0, count = 0;  // global layer indices [first, first + count)
  bool operator==(const LayerRange&) const = default;
};

struct PipelineLayout {
  int stages = 1, chunks = 1;
  std::vector<std::vector<LayerRange>> ranges;  // [stage][chunk]
  // Global layers [first, first + count) of stage s, chunk c.
  const LayerRange& at(int stage, int chunk = 0) const { return ranges[stage][chunk]; }
};

// Throws claw::Error naming the flags when the layers do not split.
PipelineLayout make_pipeline_layout(const PipelineLayoutConfig& cfg);

}  // namespace claw::parallel
