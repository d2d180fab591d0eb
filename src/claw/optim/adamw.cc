#include "claw/optim/adamw.h"

#include <algorithm>
#include <cmath>

#include "claw/core/block_formats.h"
#include "claw/core/dtype_convert.h"
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
    const DType fp8 = flag == std::string_view("--exp-avg-dtype") ? DType::e4m3 : DType::e5m2;
    if (t != DType::f32 && t != DType::bf16 && t != DType::f16 && t != fp8)
      fail("{} {}: the moments are stored in fp32, bf16, fp16 or fp8", flag, optimizer_dtype_name(t));
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
  if (name == "fp8" && flag == "exp-avg-dtype") return DType::e4m3;
  if (name == "fp8" && flag == "exp-avg-sq-dtype") return DType::e5m2;  // squares: E5M2's range
  if (name == "fp8") fail("--{} fp8: the master weights are stored in fp32 or fp16", flag);
  fail("--{} {}: expected fp32, bf16, fp16{}", flag, name, flag == "main-params-dtype" ? "" : " or fp8");
}

std::string optimizer_dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "fp32";
    case DType::bf16: return "bf16";
    case DType::f16: return "fp16";
    case DType::e4m3: case DType::e5m2: return "fp8";
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

ElemFormat fp8_format(DType t) { return t == DType::e4m3 ? ElemFormat::e4m3 : ElemFormat::e5m2; }

// One block of an FP8 moment: x[n] into codes under a power-of-two scale;
// returns the factor that widens the codes back (the scale's inverse).
// keep_nonzero: a value that would round to zero keeps the smallest
// subnormal (exp_avg_sq; its values are >= 0).
float quantize_fp8_block(ElemFormat f, const float* x, int64_t n, uint8_t* codes, bool keep_nonzero) {
  float amax = 0;
  for (int64_t i = 0; i < n; ++i) amax = std::max(amax, std::fabs(x[i]));  // NaN: left out; its code is NaN
  const ElemSpec spec = elem_spec(f);
  const int e = amax > 0 && std::isfinite(amax) ? std::clamp(std::ilogb(spec.max / amax), -126, 126) : 0;
  const float scale = std::ldexp(1.0f, e);
  const float tiny = std::ldexp(1.0f, spec.emin - spec.mant);
  for (int64_t i = 0; i < n; ++i) {
    float q = quantize_rne(f, x[i] * scale);
    if (keep_nonzero && q == 0 && x[i] > 0) q = tiny;
    codes[i] = elem_code(f, q);
  }
  return std::ldexp(1.0f, -e);
}

void dequantize_fp8_block(ElemFormat f, const uint8_t* codes, int64_t n, float widen_by, float* x) {
  for (int64_t i = 0; i < n; ++i) x[i] = elem_value(f, codes[i]) * widen_by;
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
  for (size_t st = 0; st < 2; ++st)
    if (is_fp8(state_dtype(st)))
      scales_[st] = Arena(st == 0 ? "adam.exp_avg.scales" : "adam.exp_avg_sq.scales",
                          static_cast<size_t>(fp8_blocks(total)) * sizeof(float), memory);
}

void* AdamW::checkpoint_state(size_t s, size_t i) const {
  if (!is_fp8(state_dtype(s))) return state(s, i);
  CLAW_CHECK(view_open_, "the FP8 moments' checkpoint view is not open");
  return view_[s].data() + state_offsets_[i];
}

void AdamW::open_checkpoint_view() const {
  if (view_open_ || !fp8_moments(cfg_)) return;
  const int64_t n = state_floats(segments_);
  for (size_t st = 0; st < 2; ++st) {
    if (!is_fp8(state_dtype(st))) continue;
    const ElemFormat f = fp8_format(state_dtype(st));
    view_[st].assign(static_cast<size_t>(n), 0);
    float wide[kFp8Block];
    for (int64_t b = 0; b < fp8_blocks(n); ++b) {
      const int64_t at = b * kFp8Block, k = std::min(kFp8Block, n - at);
      dequantize_fp8_block(f, static_cast<const uint8_t*>(state(st, 0)) + at, k, scales_[st].ptr<float>(0)[b], wide);
      convert(DType::f32, wide, DType::bf16, view_[st].data() + at, k);
    }
  }
  view_open_ = true;
}

