#include "claw/optim/lr_schedule.h"

#include <cmath>

#include "claw/core/error.h"

namespace claw::optim {

DecayStyle parse_decay_style(const std::string& s) {
  if (s == "constant") return DecayStyle::constant;
  if (s == "linear") return DecayStyle::linear;
  if (s == "cosine") return DecayStyle::cosine;
  fail("--lr-decay-style '{}' is not one of: constant, linear, cosine", s);
}

std::string to_string(DecayStyle d) {
  switch (d) {
    case DecayStyle::constant: return "constant";
    case DecayStyle::linear: return "linear";
    case DecayStyle::cosine: return "cosine";
  }
  return "?";
}

double LrSchedule::at(int64_t s) const {
  if (warmup_iters > 0 && s < warmup_iters) return max_lr * static_cast<double>(s + 1) / warmup_iters;
  if (style == DecayStyle::constant) return max_lr;
  if (s >= decay_iters) return min_lr;
  double ratio = static_cast<double>(s - warmup_iters) / static_cast<double>(decay_iters - warmup_iters);
  if (style == DecayStyle::linear) return max_lr - (max_lr - min_lr) * ratio;
  return min_lr + (max_lr - min_lr) * 0.5 * (1.0 + std::cos(M_PI * ratio));
}

void LrSchedule::validate() const {
  if (!(max_lr >= 0)) fail("--lr must be >= 0, got {}", max_lr);
  if (!(min_lr >= 0 && min_lr <= max_lr)) fail("--min-lr must be in [0, --lr={}], got {}", max_lr, min_lr);
  if (warmup_iters < 0) fail("--lr-warmup-iters must be >= 0, got {}", warmup_iters);
  if (style != DecayStyle::constant && decay_iters <= warmup_iters)
    fail("--lr-decay-iters ({}) must exceed --lr-warmup-iters ({})", decay_iters, warmup_iters);
}

}  // namespace claw::optim
