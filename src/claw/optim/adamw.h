// AdamW over a ParamStore: first and second moments live in two flat buffers
// at the parameters' offsets; weight decay is applied per parameter from its
// ParamSpec (matrices decay; biases and norm weights do not). Gradient
// clipping by global norm is folded into the update as a gradient scale, so
// the gradients are read once.
//
// AdamW works on segments: contiguous runs of one parameter's values and
// gradients. A single rank has one segment per parameter; a ZeRO rank has
// the pieces of parameters that fall in its shard of the flat buffers (range
// arithmetic in parallel/data_parallel.h), so the state it holds is its
// shard's. The global norm is sqrt(sum of sum_squares(grad)) over every
// rank's segments: the local sum here, one all-reduce by the caller.
// Frozen parameters are never segments, so they have no state here.
// Defaults are Megatron's.
//
// The optimizer names its state (state_names(): one tensor per name and
// segment); checkpoints store it as "optim.<state name>.<parameter>", in
// the moment's dtype (a load converts from whatever the checkpoint holds).
//
// Precision-aware (Megatron's --use-precision-aware-optimizer): the moments
// may be stored in bf16 or fp16 (--exp-avg-dtype, --exp-avg-sq-dtype), the
// arithmetic staying fp32 (kernels/cpu/adamw.h); ZeRO shards them alike.
//
// Or in FP8 (fp8): exp_avg in E4M3, exp_avg_sq in E5M2 (the squares span
// twice the exponent range of the gradients), one byte per element plus a
// power-of-two fp32 scale per block of kFp8Block elements of the rank's
// state (the segments laid end to end, each 16-aligned; a block may hold
// the ends of two segments): 1.03 bytes per element. A step widens a block into fp32, updates it as
// the fp32 moments would be, takes the block's new amax and rounds the
// block to nearest even under the scale 2^floor(log2(max / amax)). A
// non-zero exp_avg_sq never rounds to zero (it would turn the update into
// exp_avg / eps): it keeps the smallest subnormal instead. Checkpoints see
// an FP8 moment as bf16, which holds every scaled E4M3/E5M2 value exactly:
// a save widens the blocks into a bf16 view and the next step rounds the
// view back (exactly, or after a load, from whatever was loaded), so a
// resumed run continues bitwise and the moments load into any layout.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "claw/core/arena.h"
#include "claw/core/parallel.h"
#include "claw/model/param.h"

namespace claw::optim {

struct AdamWConfig {
  double beta1 = 0.9;         // --adam-beta1
  double beta2 = 0.999;       // --adam-beta2
  double eps = 1e-8;          // --adam-eps
  double weight_decay = 0.01; // --weight-decay
  double clip_grad = 1.0;     // --clip-grad (global norm; 0 disables)
  bool precision_aware = false;      // --use-precision-aware-optimizer
  DType exp_avg_dtype = DType::f32;     // --exp-avg-dtype: f32, bf16 or f16
  DType exp_avg_sq_dtype = DType::f32;  // --exp-avg-sq-dtype: f32 or bf16 (f16 would flush small g^2 to zero)
  // --main-params-dtype: the master weights the update reads and writes, f32
  // or f16 (stored in the parameter store; model/param.h StoreDtypes).
  DType main_params_dtype = DType::f32;
  void validate() const;
};

// Megatron's names of the optimizer's dtypes ("fp32", "bf16", "fp16", "fp8")
// to DType; `flag` names the flag in errors.
DType parse_optimizer_dtype(const std::string& flag, const std::string& name);
std::string optimizer_dtype_name(DType t);

using model::Segment;

class AdamW {
 public:
  // The moments live in `memory` (the GPU's, under --device cuda).
  AdamW(std::vector<Segment> segments, AdamWConfig cfg, const MemoryResource& memory = host_memory());
  AdamW(model::ParamStore& store, AdamWConfig cfg) : AdamW(store.full_segments(), cfg) {}

