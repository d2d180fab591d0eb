#include "claw/optim/adamw.h"

#include <algorithm>

#include "claw/core/error.h"
#include "claw/core/storage.h"
#include "claw/kernels/cpu/adamw.h"
#include "claw/kernels/cpu/reduce.h"

namespace claw::optim {

void AdamWConfig::validate() const {
  if (!(beta1 >= 0 && beta1 < 1)) fail("--adam-beta1 must be in [0, 1), got {}", beta1);
  if (!(beta2 >= 0 && beta2 < 1)) fail("--adam-beta2 must be in [0, 1), got {}", beta2);
  if (!(eps > 0)) fail("--adam-eps must be positive, got {}", eps);
  if (!(weight_decay >= 0)) fail("--weight-decay must be >= 0, got {}", weight_decay);
  if (!(clip_grad >= 0)) fail("--clip-grad must be >= 0 (0 disables clipping), got {}", clip_grad);
  for (auto [flag, t] : {std::pair{"--exp-avg-dtype", exp_avg_dtype}, std::pair{"--exp-avg-sq-dtype", exp_avg_sq_dtype}}) {
    if (t != DType::f32 && t != DType::bf16 && t != DType::f16)
      fail("{} {}: the moments are stored in fp32, bf16 or fp16", flag, optimizer_dtype_name(t));
    if (t == DType::f16 && flag == std::string_view("--exp-avg-sq-dtype"))
      fail("--exp-avg-sq-dtype fp16: squared gradients below fp16's 6e-8 flush to zero and the update then divides "
           "by eps alone (per-tensor scaled fp16 moments are not implemented); use bf16 or fp32");
    if (t != DType::f32 && !precision_aware)
      fail("{} {} needs --use-precision-aware-optimizer (as in Megatron)", flag, optimizer_dtype_name(t));
  }
  if (main_params_dtype != DType::f32 && main_params_dtype != DType::f16)
    fail("--main-params-dtype {}: the master weights are stored in fp32 or fp16", optimizer_dtype_name(main_params_dtype));
  if (main_params_dtype != DType::f32 && !precision_aware)
    fail("--main-params-dtype {} needs --use-precision-aware-optimizer (as in Megatron)",
         optimizer_dtype_name(main_params_dtype));
}

DType parse_optimizer_dtype(const std::string& flag, const std::string& name) {
  if (name == "fp32") return DType::f32;
  if (name == "bf16") return DType::bf16;
  if (name == "fp16") return DType::f16;
  if (name == "fp8")
    fail("--{} fp8: FP8 optimizer state (scaled E4M3 moments) is not implemented; use fp32, bf16 or fp16", flag);
  fail("--{} {}: expected fp32, bf16 or fp16", flag, name);
}

std::string optimizer_dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "fp32";
    case DType::bf16: return "bf16";
    case DType::f16: return "fp16";
    default: return std::string(dtype_name(t));
  }
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
      m_("adam.exp_avg", static_cast<size_t>(state_floats(segments_)) * dtype_size(cfg.exp_avg_dtype), memory),
      v_("adam.exp_avg_sq", static_cast<size_t>(state_floats(segments_)) * dtype_size(cfg.exp_avg_sq_dtype), memory) {
  cfg_.validate();
  if (!memory.host_accessible() && (cfg_.exp_avg_dtype != DType::f32 || cfg_.exp_avg_sq_dtype != DType::f32))
    fail("--exp-avg-dtype/--exp-avg-sq-dtype other than fp32 run on the CPU backend for now (--device cpu)");
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
    void* m = state(0, i);
    void* v = state(1, i);
    // The moments' storage types, as the kernel's template arguments.
    const auto with_type = [](DType t, auto&& fn) {
      if (t == DType::bf16) return fn(bfloat16{});
      if (t == DType::f16) return fn(float16{});
      return fn(float{});
    };
    with_type(cfg_.exp_avg_dtype, [&](auto mt) {
      with_type(cfg_.exp_avg_sq_dtype, [&](auto vt) {
        using M = decltype(mt);
        using V = decltype(vt);
        if (seg.value_dtype == DType::f16)
          kernels::adamw_update<float16, float, M, V>(ctx, static_cast<float16*>(seg.value), static_cast<M*>(m),
                                                      static_cast<V*>(v), seg.grad, seg.n, h);
        else
          kernels::adamw_update<float, float, M, V>(ctx, seg.f32_value(), static_cast<M*>(m), static_cast<V*>(v),
                                                    seg.grad, seg.n, h);
      });
    });
  }
}

}  // namespace claw::optim
