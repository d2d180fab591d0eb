// The generation engine: the paged cache against the training forward, and
// a request's tokens and log-probabilities bitwise the same alone, among
// other requests, with chunked prefill, after preemption and from the prefix
// cache; blocks all returned at the end, and on cancellation.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <string_view>
#include <vector>

#include "claw/model/config.h"
#include "claw/model/gpt.h"
#include "claw/serve/engine.h"
#include "claw/serve/paged_kv_cache.h"
#include "model/inference_reference.h"

namespace claw::serve {
namespace {

using testing::max_rel;

const CpuCtx ctx{2};

// "deepseek-mla": deepseek-tiny's experts (grouped routing) under DeepSeek-V3's
// latent attention, which the caches run in its absorbed form (model/mla.h).
model::ModelConfig small(const char* preset) {
  const bool mla = std::string_view(preset) == "deepseek-mla";
  model::ModelConfig c = model::model_preset(mla ? "deepseek-tiny" : preset);
  if (mla) {
    c.num_query_groups = 0;
    c.mla = {.enabled = true, .q_lora_rank = 48, .kv_lora_rank = 32, .qk_head_dim = 32, .qk_pos_emb_head_dim = 16,
             .v_head_dim = 24};
    c.rotary_interleaved = true;
    c.moe.layer_freq = "0,1";
    c.moe.router_num_groups = 4;
    c.moe.router_group_topk = 2;
    c.moe.router_topk_scaling_factor = 2.5;
  }
  c.num_layers = 2;
  c.vocab_size = 1000;
  c.hidden_dropout = 0;
  c.max_position_embeddings = 256;
  return c;
}

std::vector<int32_t> random_tokens(int64_t n, int64_t V, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int32_t& x : t) x = static_cast<int32_t>(rng() % V);
  return t;
}

// Two sequences prefilled in chunks of different sizes through scattered
// blocks of 16, then decoded together: every position's logits equal the
// whole-sequence forward's (1e-5 relative; for MLA, the absorbed form's
// against the training forward's expanded heads).
TEST(PagedKvCache, LogitsEqualTheFullForward) {
  for (const char* preset : {"gpt2-tiny", "llama-tiny", "deepseek-mla"}) {
    const model::ModelConfig c = small(preset);
    model::GPT m(c);
    m.init_weights(ctx, 1234);
    const int64_t V = c.vocab_size, bs = 16;
    const std::vector<int32_t> a = random_tokens(70, V, 1), b = random_tokens(41, V, 2);
    const std::vector<float> ra = testing::reference_logits(ctx, m, a, 1, 70),
                             rb = testing::reference_logits(ctx, m, b, 1, 41);
    PagedKvCache cache(c, {}, 16, bs);
    // Blocks handed out out of order, interleaved between the two.
    const std::vector<int32_t> ta = {9, 2, 14, 5, 0}, tb = {3, 11, 7};
    int64_t ca = 0, cb = 0;
    std::vector<float> logits;
    auto run = [&](int64_t na, int64_t nb) {
      std::vector<StepSeq> plan;
      std::vector<int32_t> tokens;
      if (na) {
        plan.push_back({ta.data(), 5, ca, na});
        tokens.insert(tokens.end(), a.begin() + ca, a.begin() + ca + na);
      }
      if (nb) {
        plan.push_back({tb.data(), 3, cb, nb});
        tokens.insert(tokens.end(), b.begin() + cb, b.begin() + cb + nb);
      }
      const int64_t N = na + nb;
      cache.set_step(plan);
      const Tensor h = m.forward_cached({.cpu = ctx, .B = 1, .T = N}, tokens.data(), cache);
      logits.resize(N * V);
      model::StepCtx lc{.cpu = ctx, .B = N, .T = 1};
      lc.batch_invariant = true;
      m.full_logits(lc, h, logits.data());
      for (int64_t i = 0; i < na; ++i)
        ASSERT_LT(max_rel(&logits[i * V], &ra[(ca + i) * V], V), 1e-5) << preset << " a at " << ca + i;
      for (int64_t i = 0; i < nb; ++i)
        ASSERT_LT(max_rel(&logits[(na + i) * V], &rb[(cb + i) * V], V), 1e-5) << preset << " b at " << cb + i;
      ca += na;
      cb += nb;
    };
    run(23, 0);  // a's first chunk alone (crosses a block boundary)
    run(30, 17); // both mid-prefill
    run(17, 24); // a completes its prompt, b finishes prefill
    while (ca < 70) run(1, 0);  // a decodes the rest alone
  }
}

struct Result {
  std::vector<int32_t> tokens;
  std::vector<double> logprobs;
  std::vector<std::vector<TokenLogprob>> top;
  FinishReason finish = FinishReason::none;
  bool operator==(const Result& o) const {
    if (tokens != o.tokens || finish != o.finish || top.size() != o.top.size()) return false;
    // Bitwise, not approximately.
    if (std::memcmp(logprobs.data(), o.logprobs.data(), logprobs.size() * sizeof(double)) != 0) return false;
    for (size_t i = 0; i < top.size(); ++i)
      for (size_t j = 0; j < top[i].size(); ++j)
        if (top[i][j].token != o.top[i][j].token ||
            std::memcmp(&top[i][j].logprob, &o.top[i][j].logprob, sizeof(double)) != 0)
          return false;
    return true;
  }
};

GenerationRequest request(std::vector<int32_t> prompt, SamplingParams p, int64_t max_tokens, Result* out) {
  GenerationRequest r{.prompt = std::move(prompt), .sampling = p, .max_tokens = max_tokens, .top_logprobs = 3};
  r.on_token = [out](const TokenOutput& t) {
    out->tokens.push_back(t.token);
    out->logprobs.push_back(t.logprob);
    out->top.push_back(t.top);
    out->finish = t.finish;
    return true;
  };
  return r;
}

void drain(Engine& e) {
  for (int guard = 0; e.step(); ++guard) ASSERT_LT(guard, 100000) << "the engine does not finish";
}

// The probe request: a seeded sample and a greedy one.
const SamplingParams kSampled{.temperature = 0.9, .top_p = 0.95, .seed = 42};

// A cache block's bytes: keys and values of every layer's cached heads;
// DeepSeek-V3's absorbed latent is one head of 512 + 64, held once as key
// and value (against 128 heads of 192 keys and as many values expanded).
TEST(PagedKvCache, BlockBytesFollowTheCachedHeads) {
  const model::ModelConfig v3 = model::model_preset("deepseek-v3"), llama = model::model_preset("llama3-8b");
  EXPECT_EQ(PagedKvCache::block_bytes(v3, {}, 16, kernels::KvDtype::f32), 61 * 16 * 576 * 4);
  EXPECT_EQ(PagedKvCache::block_bytes(llama, {}, 16, kernels::KvDtype::f32), 2 * 32 * 16 * 8 * 128 * 4);
}

TEST(Engine, RequestIsBitwiseTheSameAloneAndUnderLoad) {
  for (const char* preset : {"gpt2-tiny", "llama-tiny", "deepseek-mla"}) {
    const model::ModelConfig c = small(preset);
    model::GPT m(c);
    m.init_weights(ctx, 99);
    const std::vector<int32_t> probe = random_tokens(37, c.vocab_size, 7);
    for (const SamplingParams& p : {SamplingParams{}, kSampled}) {
      Result alone;
      {
        Engine e(m, ctx, {.num_blocks = 64});
        e.add(request(probe, p, 24, &alone));
        drain(e);
        EXPECT_EQ(e.stats().blocks_used, 0);
      }
      ASSERT_EQ(alone.tokens.size(), 24u);
      EXPECT_EQ(alone.finish, FinishReason::length);

      // Among 15 others of various lengths and parameters, arriving before
      // and after it, with a small step budget (chunked prefill) and, in the
      // second case, too few blocks for everyone (preemption).
      // A third time with blocks of 8 tokens: paging does not change results.
      for (auto [blocks, block_size] : {std::pair<int64_t, int64_t>{200, 16}, {14, 16}, {60, 8}}) {
        Engine e(m, ctx, {.block_size = block_size, .num_blocks = blocks, .max_num_batched_tokens = 29});
        std::vector<Result> others(15);
        Result loaded;
        for (int i = 0; i < 15; ++i) {
          if (i == 6) e.add(request(probe, p, 24, &loaded));
          e.add(request(random_tokens(5 + 9 * i, c.vocab_size, 100 + i),
                        {.temperature = 0.5 + 0.1 * (i % 5), .top_k = i % 3 ? 0 : 20, .seed = uint64_t(i)},
                        8 + 3 * i, &others[i]));
          if (i % 4 == 0) e.step();
        }
        drain(e);
        EXPECT_TRUE(loaded == alone) << preset << " with " << blocks << " blocks of " << block_size;
        for (int i = 0; i < 15; ++i) EXPECT_EQ(others[i].tokens.size(), size_t(8 + 3 * i));
        EXPECT_EQ(e.stats().blocks_used, 0);
        EXPECT_EQ(e.stats().running + e.stats().waiting, 0);
        if (blocks == 14) {
          EXPECT_GT(e.stats().preemptions, 0) << "the small pool was meant to preempt";
        }
      }
    }
  }
}

// Low-precision weights: logits near the fp32 model's (the bounds are
// those of the rounding: bf16's 8 bits, q8_0's 127 steps, q4_0's 8), and a
// request still bitwise the same alone and among others.
TEST(Engine, QuantizedWeightsAreCloseAndBatchInvariant) {
  using kernels::WeightType;
  const model::ModelConfig c = small("llama-tiny");
  const std::vector<int32_t> probe = random_tokens(37, c.vocab_size, 7);
  model::GPT ref(c);
  ref.init_weights(ctx, 5);
  const std::vector<float> want = testing::reference_logits(ctx, ref, probe, 1, 37);
  for (auto [t, tol] : {std::pair{WeightType::bf16, 0.01}, {WeightType::q8_0, 0.04}, {WeightType::q4_0, 0.3}}) {
    model::GPT m(c);
    m.init_weights(ctx, 5);
    const auto w = m.set_inference_weights(ctx, t, nullptr, /*release_fp32=*/true);
    EXPECT_EQ(w.converted, 2 * 7 + 1) << "seven matrices a layer and the output layer";
    EXPECT_EQ(w.kept_f32, 0);
    model::KvCache cache(c, {}, 1, 64);
    const Tensor h = m.forward_cached({.cpu = ctx, .B = 1, .T = 37}, probe.data(), cache);
    std::vector<float> got(37 * c.vocab_size);
    model::StepCtx lc{.cpu = ctx, .B = 37, .T = 1};
    lc.batch_invariant = true;
    m.full_logits(lc, h, got.data());
    // Relative to the logits' spread (random weights give small logits).
    double err = 0, scale = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      err = std::max(err, std::abs(double(got[i]) - want[i]));
      scale = std::max(scale, std::abs(double(want[i])));
    }
    std::printf("%s weights: max |logit - fp32 logit| / max |fp32 logit| = %.4f\n",
                std::string(kernels::weight_type_name(t)).c_str(), err / scale);
    EXPECT_LT(err / scale, tol) << kernels::weight_type_name(t);
    EXPECT_GT(err, 0) << kernels::weight_type_name(t) << " should differ from fp32";

    Result alone, loaded;
    {
      Engine e(m, ctx, {.num_blocks = 64});
      e.add(request(probe, kSampled, 16, &alone));
      drain(e);
    }
    Engine e(m, ctx, {.num_blocks = 40, .max_num_batched_tokens = 29});
    std::vector<Result> others(9);
    for (int i = 0; i < 9; ++i) {
      if (i == 4) e.add(request(probe, kSampled, 16, &loaded));
      e.add(request(random_tokens(5 + 11 * i, c.vocab_size, 200 + i), {.temperature = 0.7, .seed = uint64_t(i)},
                    10 + i, &others[i]));
      if (i % 3 == 0) e.step();
    }
    drain(e);
    EXPECT_TRUE(loaded == alone) << kernels::weight_type_name(t);
  }
}

