// FP8 optimizer moments (optim/adamw.h): E4M3 exp_avg and E5M2 exp_avg_sq
// with a power-of-two scale per 128 elements of the state.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "claw/core/block_formats.h"
#include "claw/optim/adamw.h"

namespace claw::optim {
namespace {

// Two parameters (one without weight decay) of lengths that leave partial
// blocks and let a block hold the ends of both.
struct Problem {
  model::Param a, b;
  std::vector<float> pa, pb, ga, gb;
  Problem() {
    a.spec.name = "a";
    b.spec.name = "b";
    b.spec.weight_decay = false;
    pa.resize(300);
    pb.resize(77);
    ga.resize(pa.size());
    gb.resize(pb.size());
    for (size_t i = 0; i < pa.size(); ++i) pa[i] = std::sin(0.37f * static_cast<float>(i));
    for (size_t i = 0; i < pb.size(); ++i) pb[i] = std::cos(0.21f * static_cast<float>(i));
  }
  std::vector<Segment> segments() {
    return {{.param = &a, .value = pa.data(), .grad = ga.data(), .n = static_cast<int64_t>(pa.size())},
            {.param = &b, .value = pb.data(), .grad = gb.data(), .n = static_cast<int64_t>(pb.size())}};
  }
  void gradients(int step) {
    for (size_t i = 0; i < ga.size(); ++i)
      ga[i] = 1e-2f * std::cos(0.11f * static_cast<float>(i * step)) * (i % 50 == 7 ? 1e-4f : 1.0f);
    for (size_t i = 0; i < gb.size(); ++i) gb[i] = 1e-3f * std::sin(0.3f * static_cast<float>(i + step));
  }
};

AdamWConfig fp8_config() {
  AdamWConfig c{.precision_aware = true};
  c.exp_avg_dtype = DType::e4m3;
  c.exp_avg_sq_dtype = DType::e5m2;
  return c;
}

// Each FP8 code times its block's scale, as the checkpoint view shows them.
std::vector<float> moments(const AdamW& opt, size_t s) {
  opt.open_checkpoint_view();
  std::vector<float> out;
  for (size_t i = 0; i < opt.segments().size(); ++i) {
    const auto* bits = static_cast<const uint16_t*>(opt.checkpoint_state(s, i));
    for (int64_t k = 0; k < opt.segments()[i].n; ++k) out.push_back(std::bit_cast<float>(uint32_t{bits[k]} << 16));
  }
  return out;
}

// Ten steps track the fp32-moment run closely (the moments carry 3 and 2
// mantissa bits) but not exactly; the moments are FP8 values under
// power-of-two scales, and the state is 1 byte per element plus the scales.
TEST(Fp8Moments, TrackTheFp32Moments) {
  Problem p32, p8;
  AdamW ref(p32.segments(), {});
  AdamW fp8(p8.segments(), fp8_config());
  EXPECT_EQ(fp8.state_bytes(), 2 * (304 + 80) + 2 * 4 * 3u);  // 16-aligned codes; 384 elements: 3 blocks
  for (int step = 1; step <= 10; ++step) {
    p32.gradients(step);
    p8.gradients(step);
    ref.step(CpuCtx{1}, 1e-2, 1.0);
    fp8.step(CpuCtx{2}, 1e-2, 1.0);
  }
  double diff = 0, moved = 0;
  for (size_t i = 0; i < p32.pa.size(); ++i) {
    diff = std::max(diff, static_cast<double>(std::fabs(p8.pa[i] - p32.pa[i])));
    moved = std::max(moved, static_cast<double>(std::fabs(p32.pa[i] - std::sin(0.37f * static_cast<float>(i)))));
  }
  EXPECT_GT(diff, 0.0) << "FP8 moments changed nothing";
  EXPECT_LT(diff, 0.1 * moved) << "moved " << moved;
  const std::vector<float> m = moments(fp8, 0), v = moments(fp8, 1);
  for (size_t k = 0; k < m.size(); k += 128) {  // within a block: E4M3 / E5M2 values times one power of two
    float amax = 0;
    for (size_t j = k; j < std::min(m.size(), k + 128); ++j) amax = std::max(amax, std::fabs(m[j]));
    const float scale = std::ldexp(1.0f, std::ilogb(448.0f / amax));
    for (size_t j = k; j < std::min(m.size(), k + 128) && j < p8.pa.size(); ++j)
      ASSERT_EQ(quantize_rne(ElemFormat::e4m3, m[j] * scale), m[j] * scale) << j;
  }
  for (float x : v) ASSERT_GT(x, 0.0f) << "a second moment rounded to zero";
}

// Opening the checkpoint view (a save) and rounding it back at the next
// step changes nothing: the run with a view before every step equals the
// one without, bit for bit.
TEST(Fp8Moments, CheckpointViewRoundTripsExactly) {
  Problem p1, p2;
  AdamW a(p1.segments(), fp8_config()), b(p2.segments(), fp8_config());
  for (int step = 1; step <= 6; ++step) {
    p1.gradients(step);
    p2.gradients(step);
    b.open_checkpoint_view();
    a.step(CpuCtx{1}, 1e-2, 1.0);
    b.step(CpuCtx{1}, 1e-2, 1.0);
  }
  EXPECT_EQ(p1.pa, p2.pa);
  EXPECT_EQ(p1.pb, p2.pb);
  EXPECT_EQ(moments(a, 0), moments(b, 0));
  EXPECT_EQ(moments(a, 1), moments(b, 1));
}

// A gradient 2^-17 of its block's largest: its square is below what E5M2
// holds under the block's scale. Rounded to zero, exp_avg_sq would make the
// next step, where that gradient is 0, exp_avg / eps (hundreds of learning
// rates); kept at the smallest subnormal, the steps stay within a learning
// rate each, as Adam's do.
TEST(Fp8Moments, SmallSecondMomentsDoNotRoundToZero) {
  model::Param param;
  param.spec.name = "w";
  param.spec.weight_decay = false;
  std::vector<float> w(128, 0.0f), g(128, 1.0f);
  AdamW opt({{.param = &param, .value = w.data(), .grad = g.data(), .n = 128}}, fp8_config());
  const double lr = 1e-3;
  g[5] = std::ldexp(1.0f, -17);
  opt.step(CpuCtx{1}, lr, 1.0);
  EXPECT_NEAR(std::fabs(w[0]), lr, 1e-2 * lr);
  g[5] = 0;
  opt.step(CpuCtx{1}, lr, 1.0);
  EXPECT_LE(std::fabs(w[5]), 2 * lr);
  EXPECT_GT(std::fabs(w[5]), 0.0f);
}

}  // namespace
}  // namespace claw::optim
