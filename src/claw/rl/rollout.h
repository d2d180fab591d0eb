// Rollouts: completions of prompts sampled by the generation engine
// (serve/engine.h) from a generator's copy of the policy, each with the
// log-probability of every token at sampling time and the version of the
// weights that sampled it.
//
// A generator holds a whole model (no tensor or pipeline parallelism), given
// weight sets by version (weight_sync.h). Sampling is at temperature 1 with
// no other warper, so the engine's log-probabilities (log_softmax of the
// raw logits, serve/sampling.h) are the policy's, which the learner
// recomputes. Completion k of prompt slot p at step s draws with the seed
// hash(run seed, s, p, k): a rollout's tokens do not depend on what else the
// engine runs beside it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "claw/core/parallel.h"
#include "claw/model/gpt.h"
#include "claw/rl/env.h"
#include "claw/serve/engine.h"

namespace claw::rl {

// How an episode with an external environment ended (rl/env.h).
enum class EnvStatus : uint8_t { none = 0, ok, timeout, error };

struct Trajectory {
  int64_t prompt = 0;              // index in the prompt list
  int64_t step = 0;                // the learner step it was sampled for
  int64_t slot = 0;                // its prompt's place in that step's batch
  int64_t version = 0;             // weights that sampled it
  std::vector<int32_t> prompt_tokens, completion;
  std::vector<float> logprobs;     // behaviour: one per completion token (0 where not learned)
  // Which completion tokens the policy sampled (empty: all). A multi-turn
  // episode's completion holds the environment's turns too, not learned.
  std::vector<uint8_t> learn;
  bool truncated = false;          // stopped by max tokens, not an end token
  double reward = 0;
  std::string reply;               // the completion's text as the checker read it (failed: why)
  EnvStatus env = EnvStatus::none;  // none: a built-in task's checker scored it
  int32_t turns = 1;                // the policy's replies in the episode
  int32_t unaligned = 0;            // earlier replies not found verbatim in the last prompt (not learned)
  bool learned(size_t j) const { return learn.empty() || learn[j] != 0; }
  bool failed() const { return env == EnvStatus::timeout || env == EnvStatus::error; }
};

// Trajectories as bytes, to send between ranks, and back.
std::vector<uint8_t> encode_trajectories(const std::vector<Trajectory>& ts);
std::vector<Trajectory> decode_trajectories(const std::vector<uint8_t>& bytes);

struct RolloutRequest {
  int64_t prompt = 0;  // index in the prompt list
  std::vector<int32_t> tokens;
  int64_t slot = 0;    // the prompt's place in the step's batch (seeds)
  std::string env_prompt;  // with an environment: what it is sent of the prompt (JSON; rl/env.h)
};

struct SamplingConfig {
  double temperature = 1.0;          // --temperature (the policy's distribution at 1)
  int64_t max_new_tokens = 32;       // --max-new-tokens
  std::vector<int32_t> stop_tokens;  // end of text
  uint64_t seed = 0;
};

class Generator {
 public:
  // `cfg`: the policy's model (LoRA adapters included; they are folded in
  // at each weight set). `max_seqs`: completions generated at once.
  // `env`: episodes with an external environment (rl/env.h) instead of
  // single completions.
  Generator(const model::ModelConfig& cfg, const CpuCtx& cpu, int64_t max_seqs, int64_t max_model_len,
            const EnvSetup* env = nullptr);
  ~Generator();
  model::GPT& model() { return *model_; }
  int64_t version() const { return version_; }
  // After load_weights into model(): the weights are now `version`.
  void set_version(int64_t version) { version_ = version; }

  // `group` completions of each request for learner step `step` (seeds as
  // above); trajectories in request order, group by group. greedy: the
  // most likely token each time (evaluation), one completion a request.
  std::vector<Trajectory> generate(const std::vector<RolloutRequest>& requests, int64_t group, int64_t step,
                                   const SamplingConfig& sampling, bool greedy = false);

 private:
  CpuCtx cpu_;
  std::unique_ptr<model::GPT> model_;
  std::unique_ptr<serve::Engine> engine_;
  std::unique_ptr<EnvEpisodes> env_;
  int64_t version_ = -1;
};

}  // namespace claw::rl
