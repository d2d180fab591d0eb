#include "claw/optim/loss_scaler.h"

#include <algorithm>
#include <cmath>

#include "claw/core/error.h"

namespace claw::optim {

void LossScaleConfig::validate() const {
  if (!(loss_scale >= 0) || !std::isfinite(loss_scale)) fail("--loss-scale must be >= 0 (0: dynamic), got {}", loss_scale);
  if (!(initial_loss_scale > 0) || !std::isfinite(initial_loss_scale))
    fail("--initial-loss-scale must be positive and finite, got {}", initial_loss_scale);
  if (!(min_loss_scale > 0) || min_loss_scale > initial_loss_scale)
    fail("--min-loss-scale must be in (0, --initial-loss-scale {}], got {}", initial_loss_scale, min_loss_scale);
  if (loss_scale_window < 1) fail("--loss-scale-window must be >= 1, got {}", loss_scale_window);
  if (hysteresis < 1) fail("--hysteresis must be >= 1, got {}", hysteresis);
}

LossScaler::LossScaler(const LossScaleConfig& cfg)
    : cfg_(cfg), scale_(cfg.loss_scale > 0 ? cfg.loss_scale : cfg.initial_loss_scale),
      hysteresis_tracker_(cfg.hysteresis) {
  cfg_.validate();
}

bool LossScaler::update(bool found_inf) {
  if (found_inf) ++skipped_;
  if (cfg_.loss_scale > 0) return !found_inf;
  if (found_inf) {
    growth_tracker_ = 0;
    if (--hysteresis_tracker_ <= 0) scale_ = std::max(scale_ * 0.5, cfg_.min_loss_scale);
    return false;
  }
  if (++growth_tracker_ == cfg_.loss_scale_window) {
    growth_tracker_ = 0;
    hysteresis_tracker_ = cfg_.hysteresis;
    scale_ *= 2.0;
  }
  return true;
}

nlohmann::json LossScaler::state() const {
  return {{"scale", scale_}, {"growth_tracker", growth_tracker_}, {"hysteresis_tracker", hysteresis_tracker_},
          {"skipped", skipped_}};
}

void LossScaler::load(const nlohmann::json& j) {
  if (!j.is_object() || !j.contains("scale") || !j["scale"].is_number())
    fail("checkpoint state.loss_scaler must be an object with a numeric 'scale'");
  scale_ = j["scale"].get<double>();
  growth_tracker_ = j.value("growth_tracker", int64_t{0});
  hysteresis_tracker_ = j.value("hysteresis_tracker", cfg_.hysteresis);
  skipped_ = j.value("skipped", int64_t{0});
}

}  // namespace claw::optim
