// Sequence packing: documents packed into one row with per-document
// attention (seg_start), restarted positions and no loss across a boundary
// give exactly the losses and gradients of running each document alone.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "claw/core/philox.h"
#include "claw/model/config.h"
#include "claw/model/gpt.h"

namespace claw::model {
namespace {

const CpuCtx ctx{2};
constexpr int32_t kEod = 50256;

std::vector<float> grads_of(GPT& m) {
  return std::vector<float>(m.store().grads(), m.store().grads() + m.store().bytes() / sizeof(float));
}

// Documents of these lengths (each ending in eod) fill a row of T tokens.
void check_packing(ModelConfig c, std::vector<int64_t> lengths) {
  int64_t T = 0;
  for (int64_t n : lengths) T += n;
  RandomStream rng(11, 12);
  std::vector<int32_t> row(T + 1);
  for (int64_t i = 0; i <= T; ++i) row[i] = static_cast<int32_t>(rng.block(i)[0] % 50000);
  std::vector<int32_t> seg(T), pos(T), tokens(row.begin(), row.end() - 1), targets(row.begin() + 1, row.end());
  int64_t start = 0;
  for (int64_t n : lengths) {
    tokens[start + n - 1] = kEod;  // each document ends in eod
    for (int64_t t = start; t < start + n; ++t) {
      seg[t] = static_cast<int32_t>(start);
      pos[t] = static_cast<int32_t>(t - start);
    }
    start += n;
  }
  for (int64_t t = 0; t + 1 < T; ++t) targets[t] = tokens[t + 1];
  for (int64_t t = 0; t < T; ++t)
    if (tokens[t] == kEod) targets[t] = -1;  // --eod-mask-loss: no prediction across the boundary

  GPT m(c);
  m.init_weights(ctx, 21);
  // Packed: one row.
  m.reserve(1, T);
  m.store().zero_grads();
  StepCtx packed{.cpu = ctx, .B = 1, .T = T, .training = true, .positions = pos.data(), .seg_start = seg.data()};
  const double packed_loss = m.forward(packed, tokens.data(), targets.data(), 1.0);
  m.backward(packed, tokens.data());
  const auto packed_grads = grads_of(m);

  // Each document alone, gradients accumulated.
  m.store().zero_grads();
  double separate_loss = 0;
  start = 0;
  for (int64_t n : lengths) {
    m.reserve(1, n);
    StepCtx alone{.cpu = ctx, .B = 1, .T = n, .training = true};
    separate_loss += m.forward(alone, tokens.data() + start, targets.data() + start, 1.0);
    m.backward(alone, tokens.data() + start);
    start += n;
  }
  const auto separate_grads = grads_of(m);

  EXPECT_NEAR(packed_loss, separate_loss, 1e-5 * std::abs(separate_loss));
  double gmax = 0, dmax = 0;
  for (size_t i = 0; i < packed_grads.size(); ++i) {
    gmax = std::max(gmax, double(std::abs(separate_grads[i])));
    dmax = std::max(dmax, double(std::abs(packed_grads[i] - separate_grads[i])));
  }
  // fp32 summation-order differences only (a leak across documents would
  // change gradients at the percent level).
  EXPECT_LT(dmax, 1e-5 * gmax) << "max gradient difference " << dmax << " of " << gmax;
}

TEST(Packing, LlamaPackedEqualsSeparateDocuments) {
  ModelConfig c = model_preset("llama-tiny");  // RoPE: positions restart per document
  c.num_layers = 2;
  check_packing(c, {37, 1, 150, 68});
}

TEST(Packing, Gpt2PackedEqualsSeparateDocuments) {
  ModelConfig c = model_preset("gpt2-tiny");  // learned positions
  c.num_layers = 2;
  check_packing(c, {100, 3, 153});
}

}  // namespace
}  // namespace claw::model
