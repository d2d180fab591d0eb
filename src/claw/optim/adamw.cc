#include "claw/optim/adamw.h"

#include <algorithm>

#include "claw/core/error.h"
#include "claw/kernels/cpu/adamw.h"
#include "claw/kernels/cpu/reduce.h"

namespace claw::optim {

void AdamWConfig::validate() const {
  if (!(beta1 >= 0 && beta1 < 1)) fail("--adam-beta1 must be in [0, 1), got {}", beta1);
  if (!(beta2 >= 0 && beta2 < 1)) fail("--adam-beta2 must be in [0, 1), got {}", beta2);
  if (!(eps > 0)) fail("--adam-eps must be positive, got {}", eps);
  if (!(weight_decay >= 0)) fail("--weight-decay must be >= 0, got {}", weight_decay);
  if (!(clip_grad >= 0)) fail("--clip-grad must be >= 0 (0 disables clipping), got {}", clip_grad);
}

namespace {
// State offsets: each segment's moments start 64-byte aligned.
std::vector<int64_t> state_layout(const std::vector<Segment>& segs, int64_t* total) {
  std::vector<int64_t> off;
  int64_t end = 0;
  for (const Segment& s : segs) {
    off.push_back(end);
    end += (s.n + 15) / 16 * 16;
  }
  *total = end;
  return off;
}
int64_t state_floats(const std::vector<Segment>& segs) {
  int64_t total = 0;
  state_layout(segs, &total);
  return total;
}
}  // namespace

AdamW::AdamW(std::vector<Segment> segments, AdamWConfig cfg, const MemoryResource& memory)
    : segments_(std::move(segments)),
      cfg_(cfg),
      m_("adam.exp_avg", static_cast<size_t>(state_floats(segments_)) * sizeof(float), memory),
      v_("adam.exp_avg_sq", static_cast<size_t>(state_floats(segments_)) * sizeof(float), memory) {
  cfg_.validate();
  int64_t total = 0;
  state_offsets_ = state_layout(segments_, &total);
}

const std::vector<std::string>& AdamW::state_names() {
  static const std::vector<std::string> names = {"exp_avg", "exp_avg_sq"};
  return names;
}

double AdamW::grad_sum_squares(const CpuCtx& ctx, std::string_view group) const {
  double s = 0;
  for (const Segment& seg : segments_)
    if (seg.param->spec.primary && (group.empty() || seg.param->spec.reduction_group == group))
      s += kernels::sum_squares(ctx, seg.grad, seg.n);
  return s;
}

double AdamW::clip_coefficient(double grad_norm) const {
  if (cfg_.clip_grad <= 0) return 1.0;
  return std::min(1.0, cfg_.clip_grad / (grad_norm + 1e-6));
}

void AdamW::step(const CpuCtx& ctx, double lr, double grad_scale) {
  ++step_;
  for (size_t i = 0; i < segments_.size(); ++i) {
    const Segment& seg = segments_[i];
    kernels::AdamWHyper h{.lr = lr,
                          .beta1 = cfg_.beta1,
                          .beta2 = cfg_.beta2,
                          .eps = cfg_.eps,
                          .weight_decay = seg.param->spec.weight_decay ? cfg_.weight_decay : 0.0,
                          .grad_scale = grad_scale,
                          .step = step_};
    const int64_t off = state_offsets_[i];
    kernels::adamw_update(ctx, seg.value, exp_avg() + off, exp_avg_sq() + off, seg.grad, seg.n, h);
  }
}

}  // namespace claw::optim
