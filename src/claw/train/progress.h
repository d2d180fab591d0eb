// Human-readable progress: one line per logged step with the loss, learning
// rate, gradient norm, speed, MFU and an ETA from the average step time.
#pragma once

#include <cstdint>
#include <string>

namespace claw::train {

struct StepReport {
  int64_t step = 0, total_steps = 0;
  double loss = 0, lr = 0, grad_norm = 0;
  double step_seconds = 0, tokens_per_s = 0, mfu = 0;
  double elapsed_seconds = 0;  // since the first step started
};

std::string format_progress(const StepReport& r);
// "1:02:03" / "4:05" style duration.
std::string format_duration(double seconds);

}  // namespace claw::train
