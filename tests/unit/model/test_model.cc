#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "claw/core/error.h"
#include "claw/core/philox.h"
#include "claw/model/config.h"
#include "claw/model/attention.h"
#include "claw/model/gpt.h"
#include "expect_error.h"
#include "random_batch.h"

namespace claw::model {
namespace {

const CpuCtx ctx{2};

// `edit` on `preset` makes validate() throw an error that contains `want`.
template <typename Edit>
void expect_refused(const char* preset, Edit edit, const std::string& want) {
  ModelConfig c = model_preset(preset);
  edit(c);
  try {
    c.validate();
    ADD_FAILURE() << "no error for " << want;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
  }
}

// Published parameter counts: GPT-2 small 124,439,808 (HF, vocab 50257)
// plus 47 padding rows of 768; Llama-3-8B 8,030,261,248.
TEST(ModelConfig, ParameterCountsMatchPublishedModels) {
  EXPECT_EQ(model_preset("gpt2-124m").num_params(), 124439808 + 47 * 768);
  EXPECT_EQ(model_preset("llama3-8b").num_params(), 8030261248);
  ModelConfig c = model_preset("gpt2-tiny");
  GPT m(c);
  EXPECT_EQ(m.store().numel(), c.num_params());
  ModelConfig l = model_preset("llama-tiny");
  GPT ml(l);
  EXPECT_EQ(ml.store().numel(), l.num_params());
}

// Mixtral 8x7B: 46,702,792,704 parameters (Hugging Face's count), of which
// a token runs 2 of 8 experts per layer. The MoE presets' models hold what
// num_params says (router, experts stacked, expert bias, shared expert).
TEST(ModelConfig, MoeParameterCounts) {
  const ModelConfig mixtral = model_preset("mixtral-8x7b");
  EXPECT_EQ(mixtral.num_params(), 46702792704);
  const int64_t expert = 3 * 4096 * 14336;
  EXPECT_EQ(mixtral.moe_ffn_params(false) - mixtral.moe_ffn_params(true), 6 * expert);
  for (const char* name : {"mixtral-tiny", "deepseek-tiny"}) {
    const ModelConfig c = model_preset(name);
    GPT m(c);
    EXPECT_EQ(m.store().numel(), c.num_params()) << name;
  }
  const ModelConfig d = model_preset("deepseek-tiny");
  EXPECT_FALSE(d.moe.is_moe_layer(0, 4));
  EXPECT_TRUE(d.moe.is_moe_layer(3, 4));
  ModelConfig every2 = model_preset("mixtral-tiny");
  every2.moe.layer_freq = "2";
  EXPECT_EQ(every2.moe.num_moe_layers(4), 2);
  EXPECT_TRUE(every2.moe.is_moe_layer(2, 4));
}

// DeepSeek-V3: 671B parameters of which 37B run per token (DeepSeek-AI
// 2024, without the multi-token-prediction module); a small model with the
// same options holds what num_params says (latent projections and norms,
// grouped router, shared expert).
TEST(ModelConfig, LatentAttentionParameterCounts) {
  const ModelConfig v3 = model_preset("deepseek-v3");
  v3.validate();
  EXPECT_EQ(v3.num_params(), 671026419200);
  const int64_t active =
      v3.num_params() - v3.moe.num_moe_layers(v3.num_layers) * (v3.moe_ffn_params(false) - v3.moe_ffn_params(true));
  EXPECT_EQ(active / 1000000000, 37);
  ModelConfig c = model_preset("deepseek-tiny");
  c.num_query_groups = 0;
  c.mla = {.enabled = true, .q_lora_rank = 24, .kv_lora_rank = 16, .qk_head_dim = 16, .qk_pos_emb_head_dim = 8,
           .v_head_dim = 12};
  c.moe.router_num_groups = 4;
  c.moe.router_group_topk = 2;
  for (const int64_t q_rank : {24, 0}) {
    c.mla.q_lora_rank = q_rank;
    GPT m(c);
    EXPECT_EQ(m.store().numel(), c.num_params()) << "q_lora_rank " << q_rank;
  }
}

TEST(ModelConfig, LatentAttentionFlagsAreValidated) {
  const auto refused = [](auto edit, const std::string& want) { expect_refused("deepseek-v3", edit, want); };
  refused([](ModelConfig& c) { c.mla.v_head_dim = 256; }, "--v-head-dim 256 is wider than a query/key head");
  refused([](ModelConfig& c) { c.mla.qk_pos_emb_head_dim = 7; }, "--qk-pos-emb-head-dim 7: RoPE needs an even");
  refused([](ModelConfig& c) { c.num_query_groups = 8; }, "does not combine with --num-query-groups");
  refused([](ModelConfig& c) { c.qk_layernorm = true; }, "does not combine with --qk-layernorm");
  refused([](ModelConfig& c) { c.mla.enabled = false; }, "--rotary-interleaved turns MLA's rotated dimensions");
  refused([](ModelConfig& c) { c.moe.router_num_groups = 7; }, "--moe-router-num-groups 7 must divide --num-experts 256");
  refused([](ModelConfig& c) { c.moe.router_group_topk = 9; }, "--moe-router-group-topk 9 must be in [1");
  refused([](ModelConfig& c) { c.moe.router_topk_scaling_factor = 0; }, "--moe-router-topk-scaling-factor");
}

// LongRoPE (Phi-3.5): a factor per rotated pair divides its frequency, short
// or long; cos and sin times sqrt(1 + ln f / ln original), f = 131072 / 4096.
TEST(ModelConfig, LongRopeFactors) {
  ModelConfig c = model_preset("phi-3-mini");
  c.max_position_embeddings = 131072;
  c.rope_scaling = {.type = "longrope", .factor = 32.0, .original_max_position_embeddings = 4096};
  c.rope_scaling.short_factor.assign(48, 1.0);
  c.rope_scaling.long_factor.assign(48, 2.0);
  c.rope_scaling.long_factor[47] = 64.0;
  c.validate();
  const std::vector<float> s = rope_inv_freqs(c), l = rope_inv_freqs(c, true);
  EXPECT_FLOAT_EQ(s[0], 1.0f);
  EXPECT_FLOAT_EQ(l[0], 0.5f);
  EXPECT_NEAR(l[47] * 64.0f / s[47], 1.0f, 1e-6);
  EXPECT_DOUBLE_EQ(c.rope_scaling.table_scale(), std::sqrt(1 + std::log(32.0) / std::log(4096.0)));
  c.rope_scaling.long_factor.pop_back();
  EXPECT_CLAW_ERROR(c.validate(), "--rope-scaling-long-factor lists 47 factors", "(48)");
}

TEST(ModelConfig, MoeFlagsAreValidated) {
  const auto refused = [](auto edit, const std::string& want) { expect_refused("mixtral-tiny", edit, want); };
  refused([](ModelConfig& c) { c.moe.router_topk = 9; }, "--moe-router-topk 9 must be in [1, --num-experts 8]");
  refused([](ModelConfig& c) { c.moe.router_score_function = "relu"; }, "--moe-router-score-function relu");
  refused([](ModelConfig& c) { c.moe.token_drop_policy = "random"; }, "--moe-token-drop-policy random");
  refused([](ModelConfig& c) { c.moe.layer_freq = "1,0"; }, "--moe-layer-freq lists 2 layers but --num-layers is 4");
  refused([](ModelConfig& c) { c.moe.layer_freq = "0,0,0,0"; }, "puts experts in none of the 4 layers");
  refused([](ModelConfig& c) { c.moe.layer_freq = "x"; }, "--moe-layer-freq 'x'");
  refused([](ModelConfig& c) { c.moe.expert_capacity_factor = -1; }, "--moe-expert-capacity-factor must be >= 0");
}

TEST(ModelConfig, FlopsPerTokenFollowsPaLM) {
  ModelConfig c = model_preset("gpt2-124m");
  // N in matmuls: everything but the two lookup tables, plus the tied LM head.
  int64_t n = c.num_params() - 1024 * 768;
  EXPECT_EQ(c.num_matmul_params(), n);
  EXPECT_DOUBLE_EQ(c.flops_per_token(256), 6.0 * n + 12.0 * 12 * 12 * 64 * 256);
}

// RoPE scaling's inverse frequencies: linear divides every one by the
// factor; llama3 (Llama 3.1: factor 8, low 1, high 4, original 8192, as its
// config.json has them) keeps wavelengths under 8192 / 4, stretches those
// over 8192 / 1 by 8, and interpolates between on (8192 / wavelength - 1) / 3.
TEST(ModelConfig, RopeScalingFrequencies) {
  ModelConfig c = model_preset("llama3-8b");
  const std::vector<float> plain = rope_inv_freqs(c);
  ASSERT_EQ(plain.size(), 64u);
  c.rope_scaling = {.type = "linear", .factor = 4.0};
  std::vector<float> got = rope_inv_freqs(c);
  for (size_t i = 0; i < plain.size(); ++i) EXPECT_EQ(got[i], plain[i] / 4.0f) << i;
  c.rope_scaling = {.type = "llama3", .factor = 8.0, .low_freq_factor = 1.0, .high_freq_factor = 4.0,
                    .original_max_position_embeddings = 8192};
  got = rope_inv_freqs(c);
  int kept = 0, stretched = 0, between = 0;
  for (size_t i = 0; i < plain.size(); ++i) {
    const double f = plain[i], wavelen = 2 * M_PI / f;
    double want = f;
    if (wavelen > 8192) {
      want = f / 8, ++stretched;
    } else if (wavelen >= 2048) {
      const double s = (8192 / wavelen - 1) / 3;
      want = (1 - s) * f / 8 + s * f, ++between;
    } else {
      ++kept;
    }
    EXPECT_NEAR(got[i], want, 1e-6 * want) << i;
  }
  EXPECT_GT(kept, 0);
  EXPECT_GT(stretched, 0);
  EXPECT_GT(between, 0);
  // YaRN's cos/sin factor: 0.1 ln(factor) + 1 unless given.
  c.rope_scaling = {.type = "yarn", .factor = 4.0, .original_max_position_embeddings = 64};
  c.validate();
  EXPECT_DOUBLE_EQ(c.rope_scaling.table_scale(), 0.1 * std::log(4.0) + 1.0);
  c.rope_scaling.attention_factor = 1.5;
  EXPECT_DOUBLE_EQ(c.rope_scaling.table_scale(), 1.5);
  c.rope_scaling.type = "dynamic";
  EXPECT_CLAW_ERROR(c.validate(), "--rope-scaling-type 'dynamic'", "longrope");
}

// Gemma 2's final-logit soft-cap: the logits a model writes are c tanh(z / c)
// of the uncapped model's (same weights), and its loss is their
// cross-entropy. (Attention's cap: kernels' SoftCap tests; the whole model's
// gradients against transformers: parity_hf_family_gemma2.)
TEST(ModelConfig, FinalLogitSoftCapBoundsLogitsAndLoss) {
  EXPECT_EQ(model_preset("gemma-2-9b").final_logit_softcapping, 30.0);
  ModelConfig c = model_preset("llama-tiny");
  c.num_layers = 1;
  c.vocab_size = 100;
  c.make_vocab_size_divisible_by = 1;
  c.init_method_std = 0.5;  // logits of several units: the cap of 2 bends them
  ModelConfig capped = c;
  capped.final_logit_softcapping = 2;
  capped.validate();
  GPT plain(c), cap(capped);
  plain.init_weights(ctx, 1);
  cap.init_weights(ctx, 1);
  std::vector<int32_t> tokens = {1, 5, 9, 2, 7, 3, 8, 4}, targets = {5, 9, 2, 7, 3, 8, 4, 6};
  std::vector<float> z(8 * 100), zc(8 * 100);
  double loss = 0, worst = 0;
  for (GPT* m : {&plain, &cap}) {
    m->reserve(1, 8);
    const StepCtx step{.cpu = ctx, .B = 1, .T = 8};
    const double l = m->forward(step, tokens.data(), targets.data(), 0.0);
    m->logits(step, m == &plain ? z.data() : zc.data());
    if (m == &cap) loss = l;
  }
  double want = 0, big = 0;
  for (int64_t t = 0; t < 8; ++t) {
    double mx = -1e30, sum = 0;
    for (int64_t v = 0; v < 100; ++v) {
      const double capped_z = 2.0 * std::tanh(z[t * 100 + v] / 2.0);
      worst = std::max(worst, std::abs(capped_z - zc[t * 100 + v]));
      big = std::max(big, std::abs(static_cast<double>(z[t * 100 + v])));
      mx = std::max(mx, capped_z);
    }
    for (int64_t v = 0; v < 100; ++v) sum += std::exp(2.0 * std::tanh(z[t * 100 + v] / 2.0) - mx);
    want += mx + std::log(sum) - 2.0 * std::tanh(z[t * 100 + targets[t]] / 2.0);
  }
  EXPECT_GT(big, 3.0);  // the cap matters
  EXPECT_LT(worst, 1e-6);
  EXPECT_NEAR(loss, want, 1e-5 * want);
}

TEST(ModelConfig, ValidateNamesTheFlag) {
  ModelConfig c = model_preset("gpt2-tiny");
  c.hidden_size = 250;
  try {
    c.validate();
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--hidden-size 250 is not divisible by --num-attention-heads 4"),
              std::string::npos);
  }
  c = model_preset("llama-tiny");
  c.num_query_groups = 3;
  EXPECT_THROW(c.validate(), Error);
  EXPECT_THROW(model_preset("gpt-7"), Error);
}

TEST(ModelConfig, EveryPresetValidates) {
  for (const auto& name : preset_names()) EXPECT_NO_THROW(model_preset(name).validate()) << name;
}

TEST(Model, HuggingFaceNames) {
  GPT g(model_preset("gpt2-tiny"));
  const Param* q = g.store().find("layers.1.attention.k_proj.weight");
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->spec.hf.name, "transformer.h.1.attn.c_attn.weight");
  EXPECT_TRUE(q->spec.hf.transpose);
  EXPECT_EQ(q->spec.hf.begin, 256);
  EXPECT_EQ(q->spec.hf.end, 512);
  EXPECT_EQ(g.store().find("embedding.word_embeddings.weight")->spec.hf.rows, 50257);
  GPT l(model_preset("llama-tiny"));
  EXPECT_EQ(l.store().find("layers.0.mlp.gate_proj.weight")->spec.hf.name, "model.layers.0.mlp.gate_proj.weight");
  EXPECT_EQ(l.store().find("output_layer.weight")->spec.hf.name, "lm_head.weight");
  EXPECT_FALSE(l.store().find("layers.0.input_norm.weight")->spec.weight_decay);
  EXPECT_TRUE(l.store().find("layers.0.attention.o_proj.weight")->spec.weight_decay);
}

