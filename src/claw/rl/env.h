// External environments: episodes played by a process of the user's over
// HTTP, against the policy served by the rollout worker itself.
//
// The protocol. For each episode the worker POSTs to --env-url
//   POST {env_url}/rollout
//   {"endpoint": "http://HOST:PORT/v1", "model": EPISODE_ID,
//    "prompt": {"messages": [...]} or {"text": "..."}, "answer": "...",
//    "max_tokens": --max-new-tokens}
// and the environment talks to the policy at `endpoint`, an OpenAI-
// compatible server (serve/http_server.h) the worker runs on its own
// engine, as many turns as it likes (up to --env-max-turns):
//   POST {endpoint}/chat/completions {"model": EPISODE_ID, "messages": [...]}
// then answers {"reward": R} (any other fields are ignored). The policy
// samples every turn at --temperature with a seed from (step, slot,
// sample, turn), whatever the request says; max_tokens is capped at
// --max-new-tokens.
//
// The trajectory. Each turn's prompt tokens, sampled tokens and their
// log-probabilities are recorded as the server answers. The episode becomes
// one row: the last turn's prompt and reply; the earlier replies are found
// in that prompt, token for token (less a final end-of-text token, which
// the template replaces with its own turn end), in order, and learned where found (a
// template that re-tokenizes a reply differently leaves that turn out,
// counted as unaligned); what the environment said between turns is
// context, not learned.
//
// Faults. An environment that does not answer within --env-timeout
// seconds, refuses, answers something other than {"reward": number}, or
// cannot be reached costs its episode: the episode is marked failed (its
// advantage 0, the others of its group compared among themselves) and
// counted (env_timeouts, env_errors in the metrics); the step goes on. A
// request for a finished episode gets a 400.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "claw/core/parallel.h"
#include "claw/data/chat_template.h"
#include "claw/data/tokenizer.h"
#include "claw/model/gpt.h"
#include "claw/serve/engine.h"

namespace claw::rl {

struct Trajectory;
struct SamplingConfig;

struct EnvConfig {
  std::string url;                    // --env-url ("": the built-in task's checker scores)
  double timeout_s = 60;              // --env-timeout: seconds an episode may take
  int64_t max_turns = 4;              // --env-max-turns: policy replies an episode may ask for
  std::string host = "127.0.0.1";     // --rollout-server-host: where the policy endpoint listens
  void validate() const;              // throws naming the flag
};

// What an environment needs besides its URL: how chat requests become tokens.
struct EnvSetup {
  EnvConfig cfg;
  const data::Tokenizer* tokenizer = nullptr;
  data::ChatTemplate chat;
  int64_t max_row = 0;  // tokens a learner row holds (--seq-length + 1)
};

class EnvEpisodes {
 public:
  EnvEpisodes(model::GPT& model, const CpuCtx& cpu, serve::EngineConfig ec, const EnvSetup& setup);
  ~EnvEpisodes();
  const std::string& endpoint() const;
  // Plays one episode for each out[i] (prompt_tokens, step, slot, version
  // set; prompts[i] the JSON the environment is sent; seeds[i] its
  // sampling seed) and fills in its completion, reward and status. Returns
  // once every episode has ended or timed out.
  void run(std::vector<Trajectory>& out, const std::vector<std::string>& prompts, const std::vector<uint64_t>& seeds,
           const SamplingConfig& sampling, bool greedy);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace claw::rl
