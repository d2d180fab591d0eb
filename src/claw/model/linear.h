// Linear layer y = x W^T + b (W: [out, in], PyTorch/HF Llama convention).
// Tensor parallelism will make this column- or row-parallel; with every
// group of size 1 it is the plain layer.
//
// Saved: the layer's input, held by the caller (it is some other layer's
// output already in the activation arena).
#pragma once

#include <string>
#include <vector>

#include "claw/model/param.h"
#include "claw/model/step.h"

namespace claw::model {

class Linear {
 public:
  // init_std: N(0, init_std) weights; biases start at zero and do not decay.
  Linear(const std::string& name, int64_t in, int64_t out, bool bias, double init_std, HfRef weight_hf,
         HfRef bias_hf);

  // x [N, in] -> y [N, out], N = ctx.tokens().
  void forward(const StepCtx& ctx, const float* x, float* y) const;
  // dx [N, in] = dy W (overwrites, or accumulates when several branches share x).
  void backward_input(const StepCtx& ctx, const float* dy, float* dx, bool accumulate) const;
  // dW += dy^T x, db += colsum(dy). Separate so a schedule may defer it.
  void backward_weight(const StepCtx& ctx, const float* dy, const float* x);

  void collect(std::vector<Param*>& out);
  int64_t in() const { return in_; }
  int64_t out() const { return out_; }

  Param weight;
  Param bias;  // value undefined when the layer has no bias

 private:
  int64_t in_, out_;
  bool has_bias_;
};

}  // namespace claw::model
