// Normalisation layer: LayerNorm (weight + bias) or RMSNorm (weight only),
// chosen by ModelConfig::normalization; with --apply-layernorm-1p the scale is
// 1 + weight (Gemma), the weight starting at 0. Runs on the rows of the residual
// stream this rank holds (all N, or N/TP under sequence parallelism; its
// weights are then replicated but see only part of the tokens, so their
// gradients are summed over the tensor-parallel group, Megatron's
// sequence-parallel LayerNorm gradient all-reduce).
#pragma once

#include <string>
#include <vector>

#include "claw/core/arena.h"
#include "claw/model/config.h"
#include "claw/model/param.h"
#include "claw/model/scratch.h"
#include "claw/model/step.h"
#include "claw/model/tensor_parallel.h"

namespace claw::model {

class NormLayer {
 public:
  struct Saved {
    float* out = nullptr;   // [R, C]  (R = rows held)
    float* mean = nullptr;  // [R] (LayerNorm only)
    float* rstd = nullptr;  // [R]
    void layout(ArenaLayout& L, const std::string& prefix, const ModelConfig& cfg, int64_t rows);
  };

  NormLayer(const std::string& name, const ModelConfig& cfg, HfRef weight_hf, HfRef bias_hf,
            const TensorParallel& tp);

  void forward(const StepCtx& ctx, const float* x, Saved& s) const;
  // dx (+)= d norm(x) / dx applied to dy; `accumulate` adds onto dx (the
  // residual stream's gradient). Under sequence parallelism the weight
  // gradients pass through scratch.dnorm_w and one all-reduce.
  void backward(const StepCtx& ctx, const Saved& s, const float* x, const float* dy, float* dx, bool accumulate,
                Scratch& scratch);

  void collect(std::vector<Param*>& out);

  Param weight, bias;

 private:
  const TensorParallel& tp_;
  Norm kind_;
  int64_t C_;
  double eps_;
  bool one_plus_;                       // --apply-layernorm-1p: the kernels see 1 + weight
  mutable std::vector<float> scale_;    // that 1 + weight
};

// The weights a norm's kernels multiply by: w itself, or (--apply-layernorm-1p)
// 1 + w in `buffer`.
const float* scale_weight(const CpuCtx& cpu, const Param& w, bool one_plus, std::vector<float>& buffer);

}  // namespace claw::model
