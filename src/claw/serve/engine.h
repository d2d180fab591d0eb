// The generation engine: continuous batching over a paged KV cache.
//
//   Engine engine(model, cpu, {.num_blocks = 4096});
//   engine.add({.prompt = ids, .sampling = {...}, .max_tokens = 64,
//               .on_token = [&](const TokenOutput& t) { ...; return true; }});
//   while (engine.step()) {}
//
// Each step() schedules, runs one forward over every scheduled token, and
// samples one token for each sequence that has all its tokens cached:
//
// 1. Scheduling (vLLM's, simplified): a per-step token budget
//    (max_num_batched_tokens) is spent first on running sequences in
//    admission order (a decode takes 1 token, an unfinished prompt a chunk
//    of what is left: chunked prefill), then on waiting requests in arrival
//    order, up to max_num_seqs running. A request is admitted with the
//    longest prefix of its prompt whose full blocks are cached (prefix
//    caching, serve/block_pool.h); those tokens are not recomputed.
// 2. Blocks. Before its tokens run, a sequence's block table is extended to
//    cover them. When the pool runs dry the newest running sequence is
//    preempted: its blocks are released (its full blocks stay cached) and it
//    goes back to the front of the queue with everything it has generated,
//    to be recomputed when there is room. No request fails for lack of
//    cache: add() refuses only a prompt that could never fit.
// 3. The forward: the step's tokens flattened into one row (B = 1, T = N),
//    attention over each sequence's blocks, hidden states of the last token
//    of each sequence that is now fully cached, their logits, a token each
//    (and, for a request that scores its prompt, the logits of its prompt
//    rows in the step).
//
// Reproducibility. Every kernel on this path computes a token's result
// without reference to the other tokens of the step (rowwise_linear.h,
// paged_attention.h), and a request's k-th sampled token uses its own seed at
// step k (sampling.h), so a request's tokens and log-probabilities are
// bitwise the same alone, in any batch, with any prefill chunking, after a
// preemption, and from a prefix-cache hit.
//
// The engine is single-threaded: the caller serialises add(), cancel() and
// step() (the server's engine loop does).
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "claw/model/gpt.h"
#include "claw/serve/block_pool.h"
#include "claw/serve/paged_kv_cache.h"
#include "claw/serve/sampling.h"

namespace claw::serve {

struct EngineConfig {
  int64_t block_size = 16;               // --block-size
  int64_t num_blocks = 0;                // KV blocks (the caller sizes them from memory)
  int64_t max_num_batched_tokens = 2048; // --max-num-batched-tokens: tokens per step
  int64_t max_num_seqs = 256;            // --max-num-seqs: sequences running at once
  int64_t max_model_len = 0;             // --max-model-len: prompt + output (0: the model's context)
  bool prefix_caching = true;            // --no-prefix-caching turns it off
  kernels::KvDtype kv_cache_dtype = kernels::KvDtype::f32;  // --kv-cache-dtype
};

enum class FinishReason { none, stop, length, cancelled };
const char* finish_reason_name(FinishReason r);  // OpenAI's "stop", "length"; "cancelled"

// One generated token, as handed to the request's callback.
struct TokenOutput {
  int32_t token = -1;
  double logprob = 0.0;            // the model's log-probability of the token (GenerationRequest::logprob)
  std::vector<TokenLogprob> top;   // the top_logprobs most likely tokens, best first
  int64_t index = 0;               // 0 for the first generated token
  FinishReason finish = FinishReason::none;  // set on the last token
  // A prompt token's score (GenerationRequest::prompt_logprobs), not a
  // generated token: index is its position in the prompt (1 and up).
  bool prompt = false;
  // The step's logits over the vocabulary (a generated token's), valid
  // during the callback only.
  std::span<const float> logits;
};

struct GenerationRequest {
  std::vector<int32_t> prompt;
  SamplingParams sampling;
  int64_t max_tokens = 16;
  std::vector<int32_t> stop_tokens;  // generation ends after one of these (end of text)
  int64_t top_logprobs = 0;          // 0..20
  bool logprob = true;               // TokenOutput::logprob (false with top_logprobs 0: left 0, a pass
                                     // over the vocabulary spared)
  // -1, or 0..20: also score the prompt (the echo of OpenAI's completions):
  // the log-probability of each prompt token after the first given those
  // before it, with this many top alternatives, handed to on_token (prompt
  // set, in order) before the first generated token. Prompt blocks are then
  // taken from the prefix cache only where already scored.
  int64_t prompt_logprobs = -1;
  // Called on the stepping thread for each token; returning false cancels
  // the request (a client that went away): its blocks are freed at once.
  std::function<bool(const TokenOutput&)> on_token;
};

struct EngineStats {
  int64_t running = 0, waiting = 0;
  int64_t blocks_used = 0, blocks_free = 0;
  int64_t steps = 0, preemptions = 0;
  int64_t prompt_tokens = 0;     // of admitted requests
  int64_t computed_tokens = 0;   // run through the model (prefill, recompute and decode)
  int64_t cached_tokens = 0;     // prompt tokens found in the prefix cache
  int64_t generated_tokens = 0;
};

class Engine {
 public:
  // The model: the whole model on this rank, or its slice of a tensor-
  // parallel group. With tensor parallelism every rank of the group builds
  // an Engine with the same configuration; the group's rank 0 (the leader)
  // takes requests and schedules as with one rank, and sends each step's
  // plan (tokens, block tables) to the others, which run the same forward
  // in follow(). Destroying the leader's engine (or stop_followers()) ends
  // follow() on the others.
  Engine(model::GPT& model, const CpuCtx& cpu, EngineConfig cfg);
  ~Engine();
  // Tensor-parallel ranks > 0: runs the leader's steps until it stops.
  void follow();
  void stop_followers();