// The activation arena is exactly the planned size, so the printed memory
// plan is what is allocated.
TEST(Model, ActivationArenaIsThePlan) {
  ModelConfig c = model_preset("llama-tiny");
  GPT m(c);
  m.reserve(2, 32);
  EXPECT_EQ(m.activation_bytes(), plan_activations(c, 2, 32).total());
}


std::vector<float> grads_of(GPT& m) {
  return std::vector<float>(m.store().grads(), m.store().grads() + m.store().grad_total());
}

// Frozen parameters get no gradient, and skipping their weight-gradient work
// changes nothing else: the input gradients still flow through them, so every
// trainable parameter's gradient is bitwise the unfrozen model's (the same
// additions in the same order), for GPT-2 (tied embeddings, biases,
// LayerNorm) and Llama (RMSNorm, SwiGLU, untied head).
TEST(Model, FrozenParametersGetNoGradientAndChangeNoOther) {
  for (const char* preset : {"gpt2-tiny", "llama-tiny"}) {
    ModelConfig c = model_preset(preset);
    c.num_layers = 3;
    const int64_t B = 2, T = 16;
    Batch b = random_batch(B * T, c.vocab_size, 3);
    // Whole layers and parts: a frozen weight with a trainable bias and the
    // converse (GPT-2's biases), a frozen norm weight beside its trainable bias.
    const std::vector<std::string> freeze = {"embedding.*",          "layers.0.*",
                                             "layers.1.attention.*", "layers.2.attention.*.weight",
                                             "layers.2.input_norm.weight", "layers.2.mlp.*.bias",
                                             "final_norm.*"};
    GPT all(c), part(c, {.freeze = freeze});
    for (GPT* m : {&all, &part}) {
      m->init_weights(ctx, 5);
      m->reserve(B, T);
      m->store().zero_grads();
      StepCtx s{.cpu = ctx, .B = B, .T = T, .training = true};
      m->forward(s, b.tokens.data(), b.targets.data(), 1.0 / (B * T));
      m->backward(s, b.tokens.data());
    }
    int frozen = 0;
    for (size_t k = 0; k < part.store().params().size(); ++k) {
      const Param* p = part.store().params()[k];
      const Param* q = all.store().params()[k];
      ASSERT_EQ(p->spec.name, q->spec.name);
      EXPECT_EQ(p->spec.trainable, !matches_any(freeze, p->spec.name)) << p->spec.name;
      if (!p->spec.trainable) {
        EXPECT_FALSE(p->grad.defined()) << p->spec.name;
        ++frozen;
        continue;
      }
      const int64_t n = p->spec.local_shape().numel();
      EXPECT_TRUE(std::equal(p->gdata(), p->gdata() + n, q->gdata())) << preset << ": " << p->spec.name;
    }
    EXPECT_GT(frozen, 10) << preset;
    EXPECT_EQ(part.store().grad_bytes() + part.store().frozen_numel() * sizeof(float), all.store().grad_bytes())
        << "every frozen tensor here is a multiple of 16 floats";
  }
}

