#include "claw/model/fp8.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <utility>

#include "claw/core/dtype_convert.h"
#include "claw/core/error.h"
#include "claw/core/philox.h"

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

// How one tile quantises: out = quantize(x * mul) * back.
struct TileScale {
  float mul, back;
};

// Block-scaled quantisation over tiles of tr x tc (the last ones clipped):
// scale_of(tile amax, NaN when the tile holds NaN/inf) gives the tile's
// scaling; elements round to nearest even, or stochastically with
// uniforms from `sr` (indexed by element, from sr_offset) when given.
template <typename ScaleOf>
void quantize_tiles(const CpuCtx& cpu, ElemFormat f, const float* a, int64_t rows, int64_t cols, int64_t tr,
                    int64_t tc, ScaleOf scale_of, float* out, const RandomStream* sr = nullptr,
                    uint64_t sr_offset = 0) {
  const int64_t trows = (rows + tr - 1) / tr, tcols = (cols + tc - 1) / tc;
  parallel_for(cpu, trows * tcols, std::max<int64_t>(1, 4096 / (tr * tc)), [&](int64_t lo, int64_t hi) {
    for (int64_t t = lo; t < hi; ++t) {
      const int64_t r0 = (t / tcols) * tr, c0 = (t % tcols) * tc;
      const int64_t r1 = std::min(rows, r0 + tr), c1 = std::min(cols, c0 + tc);
      uint32_t m = 0;
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t c = c0; c < c1; ++c) m = std::max(m, std::bit_cast<uint32_t>(a[r * cols + c]) & 0x7fffffffu);
      const float amax = m >= 0x7f800000u ? NAN : std::bit_cast<float>(m);
      const TileScale s = scale_of(amax);
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t c = c0; c < c1; ++c) {
          const int64_t i = r * cols + c;
          const float v = a[i] * s.mul;
          out[i] = (sr ? quantize_stochastic(f, v, sr->uniform(sr_offset + static_cast<uint64_t>(i)))
                       : quantize_rne(f, v)) * s.back;
        }
    }
  });
}

// The tile of a block of `block` along the contraction (or block x block).
std::pair<int64_t, int64_t> tile(int64_t block, bool along_rows, bool two_d) {
  if (two_d) return {block, block};
  return along_rows ? std::pair<int64_t, int64_t>{block, 1} : std::pair<int64_t, int64_t>{1, block};
}

