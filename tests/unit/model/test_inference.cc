// The inference API: forward_cached with a KV cache against the training
// forward over the whole sequence, and per-token loss weights.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "claw/model/config.h"
#include "claw/model/gpt.h"
#include "inference_reference.h"
#include "random_batch.h"

namespace claw::model {
namespace {

using testing::max_rel;

const CpuCtx ctx{2};

ModelConfig small(const char* preset) {
  ModelConfig c = model_preset(preset);
  c.num_layers = 2;
  c.vocab_size = 1000;
  c.hidden_dropout = 0;
  return c;
}

// One token at a time, then a prompt prefilled in one chunk and the rest
// decoded, on two rows of different lengths: every position's logits equal
// the whole-sequence forward's (1e-5 relative). Also under a sliding window
// of 5 keys (Mistral's attention), which the 24 tokens cross.
TEST(Inference, IncrementalDecodingEqualsFullForward) {
  for (const char* preset : {"gpt2-tiny", "llama-tiny", "llama-tiny+window"}) {
    ModelConfig c = small(std::string_view(preset).starts_with("llama") ? "llama-tiny" : preset);
    if (std::string_view(preset).ends_with("+window")) c.window_size = 5;
    GPT m(c);
    m.init_weights(ctx, 1234);
    const int64_t T = 24, V = c.vocab_size;
    const Batch batch = random_batch(2 * T, V, 5);
    const std::vector<float> ref = testing::reference_logits(ctx, m, batch.tokens, 2, T);

    // Row by row, one token per step.
    KvCache one(c, {}, 2, 32);
    std::vector<float> logits(2 * V);
    for (int64_t t = 0; t < T; ++t) {
      const int32_t step[2] = {batch.tokens[t], batch.tokens[T + t]};
      Tensor h = m.forward_cached({.cpu = ctx, .B = 2, .T = 1}, step, one);
      m.full_logits({.cpu = ctx, .B = 2, .T = 1}, h, logits.data());
      EXPECT_LT(max_rel(&logits[0], &ref[t * V], V), 1e-5) << preset << " row 0 position " << t;
      EXPECT_LT(max_rel(&logits[V], &ref[(T + t) * V], V), 1e-5) << preset << " row 1 position " << t;
    }
    EXPECT_EQ(one.length(0), T);

    // A prompt of 10 tokens in one chunk, then single tokens.
    KvCache chunked(c, {}, 1, T);
    std::vector<float> prompt_logits(10 * V);
    Tensor h = m.forward_cached({.cpu = ctx, .B = 1, .T = 10}, batch.tokens.data(), chunked);
    m.full_logits({.cpu = ctx, .B = 1, .T = 10}, h, prompt_logits.data());
    EXPECT_LT(max_rel(prompt_logits.data(), ref.data(), 10 * V), 1e-5) << preset << " prefill";
    for (int64_t t = 10; t < T; ++t) {
      h = m.forward_cached({.cpu = ctx, .B = 1, .T = 1}, &batch.tokens[t], chunked);
      m.full_logits({.cpu = ctx, .B = 1, .T = 1}, h, logits.data());
      EXPECT_LT(max_rel(logits.data(), &ref[t * V], V), 1e-5) << preset << " decode position " << t;
    }
    // A full cache refuses more.
    EXPECT_THROW(m.forward_cached({.cpu = ctx, .B = 1, .T = 1}, batch.tokens.data(), chunked), Error);
  }
}

// Loss and gradients of one forward and backward of a fresh model (seed
// 77) on `tokens` with `targets`, per-token weights `w` when given.
double loss_and_grads(const ModelConfig& c, int64_t B, int64_t T, const std::vector<int32_t>& tokens,
                      const std::vector<int32_t>& targets, const std::vector<float>* w, std::vector<float>& grads) {
  GPT m(c);
  m.init_weights(ctx, 77);
  m.reserve(B, T);
  m.store().zero_grads();
  StepCtx sc{.cpu = ctx, .B = B, .T = T, .training = true};
  if (w) sc.loss_weight = w->data();
  const double loss = m.forward(sc, tokens.data(), targets.data(), 1.0 / static_cast<double>(B * T));
  m.backward(sc, tokens.data());
  grads.assign(m.store().grads(), m.store().grads() + m.store().grad_total());
  return loss;
}

// loss_weight: 1 everywhere is the plain loss; 0/1 weights are the same as
// masking those targets (loss and gradients, up to the BLAS's blocking); 2 doubles.
TEST(Inference, PerTokenLossWeight) {
  const ModelConfig c = small("llama-tiny");
  const int64_t B = 2, T = 16;
  const Batch batch = random_batch(B * T, c.vocab_size, 9);
  auto run = [&](const std::vector<int32_t>& targets, const std::vector<float>* w, std::vector<float>& grads) {
    return loss_and_grads(c, B, T, batch.tokens, targets, w, grads);
  };
  std::vector<float> g_plain, g_ones, g_mask, g_zero, g_two;
  const double plain = run(batch.targets, nullptr, g_plain);
  const std::vector<float> ones(B * T, 1.0f);
  EXPECT_EQ(run(batch.targets, &ones, g_ones), plain);
  EXPECT_EQ(g_ones, g_plain);
  std::vector<int32_t> masked = batch.targets;
  std::vector<float> mask(B * T, 1.0f);
  for (int64_t i = 0; i < B * T; i += 3) masked[i] = -1, mask[i] = 0.0f;
  // Masked rows leave the LM head's GEMMs (output_layer.h packs the rest), so
  // the two runs multiply matrices of different heights: the BLAS may block
  // them differently (OpenBLAS on Zen 4 does), so equal up to that rounding.
  const double lm = run(masked, nullptr, g_mask);
  EXPECT_NEAR(run(batch.targets, &mask, g_zero), lm, 1e-6 * std::abs(lm));
  ASSERT_EQ(g_zero.size(), g_mask.size());
  float gmax = 0;
  for (float g : g_mask) gmax = std::max(gmax, std::abs(g));
  for (size_t i = 0; i < g_mask.size(); ++i) ASSERT_NEAR(g_zero[i], g_mask[i], 1e-5f * gmax) << i;
  const std::vector<float> twos(B * T, 2.0f);
  EXPECT_DOUBLE_EQ(run(batch.targets, &twos, g_two), 2 * plain);
  for (size_t i = 0; i < g_two.size(); i += 97) EXPECT_NEAR(g_two[i], 2 * g_plain[i], 1e-6 * std::abs(g_plain[i]) + 1e-12);
}

// Rows without a target are left out of the LM head (output_layer.h): with
// most of a batch masked in spans (prompts and padding, as in fine-tuning
// and RL) over more rows than one logits chunk, loss and gradients equal the
// unpacked run that weights those rows 0.
TEST(Inference, RowsWithoutTargetsSkipTheHead) {
  for (const char* preset : {"gpt2-tiny", "llama-tiny"}) {
    const ModelConfig c = small(preset);
    const int64_t B = 4, T = 96;
    const Batch batch = random_batch(B * T, c.vocab_size, 11);
    std::vector<int32_t> masked = batch.targets;
    std::vector<float> weight(B * T, 1.0f);
    for (int64_t b = 0; b < B; ++b)  // a prompt of 30 + 5b tokens, a reply of 20, padding
      for (int64_t t = 0; t < T; ++t)
        if (t < 30 + 5 * b || t >= 50 + 5 * b) masked[b * T + t] = -1, weight[b * T + t] = 0.0f;
    std::vector<float> g_packed, g_weighted;
    const double packed = loss_and_grads(c, B, T, batch.tokens, masked, nullptr, g_packed);
    const double weighted = loss_and_grads(c, B, T, batch.tokens, batch.targets, &weight, g_weighted);
    EXPECT_NEAR(packed, weighted, 1e-6 * std::abs(weighted)) << preset;
    EXPECT_LT(max_rel(g_packed.data(), g_weighted.data(), static_cast<int64_t>(g_packed.size())), 1e-5) << preset;
  }
}

}  // namespace
}  // namespace claw::model