// A model with LoRA adapters (B made non-zero) against the plain model whose
// weights are the merged W' = W + s B A: the same loss, and the adapters'
// gradients are the chain rule through W', dA = s B^T G and dB = s G A^T
// with G = dL/dW' (every layer's G depends on the input gradients the
// adapters of the layers above passed down). Only the adapters train.
// GPT-2's q, k and v share one A (PEFT's adapter on the fused c_attn):
// its gradient is the sum of the three layers' s B^T G.
namespace {
// The A an adapted weight reads: its own, or GPT-2's shared linear_qkv one.
const Param* lora_a_of(const GPT& m, const std::string& stem) {
  if (const Param* a = m.store().find(stem + ".lora_A.weight")) return a;
  for (const char* part : {".q_proj", ".k_proj", ".v_proj"})
    if (stem.ends_with(part) && m.store().find(stem + ".lora_B.weight"))
      return m.store().find(stem.substr(0, stem.size() - 7) + ".linear_qkv.lora_A.weight");
  return nullptr;
}

// Every B of m's adapters N(0, 0.05^2): B = 0 would make G A^T the whole test.
void randomize_lora_b(GPT& m) {
  for (Param* p : m.store().params())
    if (p->spec.name.ends_with(".lora_B.weight")) {
      const RandomStream rng(3, hash_name(p->spec.name));
      for (int64_t i = 0; i < p->spec.shape.numel(); ++i) p->data()[i] = 0.05f * rng.normal(static_cast<uint64_t>(i));
    }
}

// c with rank-4 adapters (alpha 8) on every linear layer, and the adapted
// model beside the plain one: both initialised from seed 5, the B matrices
// random (randomize_lora_b).
struct LoraPair {
  ModelConfig cl;
  GPT lora, plain;
  static ModelConfig with_lora(ModelConfig c) {
    c.lora = {.rank = 4, .alpha = 8.0, .target_modules = {"all-linear"}};
    return c;
  }
  explicit LoraPair(const ModelConfig& c) : cl(with_lora(c)), lora(cl), plain(c) {
    lora.init_weights(ctx, 5);
    plain.init_weights(ctx, 5);
    randomize_lora_b(lora);
  }
};

// One training forward and backward of m on b (gradients zeroed first); the loss.
double forward_backward(GPT& m, const Batch& b, int64_t B, int64_t T) {
  m.reserve(B, T);
  m.store().zero_grads();
  StepCtx st{.cpu = ctx, .B = B, .T = T, .training = true};
  const double loss = m.forward(st, b.tokens.data(), b.targets.data(), 1.0 / (B * T));
  m.backward(st, b.tokens.data());
  return loss;
}
}  // namespace

