#include "claw/serve/perplexity.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "claw/core/error.h"
#include "claw/serve/paged_kv_cache.h"
#include "claw/serve/sampling.h"

namespace claw::serve {

double PerplexityResult::perplexity() const { return tokens > 0 ? std::exp(nll_sum / static_cast<double>(tokens)) : 0; }

PerplexityResult perplexity(model::GPT& m, const CpuCtx& cpu, std::span<const int32_t> tokens, int64_t ctx,
                            int64_t max_windows, int64_t first, const std::function<void(int64_t, const PerplexityResult&)>& on_window) {
  const model::ModelConfig& c = m.config();
  CLAW_CHECK(ctx >= 2, "perplexity windows need at least 2 tokens, not {}", ctx);
  CLAW_CHECK(first >= 0 && first < ctx - 1, "the first scored position {} is outside a window of {}", first, ctx);
  if (ctx > c.max_position_embeddings)
    fail("--ctx-size {} is longer than the model's {} positions", ctx, c.max_position_embeddings);
  int64_t windows = static_cast<int64_t>(tokens.size()) / ctx;
  if (max_windows > 0) windows = std::min(windows, max_windows);
  if (windows == 0) fail("{} tokens make no window of {} (--ctx-size)", tokens.size(), ctx);
  const int64_t V = c.vocab_size;
  for (int32_t t : tokens.first(static_cast<size_t>(windows * ctx)))
    if (t < 0 || t >= V) fail("token id {} is outside the model's vocabulary of {}", t, V);
  PerplexityResult r;
  std::vector<float> logits(static_cast<size_t>(ctx * V));
  constexpr int64_t kBlock = 16;
  const int64_t blocks = (ctx + kBlock - 1) / kBlock;
  std::vector<int32_t> table(static_cast<size_t>(blocks));
  for (int64_t b = 0; b < blocks; ++b) table[b] = static_cast<int32_t>(b);
  for (int64_t w = 0; w < windows; ++w) {
    const int32_t* win = tokens.data() + w * ctx;
    // The serving engine's paged cache and fixed-order attention, so the
    // figures are reproducible bitwise (BLAS's blockings depend on alignment).
    PagedKvCache cache(c, {}, blocks, kBlock);
    cache.set_step({{table.data(), blocks, 0, ctx}});
    model::StepCtx sc{.cpu = cpu, .B = 1, .T = ctx};
    sc.batch_invariant = true;
    const Tensor h = m.forward_cached(sc, win, cache);
    model::StepCtx lc{.cpu = cpu, .B = ctx, .T = 1};
    lc.batch_invariant = true;
    m.full_logits(lc, h, logits.data());
    const int64_t scored = ctx - 1 - first;
    std::vector<double> nll(static_cast<size_t>(scored));
    parallel_for(cpu, scored, 8, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i)
        nll[i] = -log_softmax_at(logits.data() + (first + i) * V, V, win[first + i + 1]);
    });
    for (double x : nll) r.nll_sum += x;
    r.tokens += scored;
    r.windows = w + 1;
    if (on_window) on_window(w + 1, r);
  }
  return r;
}

}  // namespace claw::serve
