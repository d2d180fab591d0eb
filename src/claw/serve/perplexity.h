// Perplexity of a model on a token stream, through the generation path
// (forward_cached and the batch-invariant logits, so in whatever weight
// type the model was given: GPT::set_inference_weights), the way
// llama.cpp's perplexity tool measures quantized models: the stream is cut
// into windows of ctx tokens, each run from an empty cache (the engine's
// paged one), and the tokens of a window after position `first` (every one
// but the first by default; llama-perplexity's own figure scores those after
// ctx / 2, so each has half a window of context) are scored by the
// log-probability the model gave them after the tokens before them in the
// window.
#pragma once

#include <cstdint>
#include <functional>
#include <span>

#include "claw/core/parallel.h"
#include "claw/model/gpt.h"

namespace claw::serve {

struct PerplexityResult {
  double nll_sum = 0;   // sum of -log p over scored tokens
  int64_t tokens = 0;   // scored
  int64_t windows = 0;
  double perplexity() const;  // exp(nll_sum / tokens)
};

// At most max_windows windows (0: all that fit); each scores the tokens at
// positions first + 1 .. ctx - 1. on_window(done, result so far) after
// each, for progress.
PerplexityResult perplexity(model::GPT& m, const CpuCtx& cpu, std::span<const int32_t> tokens, int64_t ctx,
                            int64_t max_windows = 0, int64_t first = 0,
                            const std::function<void(int64_t, const PerplexityResult&)>& on_window = {});

}  // namespace claw::serve
