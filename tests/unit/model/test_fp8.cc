#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "claw/core/block_formats.h"
#include "claw/core/error.h"
#include "claw/model/fp8.h"

namespace claw::model {
namespace {

Fp8Config config(const char* recipe, int64_t history = 1, const char* algo = "most_recent", int64_t margin = 0) {
  Fp8Config c;
  c.format = "hybrid";
  c.recipe = recipe;
  c.amax_history_len = history;
  c.amax_compute_algo = algo;
  c.margin = margin;
  return c;
}

// Delayed scaling: the first step quantises with scale 1; each step's amax
// enters the history at its end and sets the next scale, max / amax_h / 2^margin,
// amax_h the history's max or most recent entry; E5M2's max for gradients.
TEST(Fp8, DelayedScalesFollowTheAmaxHistory) {
  const CpuCtx cpu{1};
  std::vector<float> buf;
  Fp8Linear f(config("delayed", 2, "max", 1), "layers.0.mlp.fc.weight");
  const std::vector<float> x = {1.0f, -8.0f, 3.0f, 0.5f}, dy = {0.25f, 0.0f, -1.0f, 0.125f};
  auto q = f.quantize(cpu, Fp8Role::input, x.data(), 2, 2, false, buf, nullptr, true);
  EXPECT_EQ(q.alpha, 1.0f);
  f.quantize(cpu, Fp8Role::grad_output, dy.data(), 2, 2, false, buf, nullptr, true);
  f.update();
  EXPECT_FLOAT_EQ(f.scale(Fp8Role::input), 448.0f / 8.0f / 2.0f);
  EXPECT_FLOAT_EQ(f.scale(Fp8Role::grad_output), 57344.0f / 1.0f / 2.0f);
  EXPECT_EQ(f.scale(Fp8Role::weight), 1.0f);  // amax 0: the scale stays
  // The next step quantises x * scale to E4M3 and hands back 1 / scale.
  q = f.quantize(cpu, Fp8Role::input, x.data(), 2, 2, false, buf, nullptr, true);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(buf[i], quantize_rne(ElemFormat::e4m3, x[i] * 28.0f));
  EXPECT_FLOAT_EQ(q.alpha, 1.0f / 28.0f);
  f.update();  // amax 8 again; history {8, 8}
  const std::vector<float> small = {0.5f, 0.25f};
  f.quantize(cpu, Fp8Role::input, small.data(), 1, 2, false, buf, nullptr, true);
  f.update();  // history {8, 0.5}: max keeps 8
  EXPECT_FLOAT_EQ(f.scale(Fp8Role::input), 28.0f);
  f.quantize(cpu, Fp8Role::input, small.data(), 1, 2, false, buf, nullptr, true);
  f.update();  // history {0.5, 0.5}
  EXPECT_FLOAT_EQ(f.scale(Fp8Role::input), 448.0f / 0.5f / 2.0f);
  // An evaluation pass (record false) leaves the history alone.
  f.quantize(cpu, Fp8Role::input, x.data(), 2, 2, false, buf, nullptr, false);
  f.update();
  EXPECT_FLOAT_EQ(f.scale(Fp8Role::input), 448.0f / 0.5f / 2.0f);

  Fp8Linear recent(config("delayed", 4, "most_recent"), "l");
  recent.quantize(cpu, Fp8Role::input, x.data(), 2, 2, false, buf, nullptr, true);
  recent.update();
  recent.quantize(cpu, Fp8Role::input, small.data(), 1, 2, false, buf, nullptr, true);
  recent.update();
  EXPECT_FLOAT_EQ(recent.scale(Fp8Role::input), 448.0f / 0.5f);
}

// A NaN (or inf) amax is refused when it would enter the history, naming
// the layer and the tensor.
TEST(Fp8, NonFiniteAmaxIsRefusedWithTheLayerNamed) {
  const CpuCtx cpu{1};
  std::vector<float> buf;
  for (float bad : {NAN, INFINITY}) {
    Fp8Linear f(config("delayed"), "layers.1.attention.o_proj.weight");
    const std::vector<float> dy = {1.0f, bad, 2.0f, 3.0f};
    f.quantize(cpu, Fp8Role::grad_output, dy.data(), 2, 2, false, buf, nullptr, true);
    try {
      f.update();
      FAIL() << "a non-finite amax was accepted";
    } catch (const NonFiniteError& e) {
      EXPECT_NE(std::string(e.what()).find("layers.1.attention.o_proj.weight"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("output gradient"), std::string::npos) << e.what();
    }
  }
}

TEST(Fp8, TensorwiseScalesByTheCurrentAmax) {
  const CpuCtx cpu{1};
  std::vector<float> buf;
  Fp8Linear f(config("tensorwise"), "l");
  const std::vector<float> x = {0.001f, -0.02f, 0.013f, 0.0071f};
  const auto q = f.quantize(cpu, Fp8Role::weight, x.data(), 2, 2, false, buf, nullptr, true);
  const float s = 448.0f / 0.02f;
  EXPECT_FLOAT_EQ(q.alpha, 1.0f / s);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(buf[i], quantize_rne(ElemFormat::e4m3, x[i] * s));
  EXPECT_EQ(buf[1], -448.0f);
}

// MXFP8 operands are the blocks' dequantised values (exact in fp32), with
// blocks of 32 along the contraction: along the columns or down the rows.
TEST(Fp8, MxOperandsAreBlocksAlongTheContraction) {
  const CpuCtx cpu{2};
  std::mt19937 gen(1);
  std::normal_distribution<float> nd;
  const int64_t rows = 64, cols = 96;
  std::vector<float> a(static_cast<size_t>(rows * cols)), buf, want(static_cast<size_t>(rows * cols));
  for (size_t i = 0; i < a.size(); ++i) a[i] = nd(gen) * std::exp2(float(i % 7) * 3 - 9);
  Fp8Linear f(config("mxfp8"), "l");
  for (bool along_rows : {false, true}) {
    for (Fp8Role role : {Fp8Role::input, Fp8Role::grad_output}) {
      const ElemFormat fmt = role == Fp8Role::input ? ElemFormat::e4m3 : ElemFormat::e5m2;
      const auto q = f.quantize(cpu, role, a.data(), rows, cols, along_rows, buf, nullptr, true);
      EXPECT_EQ(q.alpha, 1.0f);
      // The same through block_formats.h on each line of the contraction.
      const int64_t lines = along_rows ? cols : rows, len = along_rows ? rows : cols;
      std::vector<float> line(static_cast<size_t>(len)), back(static_cast<size_t>(len));
      std::vector<uint8_t> codes(static_cast<size_t>(len)), scales(static_cast<size_t>(len / 32 + 1));
      for (int64_t l = 0; l < lines; ++l) {
        for (int64_t i = 0; i < len; ++i) line[i] = along_rows ? a[i * cols + l] : a[l * cols + i];
        mx_quantize(fmt, line.data(), len, codes.data(), scales.data(), 32, MxScaleRule::rceil);
        mx_dequantize(fmt, codes.data(), scales.data(), len, back.data());
        for (int64_t i = 0; i < len; ++i)
          ASSERT_EQ(along_rows ? buf[i * cols + l] : buf[l * cols + i], back[i]) << along_rows << " " << l << " " << i;
      }
    }
  }
}

}  // namespace
}  // namespace claw::model