TEST(Model, LoraGradientsAreTheMergedWeightsChainRule) {
  for (const char* preset : {"gpt2-tiny", "llama-tiny"}) {
    ModelConfig c = model_preset(preset);
    c.num_layers = 2;
    const int64_t B = 2, T = 16;
    Batch b = random_batch(B * T, c.vocab_size, 7);
    LoraPair pair(c);
    GPT &lora = pair.lora, &plain = pair.plain;
    const double s = pair.cl.lora.scale();
    int adapted = 0;
    for (Param* p : lora.store().params()) EXPECT_EQ(p->spec.trainable, is_lora_param(p->spec.name)) << p->spec.name;
    for (Param* p : plain.store().params()) {
      const Param* q = lora.store().find(p->spec.name);
      ASSERT_NE(q, nullptr) << p->spec.name;
      std::copy_n(q->data(), p->spec.shape.numel(), p->data());
      const std::string stem = p->spec.name.substr(0, p->spec.name.size() - std::string(".weight").size());
      const Param* a = lora_a_of(lora, stem);
      if (!a) continue;
      const Param* bb = lora.store().find(stem + ".lora_B.weight");
      const int64_t out = p->spec.shape[0], in = p->spec.shape[1], r = a->spec.shape[0];
      for (int64_t o = 0; o < out; ++o)
        for (int64_t i = 0; i < in; ++i) {
          double acc = 0;
          for (int64_t k = 0; k < r; ++k) acc += double(bb->data()[o * r + k]) * a->data()[k * in + i];
          p->data()[o * in + i] += static_cast<float>(s * acc);
        }
      ++adapted;
    }
    EXPECT_EQ(adapted, c.mlp == Mlp::swiglu ? 2 * 7 : 2 * 6) << "all-linear: q k v o and the MLP's";
    const double loss[2] = {forward_backward(lora, b, B, T), forward_backward(plain, b, B, T)};
    EXPECT_NEAR(loss[0], loss[1], 1e-5 * std::abs(loss[1])) << preset;
    // Expected gradients, accumulated over the layers that read each A.
    std::map<const Param*, std::vector<double>> want_a;
    for (const Param* w : plain.store().params()) {
      const std::string stem = w->spec.name.substr(0, w->spec.name.size() - std::string(".weight").size());
      const Param* a = lora_a_of(lora, stem);
      if (!a) continue;
      const Param* bb = lora.store().find(stem + ".lora_B.weight");
      const int64_t out = w->spec.shape[0], in = w->spec.shape[1], r = a->spec.shape[0];
      const float* G = w->gdata();
      std::vector<double>& da = want_a[a];
      da.resize(static_cast<size_t>(r * in));
      for (int64_t k = 0; k < r; ++k)
        for (int64_t i = 0; i < in; ++i) {  // dA[k, i] = s sum_o B[o, k] G[o, i]
          double want = 0;
          for (int64_t o = 0; o < out; ++o) want += double(bb->data()[o * r + k]) * G[o * in + i];
          da[k * in + i] += s * want;
        }
      double worst = 0, scale = 0;
      for (int64_t o = 0; o < out; ++o)
        for (int64_t k = 0; k < r; ++k) {  // dB[o, k] = s sum_i G[o, i] A[k, i]
          double want = 0;
          for (int64_t i = 0; i < in; ++i) want += double(G[o * in + i]) * a->data()[k * in + i];
          want *= s;
          worst = std::max(worst, std::abs(want - bb->gdata()[o * r + k]));
          scale = std::max(scale, std::abs(want));
        }
      EXPECT_GT(scale, 0) << w->spec.name;
      EXPECT_LT(worst, 2e-4 * scale) << preset << ": " << stem << " B";
    }
    EXPECT_EQ(want_a.size(), c.mlp == Mlp::swiglu ? 2u * 7 : 2u * 4) << "GPT-2: one A for q, k, v";
    for (const auto& [a, da] : want_a) {
      double worst = 0, scale = 0;
      for (size_t i = 0; i < da.size(); ++i) {
        worst = std::max(worst, std::abs(da[i] - a->gdata()[i]));
        scale = std::max(scale, std::abs(da[i]));
      }
      EXPECT_GT(scale, 0) << a->spec.name;
      EXPECT_LT(worst, 2e-4 * scale) << preset << ": " << a->spec.name;
    }
  }
}