  // Sum of squares of the gradients of this rank's segments, in double;
  // segments of non-primary copies (ParamSpec::primary: replicated over
  // tensor parallelism, counted on one rank) are left out. `group`: only the
  // parameters of that reduction group ("dp", "expert_dp"); empty: all.
  double grad_sum_squares(const CpuCtx& ctx, std::string_view group = {}) const;
  // Clip coefficient for a global norm: min(1, clip / (norm + 1e-6)), as torch.nn.utils.clip_grad_norm_.
  double clip_coefficient(double grad_norm) const;
  // One update with learning rate lr; grads are multiplied by grad_scale first.
  void step(const CpuCtx& ctx, double lr, double grad_scale);

  int64_t steps_taken() const { return step_; }
  // Resuming from a checkpoint: the bias corrections continue from `steps`.
  void set_steps_taken(int64_t steps) { step_ = steps; }
  const std::vector<Segment>& segments() const { return segments_; }
  // The per-element state it keeps, by name: {"exp_avg", "exp_avg_sq"}.
  static const std::vector<std::string>& state_names();
  // State `s` (an index into state_names()) of segment i: segments()[i].n
  // elements of state_dtype(s) (FP8: the codes, without their scales).
  void* state(size_t s, size_t i) const {
    return (s == 0 ? m_ : v_).base() + state_offsets_[i] * static_cast<int64_t>(dtype_size(state_dtype(s)));
  }
  DType state_dtype(size_t s) const { return s == 0 ? cfg_.exp_avg_dtype : cfg_.exp_avg_sq_dtype; }
  // What a checkpoint reads and writes: state(s, i) in state_dtype(s), or
  // for an FP8 moment its bf16 view (open_checkpoint_view first).
  void* checkpoint_state(size_t s, size_t i) const;
  DType checkpoint_dtype(size_t s) const { return is_fp8(state_dtype(s)) ? DType::bf16 : state_dtype(s); }
  // Widens the FP8 moments into their bf16 view, unless it is open already
  // (then the view holds the state: a load wrote it). The next step() rounds
  // the view back into FP8 and drops it. No-op without FP8 moments.
  void open_checkpoint_view() const;
  size_t state_bytes() const { return m_.size() + v_.size() + scales_[0].size() + scales_[1].size(); }
  // The two moments' arenas (FP8: the codes).
  const Arena& exp_avg_arena() const { return m_; }
  const Arena& exp_avg_sq_arena() const { return v_; }
  static constexpr int64_t kFp8Block = 128;
  // Bytes of state per element of a segment, without FP8 block scales; and
  // how many moments are FP8 (each adds a 4-byte scale per kFp8Block
  // elements of the state, fp8_blocks(elements)).
  static size_t bytes_per_element(const AdamWConfig& cfg) {
    return dtype_size(cfg.exp_avg_dtype) + dtype_size(cfg.exp_avg_sq_dtype);
  }
  static int fp8_moments(const AdamWConfig& cfg) { return is_fp8(cfg.exp_avg_dtype) + is_fp8(cfg.exp_avg_sq_dtype); }
  static bool is_fp8(DType t) { return t == DType::e4m3 || t == DType::e5m2; }
  static int64_t fp8_blocks(int64_t elements) { return (elements + kFp8Block - 1) / kFp8Block; }

 private:
  void close_checkpoint_view(const CpuCtx& ctx);
  std::vector<Segment> segments_;
  std::vector<int64_t> state_offsets_;  // floats, parallel to segments_
  AdamWConfig cfg_;
  Arena m_, v_;
  std::array<Arena, 2> scales_;  // FP8 moments' block scales (empty otherwise)
  mutable std::array<std::vector<uint16_t>, 2> view_;  // FP8 moments as bf16 for a checkpoint
  mutable bool view_open_ = false;
  int64_t step_ = 0;
};

}  // namespace claw::optim
