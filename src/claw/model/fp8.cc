#include "claw/model/fp8.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>

#include "claw/core/error.h"

namespace claw::model {
namespace {

// max |a| over [rows, cols], NaN-propagating: the magnitudes compare as
// their bit patterns (a NaN's lie above inf's).
float amax_of(const CpuCtx& cpu, const float* a, int64_t n) {
  std::atomic<uint32_t> best{0};
  parallel_for(cpu, n, 1 << 14, [&](int64_t lo, int64_t hi) {
    uint32_t m = 0;
    for (int64_t i = lo; i < hi; ++i) m = std::max(m, std::bit_cast<uint32_t>(a[i]) & 0x7fffffffu);
    uint32_t cur = best.load(std::memory_order_relaxed);
    while (m > cur && !best.compare_exchange_weak(cur, m, std::memory_order_relaxed)) {
    }
  });
  const uint32_t b = best.load();
  return b > 0x7f800000u ? NAN : std::bit_cast<float>(b);
}

// Quantised values of a[i] * scale (the per-tensor recipes).
void quantize_scaled(const CpuCtx& cpu, ElemFormat f, const float* a, int64_t n, float scale, float* out) {
  parallel_for(cpu, n, 1 << 14, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) out[i] = quantize_rne(f, a[i] * scale);
  });
}

// MXFP8 with blocks of 32 along the contraction: the dequantised value
// element x 2^e is exact in fp32, so the GEMM's per-block scaling is the
// plain product of these values.
void quantize_mx(const CpuCtx& cpu, ElemFormat f, const float* a, int64_t rows, int64_t cols, bool along_rows,
                 float* out) {
  constexpr int kBlock = 32;
  auto block = [&](auto at, int64_t len) {
    float amax = 0;
    bool finite = true;
    for (int64_t i = 0; i < len; ++i) {
      const float v = std::fabs(a[at(i)]);
      finite &= v <= 3.4028235e38f;
      amax = std::max(amax, v);
    }
    const uint8_t code = mx_scale_code(f, finite ? amax : NAN, MxScaleRule::rceil);
    if (code == 0xff) {
      for (int64_t i = 0; i < len; ++i) out[at(i)] = NAN;
      return;
    }
    const int e = static_cast<int>(code) - 127;
    for (int64_t i = 0; i < len; ++i)
      out[at(i)] = static_cast<float>(
          std::ldexp(static_cast<double>(quantize_rne(f, static_cast<float>(std::ldexp(double(a[at(i)]), -e)))), e));
  };
  if (!along_rows) {
    parallel_for(cpu, rows, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t r = lo; r < hi; ++r)
        for (int64_t c0 = 0; c0 < cols; c0 += kBlock)
          block([&](int64_t i) { return r * cols + c0 + i; }, std::min<int64_t>(kBlock, cols - c0));
    });
    return;
  }
  const int64_t row_blocks = (rows + kBlock - 1) / kBlock;
  parallel_for(cpu, row_blocks * cols, 64, [&](int64_t lo, int64_t hi) {
    for (int64_t k = lo; k < hi; ++k) {
      const int64_t r0 = (k / cols) * kBlock, c = k % cols;
      block([&](int64_t i) { return (r0 + i) * cols + c; }, std::min<int64_t>(kBlock, rows - r0));
    }
  });
}

}  // namespace

const char* fp8_role_name(Fp8Role r) {
  switch (r) {
    case Fp8Role::input: return "input";
    case Fp8Role::weight: return "weight";
    case Fp8Role::grad_output: return "output gradient";
  }
  return "?";
}

Fp8Linear::Fp8Linear(const Fp8Config& cfg, std::string layer) : layer_(std::move(layer)) {
  cfg.validate();
  CLAW_CHECK(cfg.enabled(), "FP8 state for {} without --fp8-format", layer_);
  recipe_ = cfg.recipe == "tensorwise" ? Recipe::tensorwise : cfg.recipe == "mxfp8" ? Recipe::mxfp8 : Recipe::delayed;
  bwd_ = cfg.format == "hybrid" ? ElemFormat::e5m2 : ElemFormat::e4m3;
  amax_max_ = cfg.amax_compute_algo == "max";
  margin_ = static_cast<int>(cfg.margin);
  for (auto& h : history_) h.assign(static_cast<size_t>(cfg.amax_history_len), 0.0f);
}

Fp8Linear::Operand Fp8Linear::quantize(const CpuCtx& cpu, Fp8Role role, const float* a, int64_t rows, int64_t cols,
                                       bool along_rows, std::vector<float>& buf, comm::Group* group, bool record) {
  const int64_t n = rows * cols;
  buf.resize(static_cast<size_t>(n));
  const ElemFormat f = format(role);
  const int r = static_cast<int>(role);
  switch (recipe_) {
    case Recipe::delayed: {
      if (record) {
        const float m = amax_of(cpu, a, n);
        amax_[r] = std::isnan(m) || std::isnan(amax_[r]) ? NAN : std::max(amax_[r], m);
      }
      quantize_scaled(cpu, f, a, n, scale_[r], buf.data());
      return {buf.data(), 1.0f / scale_[r]};
    }
    case Recipe::tensorwise: {
      float m = amax_of(cpu, a, n);
      if (group && group->size() > 1) m = group->all_reduce_value(m, comm::ReduceOp::max);
      const float s = m > 0 && std::isfinite(m) ? elem_spec(f).max / m : 1.0f;
      quantize_scaled(cpu, f, a, n, s, buf.data());
      return {buf.data(), 1.0f / s};
    }
    case Recipe::mxfp8:
      quantize_mx(cpu, f, a, rows, cols, along_rows, buf.data());
      return {buf.data(), 1.0f};
  }
  return {a, 1.0f};
}

void Fp8Linear::update() {
  const int64_t len = static_cast<int64_t>(history_[0].size());
  for (int r = 0; r < 3; ++r) {
    const float m = amax_[r];
    if (!std::isfinite(m))
      fail<NonFiniteError>("FP8 amax of {}'s {} is {}: a non-finite value reached an FP8 layer (the amax history "
                           "would turn every later scale into NaN)",
                           layer_, fp8_role_name(static_cast<Fp8Role>(r)), std::isnan(m) ? "nan" : "inf");
    history_[r][static_cast<size_t>(history_pos_)] = m;
    amax_[r] = 0;
  }
  const int64_t newest = history_pos_;
  history_pos_ = (history_pos_ + 1) % len;
  for (int r = 0; r < 3; ++r) {
    const std::vector<float>& h = history_[r];
    const float amax = amax_max_ ? *std::max_element(h.begin(), h.end()) : h[static_cast<size_t>(newest)];
    if (amax > 0) scale_[r] = std::ldexp(elem_spec(format(static_cast<Fp8Role>(r))).max / amax, -margin_);
  }
}

}  // namespace claw::model
