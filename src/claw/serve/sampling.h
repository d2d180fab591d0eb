// Choosing the next token from a row of logits, per request.
//
// The processing order is Hugging Face's logits warpers (and what vLLM and the
// OpenAI API expose): temperature, then top-k, then top-p (nucleus), then
// min-p, each on the distribution the previous one left (renormalised). A
// temperature of 0 is greedy: the highest logit, the lowest token id on a
// tie.
//
// Reproducibility under batching: the random number for a request's step s
// is Philox keyed by the request's seed, at counter s. It does not depend on
// which other requests share the batch or on how many tokens they drew, and
// candidates are ordered by (logit, token id), so a seeded request gives the
// same tokens alone and under load.
//
// The returned log-probability is the model's: log_softmax of the raw logits
// at the chosen token (the OpenAI API's `logprobs`), independent of the
// sampling parameters.
#pragma once

#include <cstdint>
#include <vector>

namespace claw::serve {

struct SamplingParams {
  double temperature = 0.0;  // 0: greedy; OpenAI's range [0, 2]
  int64_t top_k = 0;         // 0 or -1: no limit
  double top_p = 1.0;        // (0, 1]
  double min_p = 0.0;        // [0, 1]
  uint64_t seed = 0;
  // Throws claw::Error naming the field (OpenAI/vLLM names) and its valid range.
  void validate() const;
  bool greedy() const { return temperature == 0.0 || top_k == 1; }
};

struct SampledToken {
  int32_t token = -1;
  double logprob = 0.0;
};

struct TokenLogprob {
  int32_t token = -1;
  double logprob = 0.0;
};

// log softmax(logits)[token] in double (what sample_token reports).
double log_softmax_at(const float* logits, int64_t V, int32_t token);

// A token's log-probability (log_softmax_at's figure, to the bit) and the k
// most likely tokens' (the OpenAI API's top_logprobs; best first, ties:
// lower id first), from one pass over the vocabulary.
struct TokenScores {
  double logprob = 0.0;
  std::vector<TokenLogprob> top;
};
TokenScores score_token(const float* logits, int64_t V, int32_t token, int64_t k);

// Samples from logits[0, V) for step `step` of a request with parameters p;
// with_logprob false leaves logprob 0 (spares a pass of exp over the
// vocabulary when nobody asked for it).
SampledToken sample_token(const float* logits, int64_t V, const SamplingParams& p, uint64_t step,
                          bool with_logprob = true);

}  // namespace claw::serve