// The experts' stacked adapters (and the shared expert's): the loss of the
// model with W_e + s B_e A_e folded in, and per expert dA_e = s B_e^T G_e,
// dB_e = s G_e A_e^T from that model's weight gradients G_e; merge_lora
// folds them into the weights so that the plain forward gives the same loss.
TEST(Model, LoraOnExpertsIsTheMergedWeightsChainRule) {
  ModelConfig c = model_preset("llama-tiny");
  c.num_layers = 2;
  c.moe = {.num_experts = 4, .router_topk = 2, .ffn_hidden_size = 64, .shared_expert_intermediate_size = 64,
           .layer_freq = "0,1"};
  const int64_t B = 2, T = 16;
  Batch b = random_batch(B * T, c.vocab_size, 7);
  LoraPair pair(c);
  GPT &lora = pair.lora, &plain = pair.plain;
  const double s = pair.cl.lora.scale();
  // The merged weights, per expert (E = 1 for a plain matrix).
  struct Adapted {
    Param* w;
    const Param *a, *b;
    int64_t E, out, in, r;
  };
  std::vector<Adapted> adapted;
  for (Param* p : plain.store().params()) {
    const Param* q = lora.store().find(p->spec.name);
    ASSERT_NE(q, nullptr) << p->spec.name;
    std::copy_n(q->data(), p->spec.shape.numel(), p->data());
    const std::string stem = p->spec.name.substr(0, p->spec.name.size() - std::string(".weight").size());
    const Param *a = lora.store().find(stem + ".lora_A.weight"), *bb = lora.store().find(stem + ".lora_B.weight");
    if (!a) continue;
    const bool stacked = p->spec.shape.ndim() == 3;
    Adapted d{p, a, bb, stacked ? p->spec.shape[0] : 1, p->spec.shape[stacked ? 1 : 0], p->spec.shape[stacked ? 2 : 1],
              a->spec.shape[stacked ? 1 : 0]};
    for (int64_t e = 0; e < d.E; ++e)
      for (int64_t o = 0; o < d.out; ++o)
        for (int64_t i = 0; i < d.in; ++i) {
          double acc = 0;
          for (int64_t k = 0; k < d.r; ++k)
            acc += double(bb->data()[(e * d.out + o) * d.r + k]) * a->data()[(e * d.r + k) * d.in + i];
          p->data()[(e * d.out + o) * d.in + i] += static_cast<float>(s * acc);
        }
    adapted.push_back(d);
  }
  // q k v o in both layers, layer 0's MLP, layer 1's experts (gate, up, down) and shared expert.
  EXPECT_EQ(adapted.size(), 2u * 4 + 3 + 3 + 3);
  const double loss[2] = {forward_backward(lora, b, B, T), forward_backward(plain, b, B, T)};
  EXPECT_NEAR(loss[0], loss[1], 1e-5 * std::abs(loss[1]));
  for (const Adapted& d : adapted) {
    const float* G = d.w->gdata();
    double worst_a = 0, scale_a = 0, worst_b = 0, scale_b = 0;
    for (int64_t e = 0; e < d.E; ++e) {
      const float* Ge = G + e * d.out * d.in;
      const float *Ae = d.a->data() + e * d.r * d.in, *Be = d.b->data() + e * d.out * d.r;
      for (int64_t k = 0; k < d.r; ++k)
        for (int64_t i = 0; i < d.in; ++i) {  // dA[k, i] = s sum_o B[o, k] G[o, i]
          double want = 0;
          for (int64_t o = 0; o < d.out; ++o) want += double(Be[o * d.r + k]) * Ge[o * d.in + i];
          want *= s;
          worst_a = std::max(worst_a, std::abs(want - d.a->gdata()[(e * d.r + k) * d.in + i]));
          scale_a = std::max(scale_a, std::abs(want));
        }
      for (int64_t o = 0; o < d.out; ++o)
        for (int64_t k = 0; k < d.r; ++k) {  // dB[o, k] = s sum_i G[o, i] A[k, i]
          double want = 0;
          for (int64_t i = 0; i < d.in; ++i) want += double(Ge[o * d.in + i]) * Ae[k * d.in + i];
          want *= s;
          worst_b = std::max(worst_b, std::abs(want - d.b->gdata()[(e * d.out + o) * d.r + k]));
          scale_b = std::max(scale_b, std::abs(want));
        }
    }
    EXPECT_GT(scale_a, 0) << d.w->spec.name;
    EXPECT_LT(worst_a, 2e-4 * scale_a) << d.w->spec.name << " A";
    EXPECT_LT(worst_b, 2e-4 * scale_b) << d.w->spec.name << " B";
  }
  // Generation's fold: the adapters merged into the weights give the plain model's loss.
  lora.merge_lora(ctx);
  StepCtx st{.cpu = ctx, .B = B, .T = T};
  EXPECT_NEAR(lora.forward(st, b.tokens.data(), b.targets.data(), 1.0 / (B * T)), loss[1], 1e-5 * std::abs(loss[1]));
}