// A random Hadamard transform of blocks of 16 rows: each group of 16 rows
// becomes H D times it, H the 16 x 16 Sylvester-Hadamard matrix / 4 and D a
// fixed random sign per row position; H D is orthogonal, so applying it to
// both operands of a product contracted over rows leaves the product as it
// was while spreading outliers over the block. Rows beyond the last full
// group stay as they are.
void hadamard_rows(const CpuCtx& cpu, const float* a, int64_t rows, int64_t cols, float* out) {
  static const std::array<float, 16> sign = [] {
    std::array<float, 16> s{};
    const RandomStream rng(0x5eed, hash_name("nvfp4.rht"));
    for (int i = 0; i < 16; ++i) s[static_cast<size_t>(i)] = rng.uniform(static_cast<uint64_t>(i)) < 0.5f ? -1.0f : 1.0f;
    return s;
  }();
  const int64_t groups = rows / 16;
  std::copy(a + groups * 16 * cols, a + rows * cols, out + groups * 16 * cols);
  parallel_for(cpu, groups, 1, [&](int64_t lo, int64_t hi) {
    std::vector<float> acc(static_cast<size_t>(16 * cols));
    for (int64_t g = lo; g < hi; ++g) {
      const float* in = a + g * 16 * cols;
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int i = 0; i < 16; ++i)
        for (int j = 0; j < 16; ++j) {
          const float h = (std::popcount(static_cast<unsigned>(i & j)) % 2 ? -0.25f : 0.25f) * sign[static_cast<size_t>(j)];
          for (int64_t c = 0; c < cols; ++c) acc[static_cast<size_t>(i * cols + c)] += h * in[j * cols + c];
        }
      std::copy(acc.begin(), acc.end(), out + g * 16 * cols);
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

Fp8Linear::Fp8Linear(const Fp8Config& cfg, std::string layer, int64_t block)
    : layer_(std::move(layer)), block_(block) {
  cfg.validate();
  CLAW_CHECK(cfg.enabled(), "FP8 state for {} without --fp8-format", layer_);
  recipe_ = cfg.recipe == "tensorwise" ? Recipe::tensorwise
            : cfg.recipe == "mxfp8"    ? Recipe::mxfp8
            : cfg.recipe == "blockwise" ? Recipe::blockwise
            : cfg.recipe == "nvfp4"    ? Recipe::nvfp4
                                       : Recipe::delayed;
  bwd_ = cfg.format == "hybrid" ? ElemFormat::e5m2 : ElemFormat::e4m3;
  if (recipe_ == Recipe::nvfp4) fwd_ = bwd_ = ElemFormat::e2m1;
  sr_ = RandomStream(cfg.seed, hash_name(layer_ + ".nvfp4.sr"));
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
  switch (calibrating_ && recipe_ == Recipe::delayed ? Recipe::tensorwise : recipe_) {
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
    case Recipe::mxfp8: {
      const auto [tr, tc] = tile(32, along_rows, false);
      quantize_tiles(cpu, f, a, rows, cols, tr, tc, [f](float amax) {
        const uint8_t code = mx_scale_code(f, amax, MxScaleRule::rceil);
        if (code == 0xff) return TileScale{NAN, NAN};
        const int e = static_cast<int>(code) - 127;  // 2^e within float's range: |e| <= 127
        return TileScale{std::ldexp(1.0f, -e), std::ldexp(1.0f, e)};
      }, buf.data());
      return {buf.data(), 1.0f};
    }
    case Recipe::blockwise: {
      // 1 x 128 tiles along the contraction, 128 x 128 for weights, with
      // power-of-two scales (exact to undo): s = 2^floor(log2(max / amax)).
      const auto [tr, tc] = tile(128, along_rows, role == Fp8Role::weight);
      const float fmax = elem_spec(f).max;
      quantize_tiles(cpu, f, a, rows, cols, tr, tc, [fmax](float amax) {
        if (std::isnan(amax)) return TileScale{NAN, NAN};
        if (amax == 0) return TileScale{1.0f, 1.0f};
        const int e = std::clamp(std::ilogb(fmax / amax), -126, 127);
        return TileScale{std::ldexp(1.0f, e), std::ldexp(1.0f, -e)};
      }, buf.data());
      return {buf.data(), 1.0f};
    }
    case Recipe::nvfp4: {
      // E2M1 in blocks of 16 along the contraction (16 x 16 for weights)
      // with E4M3 block scales under one fp32 scale for the tensor; the
      // weight-gradient operands (contracted over tokens) pass through a
      // random Hadamard transform first, gradients round stochastically.
      const float* src = a;
      if (along_rows && role != Fp8Role::weight) {
        rht_.resize(static_cast<size_t>(n));
        hadamard_rows(cpu, a, rows, cols, rht_.data());
        src = rht_.data();
      }
      float m = amax_of(cpu, src, n);
      if (group && group->size() > 1) m = group->all_reduce_value(m, comm::ReduceOp::max);
      const float s_enc = nvfp4_tensor_scale(m);
      const auto [tr, tc] = tile(16, along_rows, role == Fp8Role::weight);
      const bool stochastic = role == Fp8Role::grad_output;
      quantize_tiles(cpu, f, src, rows, cols, tr, tc, [s_enc](float amax) {
        if (std::isnan(amax)) return TileScale{NAN, NAN};
        const float d = e4m3_to_f32(f32_to_e4m3(amax / 6.0f * s_enc));
        if (d == 0) return TileScale{0.0f, 0.0f};
        return TileScale{s_enc / d, d};
      }, buf.data(), stochastic ? &sr_ : nullptr, sr_counter_);
      if (stochastic) sr_counter_ += static_cast<uint64_t>(n);
      return {buf.data(), 1.0f / s_enc};
    }
  }
  return {a, 1.0f};
}

std::vector<double> Fp8Linear::scaling_state() const {
  std::vector<double> s(scale_.begin(), scale_.end());
  s.push_back(static_cast<double>(history_pos_));
  s.push_back(static_cast<double>(sr_counter_));
  for (const auto& h : history_) s.insert(s.end(), h.begin(), h.end());
  return s;
}

void Fp8Linear::load_scaling_state(const std::vector<double>& s) {
  const auto len = static_cast<int64_t>(history_[0].size());
  CLAW_CHECK(static_cast<int64_t>(s.size()) == scaling_state_size(len), "{}: FP8 scaling state of {} values for a "
             "history of {}", layer_, s.size(), len);
  for (size_t r = 0; r < 3; ++r) scale_[r] = static_cast<float>(s[r]);
  history_pos_ = static_cast<int64_t>(s[3]);
  sr_counter_ = static_cast<uint64_t>(s[4]);
  for (size_t r = 0; r < 3; ++r)
    for (int64_t i = 0; i < len; ++i) history_[r][static_cast<size_t>(i)] = static_cast<float>(s[5 + r * len + i]);
}

void Fp8Linear::update() {
  if (calibrating_) return;
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
