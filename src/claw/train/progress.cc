#include "claw/train/progress.h"

#include <cmath>

#include <fmt/format.h>

namespace claw::train {

std::string format_duration(double seconds) {
  if (!(seconds >= 0) || !std::isfinite(seconds)) return "?";
  auto s = static_cast<int64_t>(std::llround(seconds));
  int64_t h = s / 3600, m = s / 60 % 60, sec = s % 60;
  return h > 0 ? fmt::format("{}:{:02}:{:02}", h, m, sec) : fmt::format("{}:{:02}", m, sec);
}

std::string format_progress(const StepReport& r) {
  double remaining = r.step > 0 ? r.elapsed_seconds / r.step * (r.total_steps - r.step) : 0;
  int width = static_cast<int>(std::to_string(r.total_steps).size());
  return fmt::format("step {:>{}}/{} | loss {:.4f} | lr {:.3e} | grad norm {:.3f} | {:.0f} ms/step | {:.0f} tok/s | "
                     "MFU {:.1f}% | ETA {}",
                     r.step, width, r.total_steps, r.loss, r.lr, r.grad_norm, r.step_seconds * 1e3, r.tokens_per_s,
                     r.mfu * 100, format_duration(remaining));
}

}  // namespace claw::train