// --lora-modules-to-save: the named base parameters train beside the
// adapters (and get gradients); every other base parameter stays frozen.
TEST(Model, LoraModulesToSaveTrainBesideTheAdapters) {
  ModelConfig c = model_preset("gpt2-tiny");
  c.num_layers = 2;
  c.lora = {.rank = 4, .target_modules = {"linear_qkv"}, .modules_to_save = {"embedding.*", "final_norm.weight"}};
  GPT m(c);
  int saved = 0;
  for (const Param* p : m.store().params()) {
    const bool want = is_lora_param(p->spec.name) || p->spec.name.starts_with("embedding.") ||
                      p->spec.name == "final_norm.weight";
    EXPECT_EQ(p->spec.trainable, want) << p->spec.name;
    EXPECT_EQ(p->grad.defined(), want) << p->spec.name;
    saved += want && !is_lora_param(p->spec.name);
  }
  EXPECT_EQ(saved, 3) << "word and position embeddings, final norm weight";
}

// One micro-batch of 4 sequences and two of 2 give the same gradients (up to
// summation order), which is what gradient accumulation promises.
TEST(Model, GradientAccumulationEqualsOneBigBatch) {
  ModelConfig c = model_preset("llama-tiny");
  c.num_layers = 2;
  const int64_t T = 16;
  Batch b = random_batch(4 * T, c.vocab_size, 1);
  GPT m(c);
  m.init_weights(ctx, 5);
  m.reserve(4, T);
  m.store().zero_grads();
  StepCtx s{.cpu = ctx, .B = 4, .T = T, .training = true};
  double l1 = m.forward(s, b.tokens.data(), b.targets.data(), 1.0 / (4 * T));
  m.backward(s, b.tokens.data());
  auto g1 = grads_of(m);

  m.reserve(2, T);
  m.store().zero_grads();
  StepCtx s2{.cpu = ctx, .B = 2, .T = T, .training = true};
  double l2 = 0;
  for (int k = 0; k < 2; ++k) {
    l2 += m.forward(s2, b.tokens.data() + k * 2 * T, b.targets.data() + k * 2 * T, 1.0 / (4 * T));
    m.backward(s2, b.tokens.data() + k * 2 * T);
  }
  auto g2 = grads_of(m);
  EXPECT_NEAR(l1, l2, 1e-6 * std::abs(l1));
  double gmax = 0, dmax = 0;
  for (size_t i = 0; i < g1.size(); ++i) {
    gmax = std::max(gmax, double(std::abs(g1[i])));
    dmax = std::max(dmax, double(std::abs(g1[i] - g2[i])));
  }
  EXPECT_LT(dmax, 1e-5 * gmax);  // fp32 summation-order differences only
}