void AdamW::close_checkpoint_view(const CpuCtx& ctx) {
  if (!view_open_) return;
  const int64_t n = state_floats(segments_);
  for (size_t st = 0; st < 2; ++st) {
    if (!is_fp8(state_dtype(st))) continue;
    const ElemFormat f = fp8_format(state_dtype(st));
    parallel_for(ctx, fp8_blocks(n), 64, [&](int64_t lo, int64_t hi) {
      float wide[kFp8Block];
      for (int64_t b = lo; b < hi; ++b) {
        const int64_t at = b * kFp8Block, k = std::min(kFp8Block, n - at);
        convert(DType::bf16, view_[st].data() + at, DType::f32, wide, k);
        scales_[st].ptr<float>(0)[b] =
            quantize_fp8_block(f, wide, k, static_cast<uint8_t*>(state(st, 0)) + at, st == 1);
      }
    });
    view_[st] = {};
  }
  view_open_ = false;
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
  close_checkpoint_view(ctx);
  const auto hyper = [&](const Segment& seg) {
    return kernels::AdamWHyper{.lr = lr,
                               .beta1 = cfg_.beta1,
                               .beta2 = cfg_.beta2,
                               .eps = cfg_.eps,
                               .weight_decay = seg.param->spec.weight_decay ? cfg_.weight_decay : 0.0,
                               .grad_scale = grad_scale,
                               .step = step_};
  };
  // The moments' storage types, as the kernel's template arguments (an FP8
  // moment reaches the kernel as an fp32 block).
  const auto with_type = [](DType t, auto&& fn) {
    if (t == DType::bf16) return fn(bfloat16{});
    if (t == DType::f16) return fn(float16{});
    return fn(float{});
  };
  with_type(cfg_.exp_avg_dtype, [&](auto mt) {
    with_type(cfg_.exp_avg_sq_dtype, [&](auto vt) {
      using M = decltype(mt);
      using V = decltype(vt);
      // Segment i's elements [b, b + n) with their moments at m and v.
      const auto update = [&](const CpuCtx& c, size_t i, int64_t b, int64_t n, M* m, V* v) {
        const Segment& seg = segments_[i];
        if (seg.value_dtype == DType::f16)
          kernels::adamw_update<float16, float, M, V>(c, static_cast<float16*>(seg.value) + b, m, v, seg.grad + b, n,
                                                      hyper(seg));
        else
          kernels::adamw_update<float, float, M, V>(c, seg.f32_value() + b, m, v, seg.grad + b, n, hyper(seg));
      };
      if (!fp8_moments(cfg_)) {
        for (size_t i = 0; i < segments_.size(); ++i)
          update(ctx, i, 0, segments_[i].n, static_cast<M*>(state(0, i)), static_cast<V*>(state(1, i)));
        return;
      }
      // FP8: block by block of the state (a block may hold the ends of
      // several segments), each widened into fp32, updated and rounded back.
      const int64_t total = state_floats(segments_);
      parallel_for(ctx, fp8_blocks(total), 16, [&](int64_t lo, int64_t hi) {
        alignas(64) float wide[2][kFp8Block];
        for (int64_t blk = lo; blk < hi; ++blk) {
          const int64_t b0 = blk * kFp8Block, b1 = std::min(b0 + kFp8Block, total);
          for (size_t st = 0; st < 2; ++st)
            if (is_fp8(state_dtype(st)))
              dequantize_fp8_block(fp8_format(state_dtype(st)), static_cast<const uint8_t*>(state(st, 0)) + b0,
                                   b1 - b0, scales_[st].ptr<float>(0)[blk], wide[st]);
          // The segments overlapping [b0, b1): from the last one starting at or before b0.
          size_t i = static_cast<size_t>(std::upper_bound(state_offsets_.begin(), state_offsets_.end(), b0) -
                                         state_offsets_.begin());
          for (i = i ? i - 1 : 0; i < segments_.size() && state_offsets_[i] < b1; ++i) {
            const int64_t so = state_offsets_[i], x0 = std::max(b0, so), x1 = std::min(b1, so + segments_[i].n);
            if (x0 >= x1) continue;
            const auto moment = [&](size_t st) -> void* {
              if (is_fp8(state_dtype(st))) return wide[st] + (x0 - b0);
              return static_cast<uint8_t*>(state(st, i)) + (x0 - so) * static_cast<int64_t>(dtype_size(state_dtype(st)));
            };
            update(CpuCtx{1}, i, x0 - so, x1 - x0, static_cast<M*>(moment(0)), static_cast<V*>(moment(1)));
          }
          for (size_t st = 0; st < 2; ++st)
            if (is_fp8(state_dtype(st)))
              scales_[st].ptr<float>(0)[blk] = quantize_fp8_block(fp8_format(state_dtype(st)), wide[st], b1 - b0,
                                                                  static_cast<uint8_t*>(state(st, 0)) + b0, st == 1);
        }
      });
    });
  });
}

}  // namespace claw::optim
