// Learning-rate schedule: linear warmup, then constant, linear or cosine
// decay to a floor (Megatron's --lr-decay-style with --lr-warmup-iters,
// --lr-decay-iters, --min-lr).
//
//   step s (0-based) < W:   lr = max_lr * (s + 1) / W
//   W <= s < D:             ratio = (s - W) / (D - W)
//                           cosine: lr = min_lr + (max_lr - min_lr) * 0.5 (1 + cos(pi ratio))
//                           linear: lr = max_lr - (max_lr - min_lr) * ratio
//   s >= D:                 lr = min_lr
// Warmup uses s + 1 so that the first update is not wasted on lr = 0.
#pragma once

#include <cstdint>
#include <string>

namespace claw::optim {

enum class DecayStyle { constant, linear, cosine };
DecayStyle parse_decay_style(const std::string& s);  // throws naming --lr-decay-style
std::string to_string(DecayStyle d);

struct LrSchedule {
  double max_lr = 3e-4;            // --lr
  double min_lr = 0.0;             // --min-lr
  int64_t warmup_iters = 0;        // --lr-warmup-iters
  int64_t decay_iters = 0;         // --lr-decay-iters (0: the number of training iterations)
  DecayStyle style = DecayStyle::cosine;  // --lr-decay-style

  double at(int64_t step) const;
  void validate() const;
};

}  // namespace claw::optim