// DeepSeek-V3's latent attention in an RL learner's batch-invariant forward:
// its loss is the absorbed form's (the generator's) to the bit, and its
// gradients, taken through the expanded form's saved tensors, equal the
// plain training step's (the two forms differ by rounding).
TEST(Model, LatentAttentionLearnerScoresAsTheGenerator) {
  ModelConfig c = model_preset("deepseek-tiny");
  c.num_layers = 2;
  c.num_query_groups = 0;
  c.moe.layer_freq = "0,1";
  c.mla = {.enabled = true, .q_lora_rank = 48, .kv_lora_rank = 32, .qk_head_dim = 32, .qk_pos_emb_head_dim = 16,
           .v_head_dim = 24};
  c.rotary_interleaved = true;
  const int64_t B = 2, T = 16;
  Batch b = random_batch(B * T, c.vocab_size, 3);
  GPT m(c);
  m.init_weights(ctx, 8);
  m.reserve(B, T);
  const auto run = [&](bool training, bool invariant, std::vector<float>* grads) {
    m.store().zero_grads();
    StepCtx s{.cpu = ctx, .B = B, .T = T, .training = training};
    s.batch_invariant = invariant;
    const double loss = m.forward(s, b.tokens.data(), b.targets.data(), 1.0 / (B * T));
    if (grads) {
      m.backward(s, b.tokens.data());
      *grads = grads_of(m);
    }
    return loss;
  };
  std::vector<float> plain, learner;
  const double l_learner = run(true, true, &learner);  // first: nothing of a plain step's left in the arena
  const double l_plain = run(true, false, &plain);
  const double l_generator = run(false, true, nullptr);
  EXPECT_EQ(l_learner, l_generator);
  EXPECT_NEAR(l_learner, l_plain, 1e-5 * std::abs(l_plain));
  double gmax = 0, dmax = 0;
  for (size_t i = 0; i < plain.size(); ++i) {
    gmax = std::max(gmax, double(std::abs(plain[i])));
    dmax = std::max(dmax, double(std::abs(plain[i] - learner[i])));
  }
  EXPECT_LT(dmax, 1e-4 * gmax);
}

