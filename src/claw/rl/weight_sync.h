// Weight synchronisation from learners to generators.
//
// A weight set travels as one flat fp32 buffer: every parameter of the
// model (ckpt::model_param_specs: canonical names and order, LoRA factors
// included) at its checkpoint shape (no vocabulary padding), one after the
// other. It is resharded by the same box arithmetic as checkpoints: each
// learner rank writes the pieces it owns (ckpt::shard_pieces of the value
// shards it would write to a checkpoint: TP slices, pipeline stages, ZeRO
// ranges, each element by exactly one rank) into a zeroed buffer, and a sum
// over the learner ranks completes it; a generator, whatever its own
// layout, reads each of its parameters out of it by name. Every set carries
// the version of the weights (the learner's optimizer steps).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "claw/core/parallel.h"
#include "claw/model/config.h"
#include "claw/model/gpt.h"
#include "claw/runtime/runtime.h"

namespace claw::rl {

// Where each parameter sits in the flat buffer.
class WeightLayout {
 public:
  explicit WeightLayout(const model::ModelConfig& cfg);
  int64_t total() const { return total_; }
  // Offset of `name` (throws claw::Error when the model has no such parameter).
  int64_t offset(const std::string& name) const;
  // Checkpoint shape of `name`.
  const std::vector<int64_t>& shape(const std::string& name) const;

 private:
  struct Entry {
    std::string name;
    std::vector<int64_t> shape;
    int64_t offset = 0;
  };
  std::vector<Entry> entries_;  // sorted by name
  int64_t total_ = 0;
  const Entry& find(const std::string& name) const;
};

// Collective over the learner ranks (the runtime's world): the full weight
// set of the learner's model, on every learner rank.
void gather_weights(runtime::Runtime& learner, const WeightLayout& layout, std::vector<float>& out);

// Writes a weight set into `model` (a whole model on this rank: no tensor
// or pipeline parallelism), its padding rows zero, and folds its LoRA
// adapters into the weights for generation (serve reads merged weights).
void load_weights(model::GPT& model, const CpuCtx& cpu, const WeightLayout& layout, const float* weights);

}  // namespace claw::rl