// Keys and values held in bf16, f16, int8 or q8_0: logits near the fp32 cache's, and a
// request still bitwise the same alone and among others.
TEST(Engine, KvCacheDtypesAreCloseAndBatchInvariant) {
  const model::ModelConfig c = small("llama-tiny");
  model::GPT m(c);
  m.init_weights(ctx, 8);
  const std::vector<int32_t> probe = random_tokens(45, c.vocab_size, 9);
  const int64_t V = c.vocab_size;
  auto step_logits = [&](kernels::KvDtype t) {
    PagedKvCache cache(c, {}, 8, 16, t);
    const std::vector<int32_t> table = {5, 1, 7};
    std::vector<float> all;
    int64_t done = 0;
    for (int64_t n : {20, 25}) {  // two prefill chunks
      cache.set_step({{table.data(), 3, done, n}});
      const Tensor h = m.forward_cached({.cpu = ctx, .B = 1, .T = n}, probe.data() + done, cache);
      std::vector<float> l(n * V);
      model::StepCtx lc{.cpu = ctx, .B = n, .T = 1};
      lc.batch_invariant = true;
      m.full_logits(lc, h, l.data());
      all.insert(all.end(), l.begin(), l.end());
      done += n;
    }
    return all;
  };
  const std::vector<float> f32 = step_logits(kernels::KvDtype::f32);
  for (auto [t, tol] : {std::pair{kernels::KvDtype::bf16, 0.02}, {kernels::KvDtype::int8, 0.05},
                        {kernels::KvDtype::f16, 0.005}, {kernels::KvDtype::q8_0, 0.05}}) {
    const std::vector<float> got = step_logits(t);
    double err = 0, scale = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      err = std::max(err, std::abs(double(got[i]) - f32[i]));
      scale = std::max(scale, std::abs(double(f32[i])));
    }
    std::printf("%s KV cache: max |logit - fp32 cache's| / max |logit| = %.4f\n",
                std::string(kernels::kv_dtype_name(t)).c_str(), err / scale);
    EXPECT_LT(err / scale, tol) << kernels::kv_dtype_name(t);
    EXPECT_GT(err, 0) << kernels::kv_dtype_name(t);

    Result alone, loaded;
    {
      Engine e(m, ctx, {.num_blocks = 64, .kv_cache_dtype = t});
      e.add(request(probe, kSampled, 16, &alone));
      drain(e);
    }
    Engine e(m, ctx, {.num_blocks = 40, .max_num_batched_tokens = 29, .kv_cache_dtype = t});
    std::vector<Result> others(7);
    for (int i = 0; i < 7; ++i) {
      if (i == 3) e.add(request(probe, kSampled, 16, &loaded));
      e.add(request(random_tokens(9 + 13 * i, c.vocab_size, 300 + i), {.temperature = 0.8, .seed = uint64_t(i)},
                    12, &others[i]));
      if (i % 2 == 0) e.step();
    }
    drain(e);
    EXPECT_TRUE(loaded == alone) << kernels::kv_dtype_name(t);
  }
}

