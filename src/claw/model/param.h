// Parameters and their global identity (DESIGN.md principle 3).
//
// A ParamSpec says what a parameter *is* independently of how it is stored:
// canonical name, global shape, dtype, whether weight decay applies, how it
// is initialised, how this rank holds it, and where it lives in a Hugging
// Face checkpoint. ZeRO ranges, weight decay, checkpoints, HF import/export
// and the planner's memory accounting all read it; nothing is addressed by
// position (STYLE.md #8).
//
// ParamStore lays all parameters of a model out in one flat, 64-byte aligned
// value buffer, with gradients at the same offsets in a second buffer (the
// llm.c single buffer, generalised): the optimizer, gradient norm and future
// bucketed all-reduce work on ranges of these flat buffers.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "claw/core/arena.h"
#include "claw/core/dtype.h"
#include "claw/core/parallel.h"
#include "claw/core/tensor.h"

namespace claw::model {

// Where a parameter (or its part) sits in a Hugging Face state dict.
// Our tensor (after the optional transpose) equals hf[name] restricted to
// [begin, end) along `slice_dim` of the HF tensor (-1: the whole tensor).
// `rows` < 0: all our rows map; otherwise only our first `rows` rows do (the
// rest is vocabulary padding that HF does not have).
struct HfRef {
  std::string name;      // empty: no HF counterpart
  bool transpose = false;  // GPT-2's Conv1D stores [in, out]
  int slice_dim = -1;
  int64_t begin = 0, end = 0;
  int64_t rows = -1;
};

enum class Init { normal, zeros, ones };

struct ParamSpec {
  std::string name;        // canonical claw name, e.g. "layers.3.attention.q_proj.weight"
  Shape shape;             // global shape
  DType dtype = DType::f32;
  bool weight_decay = true;  // Megatron/llm.c rule: matrices decay, biases and norm weights do not
  Init init = Init::normal;
  double init_std = 0.02;
  int64_t init_rows = -1;  // >= 0: rows beyond this are zero (vocabulary padding)
  HfRef hf;
  // How this rank holds it. Every parameter is replicated until tensor/expert
  // parallelism shard them (then: dim, offset and size of the local slice).
  int shard_dim = -1;
};

struct Param {
  ParamSpec spec;
  Tensor value;  // bound by ParamStore
  Tensor grad;
  float* data() const { return value.data<float>(); }
  float* gdata() const { return grad.data<float>(); }
};

class ParamStore {
 public:
  // Plans offsets for `params` (in the given order) and allocates the value
  // and gradient buffers; binds each Param's tensors.
  explicit ParamStore(std::vector<Param*> params);

  // The layout as a pure function of the specs (for the memory plan).
  static ArenaPlan plan(const std::vector<const ParamSpec*>& specs, const std::string& name);

  const std::vector<Param*>& params() const { return params_; }
  // Offsets into the flat buffers, parallel to params().
  const std::vector<size_t>& offsets() const { return offsets_; }
  float* values() const { return values_.ptr<float>(0); }
  float* grads() const { return grads_.ptr<float>(0); }
  size_t bytes() const { return values_.size(); }  // per buffer
  int64_t numel() const;                           // parameters, excluding alignment padding

  void zero_grads();
  // Philox init keyed by (seed, hash(name)) at the global element index, so
  // every layout initialises a parameter identically.
  void init(const CpuCtx& ctx, uint64_t seed);
  Param* find(const std::string& name) const;

 private:
  std::vector<Param*> params_;
  std::vector<size_t> offsets_;
  Arena values_, grads_;
};

}  // namespace claw::model