  const EngineConfig& config() const { return cfg_; }
  // Queues a request and returns its id. Throws claw::Error naming the
  // field when it cannot be served (empty or too long a prompt, bad
  // sampling parameters, max_tokens < 1).
  int64_t add(GenerationRequest r);
  // add()'s checks alone (any thread: reads only the configuration).
  void validate(const GenerationRequest& r) const;
  // Drops a request (waiting or running) and frees its blocks; its callback
  // is not called again. Unknown or finished ids are ignored.
  void cancel(int64_t id);
  // One scheduling step and forward. Returns false when there was nothing to do.
  bool step();
  bool idle() const { return running_.empty() && waiting_.empty(); }
  EngineStats stats() const;
  const BlockPool& pool() const { return pool_; }

 private:
  struct Seq;
  // A sequence scheduled into a step with its next n tokens.
  struct Scheduled {
    Seq* seq;
    int64_t n;
  };
  // This step's work within --max-num-batched-tokens: running sequences
  // oldest first (the newest preempted when blocks run out), then waiting
  // requests in arrival order (none after a preemption).
  std::vector<Scheduled> schedule();
  bool ensure_blocks(Seq& s, int64_t positions);
  void match_prefix(Seq& s);
  void preempt(Seq& s);
  void release(Seq& s);
  void finish(Seq& s);
  void register_full_blocks(Seq& s);
  // longrope (Phi-3): a sequence holding more tokens than the original
  // context runs on the long factors, every position of it. When it
  // crosses over, its cached keys (short-rotated) are dropped and it is
  // computed again, as transformers' Phi-3 generation does; prefix-cache
  // blocks are keyed by the factors too (hash_root).
  bool rope_long(const Seq& s) const;
  BlockHash hash_root(const Seq& s) const;
  int64_t rope_original_ = 0;  // longrope's original context (0: not longrope)
  bool tp_leader() const { return model_.tp().size() > 1 && model_.tp().rank() == 0; }
  // The model's part of a step (every TP rank): the forward over `tokens`
  // and the logits of the ready rows into logits_.
  void run_step(const std::vector<int32_t>& tokens, std::vector<StepSeq> plan, const std::vector<int64_t>& ready_rows);
  void send_step(const std::vector<int32_t>& tokens, const std::vector<StepSeq>& plan,
                 const std::vector<int64_t>& ready_rows);
  bool followers_stopped_ = false;

  model::GPT& model_;
  CpuCtx cpu_;
  EngineConfig cfg_;
  int64_t vocab_;
  BlockPool pool_;
  PagedKvCache cache_;
  std::unordered_map<int64_t, std::unique_ptr<Seq>> seqs_;
  std::deque<Seq*> waiting_;
  std::vector<Seq*> running_;  // admission order
  int64_t next_id_ = 0;
  EngineStats stats_;
  std::vector<float> rows_, logits_;
};

}  // namespace claw::serve