// A second request with the same 40-token prefix takes its first two blocks
// from the cache and gives the tokens it gives with prefix caching off.
TEST(Engine, PrefixCacheHitsGiveTheSameTokens) {
  const model::ModelConfig c = small("llama-tiny");
  model::GPT m(c);
  m.init_weights(ctx, 5);
  std::vector<int32_t> prefix = random_tokens(40, c.vocab_size, 3);
  std::vector<int32_t> second = prefix;
  second.push_back(17);
  second.push_back(4);
  auto run = [&](bool caching, Result& first, Result& again) {
    Engine e(m, ctx, {.num_blocks = 32, .prefix_caching = caching});
    e.add(request(prefix, kSampled, 10, &first));
    drain(e);
    e.add(request(second, kSampled, 10, &again));
    drain(e);
    EXPECT_EQ(e.stats().blocks_used, 0);
    return e.stats().cached_tokens;
  };
  Result a, b, a_off, b_off;
  EXPECT_EQ(run(true, a, b), 32);  // two full blocks of 16
  EXPECT_EQ(run(false, a_off, b_off), 0);
  EXPECT_TRUE(a == a_off);
  EXPECT_TRUE(b == b_off);
}

// Scoring the prompt (echo with logprobs): a greedy continuation, given back
// as a prompt, is scored bitwise as it was generated (prefill rows against
// decode rows, in chunks, beside another request); the prompt's other
// positions match the full forward's log-softmax; the cached prefix is not
// taken where it would skip rows to score.
TEST(Engine, PromptLogprobsScoreThePromptAsGenerationDid) {
  const model::ModelConfig c = small("llama-tiny");
  model::GPT m(c);
  m.init_weights(ctx, 9);
  const int64_t V = c.vocab_size;
  const std::vector<int32_t> prompt = random_tokens(20, V, 4);
  Engine e(m, ctx, {.num_blocks = 32, .max_num_batched_tokens = 7});
  Result gen;
  e.add(request(prompt, {}, 12, &gen));
  drain(e);
  ASSERT_EQ(gen.tokens.size(), 12u);

  std::vector<int32_t> again = prompt;
  again.insert(again.end(), gen.tokens.begin(), gen.tokens.end());
  const int64_t cached_before = e.stats().cached_tokens;
  Result scored, other, generated;
  GenerationRequest r = request(again, {}, 1, &generated);
  r.prompt_logprobs = 3;
  r.on_token = [&](const TokenOutput& t) {
    Result& into = t.prompt ? scored : generated;
    if (t.prompt) {
      EXPECT_EQ(t.index, static_cast<int64_t>(scored.tokens.size()) + 1);
      EXPECT_TRUE(generated.tokens.empty()) << "prompt scores come before the first token";
    }
    into.tokens.push_back(t.token);
    into.logprobs.push_back(t.logprob);
    into.top.push_back(t.top);
    return true;
  };
  e.add(request(random_tokens(30, V, 5), kSampled, 8, &other));
  e.add(std::move(r));
  drain(e);
  EXPECT_EQ(e.stats().cached_tokens, cached_before) << "a cached block would have skipped rows to score";
  ASSERT_EQ(scored.tokens.size(), again.size() - 1);
  ASSERT_EQ(generated.tokens.size(), 1u);
  for (size_t k = 0; k < gen.tokens.size(); ++k) {
    const size_t at = prompt.size() - 1 + k;  // scored[at] is position prompt.size() + k
    EXPECT_EQ(scored.tokens[at], gen.tokens[k]);
    EXPECT_EQ(std::memcmp(&scored.logprobs[at], &gen.logprobs[k], sizeof(double)), 0) << "token " << k;
    ASSERT_EQ(scored.top[at].size(), gen.top[k].size());
    for (size_t j = 0; j < gen.top[k].size(); ++j) {
      EXPECT_EQ(scored.top[at][j].token, gen.top[k][j].token);
      EXPECT_EQ(std::memcmp(&scored.top[at][j].logprob, &gen.top[k][j].logprob, sizeof(double)), 0);
    }
  }
  const std::vector<float> ref =
      testing::reference_logits(ctx, m, again, 1, static_cast<int64_t>(again.size()));
  for (size_t pos = 1; pos < again.size(); ++pos) {
    const float* l = &ref[(pos - 1) * V];
    double mx = l[0], z = 0;
    for (int64_t v = 0; v < V; ++v) mx = std::max<double>(mx, l[v]);
    for (int64_t v = 0; v < V; ++v) z += std::exp(l[v] - mx);
    EXPECT_NEAR(scored.logprobs[pos - 1], l[again[pos]] - mx - std::log(z), 1e-4) << "position " << pos;
  }
  EXPECT_EQ(e.stats().blocks_used, 0);
  GenerationRequest bad = request(prompt, {}, 1, &other);
  bad.prompt_logprobs = 21;
  EXPECT_THROW(e.add(std::move(bad)), Error);
}