// Full recompute re-runs the same forward (same dropout masks) before each
// block's backward: the gradients are bitwise those of the stored run, and
// the arena shrinks.
TEST(Model, RecomputeGivesTheSameGradients) {
  ModelConfig c = model_preset("gpt2-tiny");
  c.num_layers = 3;
  c.hidden_dropout = 0.1;
  const int64_t B = 2, T = 16;
  Batch b = random_batch(B * T, c.vocab_size, 4);
  GPT m(c);
  m.init_weights(ctx, 6);
  std::vector<std::vector<float>> grads;
  for (int64_t r : {0, 2, 3}) {
    m.reserve(B, T, Recompute{r});
    m.store().zero_grads();
    StepCtx s{.cpu = ctx, .B = B, .T = T, .training = true, .seed = 3, .sample0 = 5};
    m.forward(s, b.tokens.data(), b.targets.data(), 1.0 / (B * T));
    m.backward(s, b.tokens.data());
    grads.push_back(grads_of(m));
  }
  EXPECT_EQ(grads[0], grads[1]);
  EXPECT_EQ(grads[0], grads[2]);
  EXPECT_LT(plan_activations(c, B, T, Recompute{3}).total(), plan_activations(c, B, T).total());
}

// Hidden dropout: deterministic for a seed and a sample index, different
// for another sample index, and off outside training.
TEST(Model, DropoutIsDeterministicPerSample) {
  ModelConfig c = model_preset("gpt2-tiny");
  c.num_layers = 1;
  c.hidden_dropout = 0.1;
  const int64_t T = 16;
  Batch b = random_batch(2 * T, c.vocab_size, 2);
  GPT m(c);
  m.init_weights(ctx, 3);
  m.reserve(2, T);
  auto loss = [&](bool training, uint64_t sample0) {
    StepCtx s{.cpu = ctx, .B = 2, .T = T, .training = training, .seed = 9, .sample0 = sample0};
    return m.forward(s, b.tokens.data(), b.targets.data(), 0.0);
  };
  EXPECT_EQ(loss(true, 0), loss(true, 0));
  EXPECT_NE(loss(true, 0), loss(true, 2));
  EXPECT_NE(loss(true, 0), loss(false, 0));
  EXPECT_EQ(loss(false, 0), loss(false, 2));
}

}  // namespace
}  // namespace claw::model
