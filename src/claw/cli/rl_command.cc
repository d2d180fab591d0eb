#include "claw/cli/rl_command.h"

#include <algorithm>

#include "claw/ckpt/checkpoint.h"
#include "claw/cli/ckpt_command.h"
#include "claw/cli/flags.h"
#include "claw/model/config_flags.h"
#include "claw/cli/train_args.h"
#include "claw/comm/world.h"
#include "claw/core/log.h"
#include "claw/rl/grpo_trainer.h"

namespace claw::cli {

namespace {

struct RlArgs : TrainArgs {
  rl::RlConfig rl;
  RlArgs() {
    // GRPO's usual settings: a small constant learning rate, groups of 8.
    lr.max_lr = lr.min_lr = 1e-5;
    lr.warmup_iters = 0;
    lr.style = optim::DecayStyle::constant;
    adam.weight_decay = 0.01;
    adam.clip_grad = 1.0;
    train.micro_batch_size = 8;
    train.global_batch_size = 64;
    train.train_iters = 100;
    train.eval_interval = 10;
  }
};
using R = Flag<RlArgs>;

// Train's flags that mean something here: not its data set, SFT, DPO or
// validation-split options, nor --parallel auto, nor the checks of the
// training loop that GRPO's learner does not run (stragglers, silent data
// corruption, hang detection, MFU): given to claw rl, they are unknown flags.
bool rl_uses(const std::string& train_flag) {
  static const char* skip[] = {"data-path", "data-cache-path", "reset-position-ids", "reset-attention-mask", "sft",
                               "dpo", "dpo-beta", "dpo-loss-type", "eod-mask-loss", "split", "eval-iters",
                               "parallel", "exit-interval", "async-save", "load-fallback", "freeze",
                               "straggler-report-interval", "straggler-threshold", "rerun-mode", "spiky-loss-factor",
                               "check-weight-hash-across-dp-replicas-interval", "no-hang-detection",
                               "hang-timeout-factor", "hang-timeout-min", "hang-timeout-initial", "hang-timeout",
                               "peak-gflops", "peak-cache-dir"};
  return std::find(std::begin(skip), std::end(skip), train_flag) == std::end(skip);
}

const std::vector<R>& rl_flags() {
  using A = RlArgs;
  static const std::vector<R> flags = [] {
    std::vector<R> out;
    for (const Flag<TrainArgs>& f : train_flags()) {
      if (!rl_uses(f.name)) continue;
      R r{f.name, f.help, f.is_switch, [set = f.set](A& a, const std::string& v) { set(a, v); },
          [get = f.get](const A& a) { return get(a); }, f.type, f.multi};
      if (f.name == "eval-interval") r.help = "steps between held-out evaluations (greedy replies; 0: never)";
      if (f.name == "global-batch-size") r.help = "completions per optimizer step (prompts x --num-generations)";
      out.push_back(std::move(r));
    }
    const std::vector<R> own = {
        string_flag<A>("prompt-data", "JSONL prompts with answers: {\"messages\": [..., assistant answer]} or "
                                      "{\"prompt\", \"answer\"} (scripts/sft_task.py writes them)",
                       [](A& a) -> auto& { return a.rl.prompt_data; }),
        string_flag<A>("eval-prompt-data", "held-out prompts, scored with greedy replies every --eval-interval steps",
                       [](A& a) -> auto& { return a.rl.eval_prompt_data; }),
        string_flag<A>("task", "the reward's checker: reverse, sort (word lists, partial credit) or add (an integer)",
                       [](A& a) -> auto& { return a.rl.task; }),
        string_flag<A>("chat-template", "llama3, chatml, plain or FILE.jinja (default: the model's)",
                       [](A& a) -> auto& { return a.rl.chat_template; }),
        double_flag<A>("rollout-timeout", "seconds learner rank 0 waits for a rollout worker's batch (or for it to "
                                          "take weights at the end) before the worker counts as lost and rank 0 "
                                          "samples its prompts (launch with mpirun --enable-recovery so that a "
                                          "dead rank does not end the job)",
                       [](A& a) -> auto& { return a.rl.rollout_timeout_s; }),
        string_flag<A>("env-url", "an external environment, http://HOST:PORT[/PATH]: it gets POST PATH/rollout per "
                                  "episode with the policy's OpenAI endpoint and returns {\"reward\": R} "
                                  "(scripts/rl_env.py; default: --task's checker)",
                       [](A& a) -> auto& { return a.rl.env.url; }),
        double_flag<A>("env-timeout", "seconds an episode may take before it counts as timed out (its rollout "
                                      "is dropped, the step goes on)",
                       [](A& a) -> auto& { return a.rl.env.timeout_s; }),
        int_flag<A>("env-max-turns", "policy replies an environment may ask for in one episode",
                    [](A& a) -> auto& { return a.rl.env.max_turns; }),
        string_flag<A>("rollout-server-host", "address the policy's endpoint listens on and is given to the "
                                              "environment as (default 127.0.0.1)",
                       [](A& a) -> auto& { return a.rl.env.host; }),
        int_flag<A>("num-generations", "completions per prompt: GRPO's group size G",
                    [](A& a) -> auto& { return a.rl.grpo.num_generations; }),
        double_flag<A>("clip-eps-low", "ratio clip below 1", [](A& a) -> auto& { return a.rl.grpo.clip_eps_low; }),
        double_flag<A>("clip-eps-high", "ratio clip above 1 (DAPO's clip-higher: 0.28)",
                       [](A& a) -> auto& { return a.rl.grpo.clip_eps_high; }),
        double_flag<A>("kl-beta", "weight of the k3 KL penalty to the starting weights (0: no reference model)",
                       [](A& a) -> auto& { return a.rl.grpo.kl_beta; }),
        switch_flag<A>("advantage-no-std", "advantages r - mean(r) of the group, not divided by its std",
                       [](A& a) -> auto& { return a.rl.grpo.advantage_no_std; }),
        string_flag<A>("loss-agg-mode", "token-mean (over the batch's tokens) or seq-mean-token-mean",
                       [](A& a) -> auto& { return a.rl.grpo.loss_agg_mode; }),
        switch_flag<A>("importance-correction",
                       "ratios against the learner's own log-probabilities, weighted by pi_learner / pi_behaviour "
                       "truncated at --is-truncation",
                       [](A& a) -> auto& { return a.rl.grpo.importance_correction; }),
        switch_flag<A>("learner-batch-invariant",
                       "the learners' forward in the generation engine's batch-invariant kernels: their "
                       "log-probabilities equal the generator's bitwise (one learner rank, DP, PP) instead of to "
                       "fp32 rounding, for about 1.8x the learner's step time",
                       [](A& a) -> auto& { return a.rl.grpo.learner_batch_invariant; }),
        double_flag<A>("is-truncation", "upper bound of the importance weight",
                       [](A& a) -> auto& { return a.rl.grpo.is_truncation; }),
        double_flag<A>("temperature", "sampling temperature of rollouts (1: the policy's distribution)",
                       [](A& a) -> auto& { return a.rl.sampling.temperature; }),
        int_flag<A>("max-new-tokens", "tokens per completion at most",
                    [](A& a) -> auto& { return a.rl.sampling.max_new_tokens; }),
        int_flag<A>("max-staleness", "with --async: a rollout of weights v is used at steps <= v + K",
                    [](A& a) -> auto& { return a.rl.max_staleness; }),
        switch_flag<A>("async", "generators sample ahead while the learners train (within --max-staleness)",
                       [](A& a) -> auto& { return a.rl.async; }),
        int_flag<A>("rollout-workers", "the last K ranks generate (0: learner rank 0 does, between steps)",
                    [](A& a) -> auto& { return a.rl.rollout_workers; }),
    };
    out.insert(out.end(), own.begin(), own.end());
    return out;
  }();
  return flags;
}

struct RlCommand {
  std::string preset;
  std::unique_ptr<FlagBinder<RlArgs>> binder;

