// Loss scaling for FP16 training (Megatron's --fp16 flags): the loss's
// gradient seed is multiplied by the scale S so that small gradients
// survive f16's range; the optimizer divides it out again (folded into the
// clip coefficient) and the reported gradient norm is the unscaled one.
//
// Dynamic (--loss-scale 0, the default): a step whose gradients hold an inf
// or NaN is skipped; after `hysteresis` such steps (counted since the last
// growth) the scale is halved, down to --min-loss-scale; after
// --loss-scale-window steps without one it doubles. Static: S fixed, an
// overflowing step is still skipped.
#pragma once

#include <cstdint>

#include <nlohmann/json.hpp>

namespace claw::optim {

struct LossScaleConfig {
  double loss_scale = 0;                      // --loss-scale: static scale (0: dynamic)
  double initial_loss_scale = 4294967296.0;   // --initial-loss-scale (2^32)
  double min_loss_scale = 1.0;                // --min-loss-scale
  int64_t loss_scale_window = 1000;           // --loss-scale-window: steps without overflow before doubling
  int64_t hysteresis = 2;                     // --hysteresis: overflows tolerated before halving
  // Throws claw::Error naming the flag.
  void validate() const;
};

class LossScaler {
 public:
  explicit LossScaler(const LossScaleConfig& cfg);
  double scale() const { return scale_; }
  // After a step's gradients, found_inf: whether they hold an inf or NaN.
  // Returns whether the step may update the parameters; moves the scale.
  bool update(bool found_inf);
  int64_t skipped() const { return skipped_; }
  // Checkpoint state (scale and trackers), and back.
  nlohmann::json state() const;
  void load(const nlohmann::json& j);

 private:
  LossScaleConfig cfg_;
  double scale_;
  int64_t growth_tracker_ = 0, hysteresis_tracker_;
  int64_t skipped_ = 0;
};

}  // namespace claw::optim