TEST(Engine, CancellationFreesBlocksAndStopsCallbacks) {
  const model::ModelConfig c = small("gpt2-tiny");
  model::GPT m(c);
  m.init_weights(ctx, 5);
  Engine e(m, ctx, {.num_blocks = 32});
  int calls = 0;
  GenerationRequest r{.prompt = random_tokens(50, c.vocab_size, 1), .max_tokens = 100};
  r.on_token = [&](const TokenOutput&) { return ++calls < 3; };  // the client goes away after 3 tokens
  e.add(std::move(r));
  Result other;
  const int64_t id = e.add(request(random_tokens(20, c.vocab_size, 2), {}, 100, &other));
  e.step();
  e.step();
  EXPECT_GT(e.stats().blocks_used, 0);
  e.cancel(id);
  drain(e);
  EXPECT_EQ(calls, 3);
  EXPECT_LT(other.tokens.size(), 100u);
  EXPECT_EQ(e.stats().blocks_used, 0);
  EXPECT_TRUE(e.idle());
}

TEST(Engine, StopTokensAndBadRequests) {
  const model::ModelConfig c = small("gpt2-tiny");
  model::GPT m(c);
  m.init_weights(ctx, 5);
  Engine e(m, ctx, {.num_blocks = 8});
  Result greedy;
  e.add(request(random_tokens(10, c.vocab_size, 1), {}, 12, &greedy));
  drain(e);
  ASSERT_GE(greedy.tokens.size(), 3u);
  // Stopping at the greedy run's third token: it ends there with "stop".
  Result stopped;
  GenerationRequest r = request(random_tokens(10, c.vocab_size, 1), {}, 12, &stopped);
  r.stop_tokens = {greedy.tokens[2]};
  e.add(std::move(r));
  drain(e);
  const size_t first = std::find(greedy.tokens.begin(), greedy.tokens.end(), greedy.tokens[2]) - greedy.tokens.begin();
  EXPECT_EQ(stopped.tokens.size(), first + 1);
  EXPECT_EQ(stopped.finish, FinishReason::stop);

  auto rejects = [&](GenerationRequest bad, const char* field) {
    try {
      e.add(std::move(bad));
      ADD_FAILURE() << "accepted a request with a bad " << field;
    } catch (const Error& err) {
      EXPECT_NE(std::string(err.what()).find(field), std::string::npos) << err.what();
    }
  };
  rejects({.prompt = {}}, "prompt");
  rejects({.prompt = random_tokens(8 * 16, c.vocab_size, 1)}, "prompt");  // the whole cache: no room to generate
  rejects({.prompt = {1, 2, 5000}}, "prompt");
  rejects({.prompt = {1}, .max_tokens = 0}, "max_tokens");
  rejects({.prompt = {1}, .sampling = {.temperature = 3}}, "temperature");
  rejects({.prompt = {1}, .top_logprobs = 21}, "top_logprobs");
  EXPECT_TRUE(e.idle());
}

}  // namespace
}  // namespace claw::serve