  void run() {
    RlArgs args;
    if (!preset.empty()) args.model = model::model_preset(preset);
    binder->apply(args);
    use_weights_model(args, [&](const std::string& f) { return binder->given(f); }, preset);
    // Not launch(): the data-parallel size is the learners', which run_rl resolves.
    std::unique_ptr<comm::World> world = join_job(args);
    if (!args.ckpt.load_hf.empty()) import_hf_for_finetune(args, *world);
    log::info("rl", "{}", config_table(fmt::format("resolved config (model preset: {})", args.model.name),
                                        flag_values(rl_flags(), args)));
    args.ckpt.model_flags = model::model_flags_json(args.model);
    for (const R& f : rl_flags()) args.ckpt.args[f.name] = f.get(args);
    args.ckpt.args["model"] = args.model.name;
    rl::run_rl({.model = args.model, .train = args.train, .lr = args.lr, .adam = args.adam, .data = args.data,
                .parallel = args.parallel, .ckpt = args.ckpt, .rl = args.rl},
               *world);
  }
};

}  // namespace

void add_rl_command(CLI::App& app) {
  auto cmd = std::make_shared<RlCommand>();
  CLI::App* sub = app.add_subcommand(
      "rl", "GRPO on prompts with verifiable answers (--prompt-data, --task), from --load or --load-hf");
  sub->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  sub->add_option("--model", cmd->preset, "model preset (a checkpoint's own model comes with --load)");
  static const RlArgs defaults;
  cmd->binder = std::make_unique<FlagBinder<RlArgs>>(*sub, rl_flags(), defaults);
  sub->callback([cmd] { cmd->run(); });
}

}  // namespace claw::cli
