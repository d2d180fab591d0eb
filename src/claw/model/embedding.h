// Input embedding: word embeddings [Vp, C] plus, for learned positions,
// position embeddings [P, C]; hidden dropout on the sum (Megatron's
// embedding dropout).
//
// Tensor parallelism: the word embeddings are vocabulary-parallel (each rank
// holds Vp/TP rows, model/vocab_parallel.h): a lookup, then an all-reduce, or
// under sequence parallelism a reduce-scatter to this rank's rows; position
// embeddings (replicated) are added after the reduction. Their gradient is
// whole on every rank: under SP it is taken from the all-gathered output
// gradient that the vocabulary-parallel backward needs anyway.
#pragma once

#include <string>
#include <vector>

#include "claw/model/config.h"
#include "claw/model/hf_names.h"
#include "claw/model/param.h"
#include "claw/model/scratch.h"
#include "claw/model/step.h"
#include "claw/model/tensor_parallel.h"
#include "claw/model/vocab_parallel.h"

namespace claw::model {

class Embedding {
 public:
  Embedding(const ModelConfig& cfg, const HfNames& hf, const TensorParallel& tp);

  // out [R, C] (the rows held) from tokens [B, T].
  void forward(const StepCtx& ctx, const int32_t* tokens, float* out, Scratch& scratch) const;
  // dout [R, C] is consumed (dropout's backward is applied in place).
  // Frozen word and position embeddings: nothing to do.
  void backward(const StepCtx& ctx, const int32_t* tokens, float* dout, Scratch& scratch);

  void collect(std::vector<Param*>& out);
  const VocabShard& vocab() const { return vocab_; }

  Param word;
  Param position;  // learned positions only

 private:
  const TensorParallel& tp_;
  VocabShard vocab_;
  int64_t C_;
  bool learned_pos_;
  double dropout_;
  float scale_;  // --scale-embedding: sqrt(hidden), else 1
  void scale_rows(const StepCtx& ctx, float* x, int64_t n) const;
};

}  // namespace claw::model
