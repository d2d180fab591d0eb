// Normalisation layer: LayerNorm (weight + bias) or RMSNorm (weight only),
// chosen by ModelConfig::normalization.
#pragma once

#include <string>
#include <vector>

#include "claw/core/arena.h"
#include "claw/model/config.h"
#include "claw/model/param.h"
#include "claw/model/step.h"

namespace claw::model {

class NormLayer {
 public:
  struct Saved {
    float* out = nullptr;   // [N, C]
    float* mean = nullptr;  // [N] (LayerNorm only)
    float* rstd = nullptr;  // [N]
    void layout(ArenaLayout& L, const std::string& prefix, const ModelConfig& cfg, int64_t N);
  };

  NormLayer(const std::string& name, const ModelConfig& cfg, HfRef weight_hf, HfRef bias_hf);

  void forward(const StepCtx& ctx, const float* x, Saved& s) const;
  // dx (+)= d norm(x) / dx applied to dy; `accumulate` adds onto dx (the
  // residual stream's gradient).
  void backward(const StepCtx& ctx, const Saved& s, const float* x, const float* dy, float* dx, bool accumulate);

  void collect(std::vector<Param*>& out);

  Param weight, bias;

 private:
  Norm kind_;
  int64_t C_;
  double eps_;
};

}  // namespace claw::model
