// `claw rl`: GRPO with learners and generators as two groups of one job.
//
// Ranks. Of the N launched ranks (mpirun / srun), the last
// --rollout-workers K are generators and the first N - K learners (any
// TP/PP/DP layout, full weights or LoRA); each group is a world of its own
// (comm::World::sub_world). With K = 0 the learners' rank 0 generates
// (colocated), synchronously.
//
// One learner step s:
//   1. the batch of step s: P = global batch / G prompts (the prompt file
//      in a seeded order, epoch after epoch), G completions each, from the
//      generators (each takes prompt slots p with p mod K = its index);
//      rewards by the task's checker (rl/task.h), computed by the
//      generator that sampled them;
//   2. advantages per group (grpo_loss.h), the completions as rows of
//      --seq-length + 1 tokens (prompt, completion, padding), the loss on
//      the completion tokens only;
//   3. with --importance-correction the learner's own log-probabilities
//      (a forward pass), with --kl-beta > 0 the reference's (a second
//      model: the weights the run started from);
//   4. one optimizer step on the GRPO loss; the weights are now version
//      s + 1, and the learners send them to the generators (weight_sync.h).
//
// Staleness. A trajectory sampled with version v is used at step s only if
// s - v <= K_s (--max-staleness, default 1). Without --async K_s is 0: the
// generators wait for version s before sampling batch s, the synchronous
// loop. With --async the generators sample batch s with the newest weights
// they hold as long as s - version <= K_s, and wait otherwise, so they run
// up to K_s steps ahead while the learners train. Messages between learner
// rank 0 and the generators are point to point: each generator sends batch
// s; learner rank 0 sends weights s + 1 to each generator after step s and
// leaves the sends pending; a generator receives the sets in order when
// the rule makes it (a pending collective would spin a core while it
// samples). With K_s = 0 the asynchronous run is the synchronous one.
//
// A rollout worker that sends no batch within --rollout-timeout, or whose
// weight send fails, is lost: learner rank 0 samples its prompt slots from
// then on (a dead rank ends an OpenMPI job unless mpirun --enable-recovery).
//
// Rewards come from the task's checker, or with --env-url from an external
// environment that plays each episode against the worker's own OpenAI-
// compatible endpoint (rl/env.h); an episode whose environment times out or
// fails is left out of the loss and counted.
//
// Metrics per step (JSONL, rank 0): reward mean and std, exact-match rate,
// completion length, truncation rate, the loss, clip fraction, mean ratio,
// KL, importance weights, the generator-learner log-probability mismatch
// over the tokens of completions sampled with the learner's current
// weights, trajectory ages (max and mean: at most K_s), time spent waiting
// for rollouts, samples per second; every --eval-interval steps the mean
// reward and exact-match rate of greedy replies to --eval-prompt-data.
#pragma once

#include <cstdint>
#include <string>

#include "claw/comm/world.h"
#include "claw/model/config.h"
#include "claw/optim/adamw.h"
#include "claw/optim/lr_schedule.h"
#include "claw/rl/grpo_loss.h"
#include "claw/rl/rollout.h"
#include "claw/train/config.h"

namespace claw::rl {

struct RlConfig {
  std::string prompt_data;       // --prompt-data: JSONL prompts with answers (rl/task.h)
  std::string eval_prompt_data;  // --eval-prompt-data: held-out prompts ("": no evaluation)
  std::string task = "reverse";  // --task: the checker
  std::string chat_template;     // --chat-template ("": the model's default)
  GrpoConfig grpo;
  SamplingConfig sampling;       // --temperature, --max-new-tokens
  int64_t max_staleness = 1;     // --max-staleness: K_s
  bool async = false;            // --async
  int rollout_workers = 0;       // --rollout-workers: generator ranks (0: colocated)
  double rollout_timeout_s = 600;  // --rollout-timeout: a worker silent this long is lost
  EnvConfig env;                 // --env-url ...: an external environment scores episodes (rl/env.h)
  void validate(int world_size, int64_t global_batch_size) const;  // throws naming the flag
};

// Everything a run is built from (the train command's configuration, and RL's).
struct RlJob {
  model::ModelConfig model;
  train::TrainConfig train;
  optim::LrSchedule lr;
  optim::AdamWConfig adam;
  train::DataConfig data;  // the tokenizer
  train::ParallelConfig parallel;
  train::CheckpointConfig ckpt;
  RlConfig rl;
};

// Runs the job on every rank of `world` (learners and generators alike).
void run_rl(RlJob job, comm::World& world);

}  // namespace claw::rl
