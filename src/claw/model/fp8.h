// FP8 linear layers by exact emulation (ModelConfig::fp8, Megatron's
// --fp8-* flags). Each GEMM operand of an FP8 linear layer is quantised bit
// for bit to its format and scales (core/block_formats.h); the GEMM then
// multiplies the quantised values with fp32 accumulation, as FP8 tensor
// cores do, and the per-tensor scales come out as the GEMM's alpha:
//
//   forward       y  = (Qx . Qw^T) / (sx sw) + b       x, W in E4M3
//   input grad    dx = (Qdy . Qw) / (sdy sw)           dy in E5M2 (hybrid) or E4M3
//   weight grad   dW = (Qdy^T . Qx) / (sdy sx)         db from the unquantised dy
//
// An operand quantises along the dimension its GEMM contracts over (which
// matters to block recipes only). Recipes:
//   delayed     one scale per tensor from the amax history of earlier steps:
//               s = max / amax_h / 2^margin (amax_h the history's max or its
//               most recent entry); this step's amaxes enter the history at
//               its end. Within a step the scales are fixed and the step's
//               amax is the maximum over its micro-batches and over every
//               rank holding a part of the tensor (tp, cp and dp replicas),
//               so every layout quantises alike and equals one rank.
//   tensorwise  the current tensor's amax (reduced over the ranks holding
//               parts of it): s = max / amax.
//   mxfp8       blocks of 32 along the contraction with an E8M0 scale each
//               (the rceil rule: no element saturates); no per-tensor scale.
//   blockwise   DeepSeek-V3's: 1 x 128 tiles along the contraction for
//               activations and gradients, 128 x 128 blocks for weights,
//               power-of-two scales 2^floor(log2(max / amax)).
//   nvfp4       E2M1 elements in blocks of 16 along the contraction (16 x 16
//               tiles for weights, so W and W^T quantise alike) with E4M3
//               block scales and one fp32 scale per tensor (its amax over
//               the ranks holding parts of it); gradients round
//               stochastically (Philox keyed by the run seed and the layer);
//               the weight gradient's operands, contracted over tokens, go
//               through a random Hadamard transform of 16 tokens first.
// Block recipes need the blocks along a TP-split dimension not to straddle
// ranks (Linear::enable_fp8 refuses such shapes).
// The first step of delayed scaling uses s = 1 (no history yet), as
// Transformer Engine does. An amax that is NaN or inf when it enters the
// history stops the run naming the layer and the tensor.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "claw/comm/group.h"
#include "claw/core/block_formats.h"
#include "claw/core/parallel.h"
#include "claw/core/philox.h"
#include "claw/model/config.h"

namespace claw::model {

enum class Fp8Role : uint8_t { input = 0, weight = 1, grad_output = 2 };
const char* fp8_role_name(Fp8Role r);

class Fp8Linear {
 public:
  // layer: the weight's name (for errors); block: its transformer block.
  Fp8Linear(const Fp8Config& cfg, std::string layer, int64_t block = -1);

  // A GEMM operand: values exactly representable in fp32, and the factor
  // (1 / its scale) that the product is multiplied by.
  struct Operand {
    const float* data;
    float alpha;
  };
  // a [rows, cols] row-major, quantised into buf. along_rows: the GEMM
  // contracts over rows (blocks run down the columns), else over cols.
  // group: the other ranks holding parts of this tensor (tensorwise amax;
  // null: none). record: a training pass (delayed scaling adds the tensor's
  // amax to this step's).
  Operand quantize(const CpuCtx& cpu, Fp8Role role, const float* a, int64_t rows, int64_t cols, bool along_rows,
                   std::vector<float>& buf, comm::Group* group, bool record);

  // Delayed scaling, once per step: this step's amaxes (input, weight,
  // gradient), which the caller reduces (max) over the ranks holding the
  // layer, then update() pushes them into the history and sets the next
  // step's scales. Throws NonFiniteError naming the layer on a NaN/inf amax.
  bool delayed() const { return recipe_ == Recipe::delayed; }
  std::array<float, 3>& step_amax() { return amax_; }
  void update();
  float scale(Fp8Role r) const { return scale_[static_cast<int>(r)]; }
  // What a resumed run needs to quantise as the uninterrupted one would, as
  // doubles: the three scales, the history position, NVFP4's stochastic
  // rounding counter, then the three amax histories.
  std::vector<double> scaling_state() const;
  void load_scaling_state(const std::vector<double>& s);  // s.size() == scaling_state_size(history length)
  static int64_t scaling_state_size(int64_t history_len) { return 5 + 3 * history_len; }

  // Calibration (--fp8-layer-selection auto, train/trainer.cc): passes
  // that measure what FP8 in one block does to the model's gradients. A
  // calibrating layer quantises as a training pass does, except that
  // delayed scaling uses the current amax (there is no history yet) and
  // nothing enters the amax history.
  bool calibrating() const { return calibrating_; }
  void set_calibrating(bool on) { calibrating_ = on; }
  // Whether the GEMMs run in FP8 (auto selection turns a layer off).
  bool active() const { return active_; }
  void set_active(bool on) { active_ = on; }
  ElemFormat format(Fp8Role r) const { return r == Fp8Role::grad_output ? bwd_ : fwd_; }
  const std::string& layer() const { return layer_; }
  int64_t block() const { return block_; }

 private:
  enum class Recipe : uint8_t { delayed, tensorwise, mxfp8, blockwise, nvfp4 };
  std::string layer_;
  int64_t block_;
  Recipe recipe_;
  ElemFormat fwd_ = ElemFormat::e4m3, bwd_ = ElemFormat::e4m3;
  bool amax_max_ = false;
  int margin_ = 0;
  std::array<std::vector<float>, 3> history_;
  int64_t history_pos_ = 0;
  std::array<float, 3> amax_{0, 0, 0};
  std::array<float, 3> scale_{1, 1, 1};
  bool calibrating_ = false, active_ = true;
  RandomStream sr_{0, 0};     // NVFP4's stochastic rounding of gradients
  uint64_t sr_counter_ = 0;   // uniforms drawn so far
  std::vector<float> rht_;    // NVFP4's Hadamard-transformed operand
};

}  // namespace claw::model
