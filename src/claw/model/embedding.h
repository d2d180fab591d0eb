// Input embedding: word embeddings [Vp, C] plus, for learned positions,
// position embeddings [P, C]; hidden dropout on the sum (Megatron's
// embedding dropout).
#pragma once

#include <string>
#include <vector>

#include "claw/model/config.h"
#include "claw/model/hf_names.h"
#include "claw/model/param.h"
#include "claw/model/step.h"

namespace claw::model {

class Embedding {
 public:
  Embedding(const ModelConfig& cfg, const HfNames& hf);

  // out [N, C] from tokens [B, T].
  void forward(const StepCtx& ctx, const int32_t* tokens, float* out) const;
  // dout is consumed (dropout's backward is applied in place).
  void backward(const StepCtx& ctx, const int32_t* tokens, float* dout);

  void collect(std::vector<Param*>& out);

  Param word;
  Param position;  // learned positions only

 private:
  int64_t C_;
  bool learned_pos_;
  double dropout_;
};

}  // namespace claw::model
