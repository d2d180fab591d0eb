#include "claw/rl/grpo_trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <deque>
#include <numeric>
#include <optional>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "claw/core/clock.h"
#include "claw/ckpt/checkpoint.h"
#include "claw/core/arena.h"
#include "claw/core/error.h"
#include "claw/core/log.h"
#include "claw/core/philox.h"
#include "claw/data/tokenizer_factory.h"
#include "claw/kernels/cpu/blas.h"
#include "claw/rl/task.h"
#include "claw/rl/weight_sync.h"
#include "claw/runtime/runtime.h"
#include "claw/train/batch.h"
#include "claw/train/metrics.h"
#include "claw/train/run_data.h"
#include "claw/train/job.h"
#include "claw/train/step.h"

namespace claw::rl {

void RlConfig::validate(int world_size, int64_t global_batch_size) const {
  grpo.validate();
  env.validate();
  parse_task(task);
  if (prompt_data.empty()) fail("claw rl needs --prompt-data FILE (JSONL prompts with answers; see rl/task.h)");
  if (global_batch_size % grpo.num_generations != 0)
    fail("--global-batch-size {} must be a multiple of --num-generations {} (whole groups of completions)",
         global_batch_size, grpo.num_generations);
  if (max_staleness < 0) fail("--max-staleness {}: expected 0 or more", max_staleness);
  if (rollout_workers < 0 || rollout_workers >= world_size)
    fail("--rollout-workers {}: expected 0 (the learners generate) to {} (leaving a learner rank) for {} ranks",
         rollout_workers, world_size - 1, world_size);
  if (!(rollout_timeout_s > 0)) fail("--rollout-timeout {}: expected seconds > 0", rollout_timeout_s);
  if (async && rollout_workers == 0)
    fail("--async overlaps generation with training on other ranks: give --rollout-workers K (and launch K more "
         "ranks)");
  if (!(sampling.temperature > 0 && sampling.temperature <= 2))
    fail("--temperature {}: expected a value in (0, 2] (1: the policy's own distribution)", sampling.temperature);
  if (sampling.max_new_tokens < 1) fail("--max-new-tokens {}: expected 1 or more", sampling.max_new_tokens);
}

namespace {
using clock = std::chrono::steady_clock;

// What every rank knows of the task: the prompts as token ids, their order,
// and how replies are read and scored.
class Problem {
 public:
  Problem(const RlJob& job) : job_(job), task_(parse_task(job.rl.task)) {
    tokenizer_ = data::make_tokenizer(train::data_tokenizer(job.data));
    if (tokenizer_->vocab_size() > job.model.vocab_size)
      fail("the tokenizer ({}) has {} ids, more than the model's --vocab-size {}", tokenizer_->name(),
           tokenizer_->vocab_size(), job.model.vocab_size);
    tmpl_ = data::chat_template_for(*tokenizer_, job.rl.chat_template);
    stops_ = tmpl_.stop();
    prompts_ = read_prompts(job.rl.prompt_data, task_);
    tokens_ = encode(prompts_, job.rl.prompt_data);
    if (!job.rl.eval_prompt_data.empty()) {
      eval_prompts_ = read_prompts(job.rl.eval_prompt_data, task_);
      eval_tokens_ = encode(eval_prompts_, job.rl.eval_prompt_data);
    }
    per_step_ = job.train.global_batch_size / job.rl.grpo.num_generations;
    if (!job.rl.env.url.empty())
      env_ = EnvSetup{.cfg = job.rl.env, .tokenizer = tokenizer_.get(), .chat = tmpl_, .max_row = job.train.seq_length + 1};
  }

  // The environment's setup, or null (the task's checker scores).
  const EnvSetup* env() const { return env_ ? &*env_ : nullptr; }

  int64_t per_step() const { return per_step_; }
  int32_t eod() const { return tokenizer_->eod(); }
  size_t num_eval() const { return eval_prompts_.size(); }

  // The prompt in slot `slot` of step `step`: the prompt file in a seeded
  // order (Fisher-Yates over Philox), a new order each epoch.
  int64_t prompt_at(int64_t step, int64_t slot) const {
    const int64_t n = static_cast<int64_t>(prompts_.size()), i = step * per_step_ + slot;
    const int64_t epoch = i / n;
    if (epoch != order_epoch_) {
      order_.resize(static_cast<size_t>(n));
      std::iota(order_.begin(), order_.end(), 0);
      const RandomStream rng(job_.train.seed, hash_name("rl.prompt_order"));
      for (int64_t k = n - 1; k > 0; --k)
        std::swap(order_[k], order_[rng.block(static_cast<uint64_t>(epoch), static_cast<uint64_t>(k))[0] % (k + 1)]);
      order_epoch_ = epoch;
    }
    return order_[static_cast<size_t>(i % n)];
  }

  // The requests of step `step` for the slots s with s mod `stride` == `first`.
  std::vector<RolloutRequest> requests(int64_t step, int64_t first, int64_t stride) const {
    std::vector<RolloutRequest> out;
    for (int64_t slot = first; slot < per_step_; slot += stride) {
      const int64_t p = prompt_at(step, slot);
      out.push_back({.prompt = p, .tokens = tokens_[static_cast<size_t>(p)], .slot = slot,
                     .env_prompt = env_prompt(prompts_[static_cast<size_t>(p)])});
    }
    return out;
  }
  std::vector<RolloutRequest> eval_requests() const {
    std::vector<RolloutRequest> out;
    for (size_t p = 0; p < eval_prompts_.size(); ++p)
      out.push_back({.prompt = static_cast<int64_t>(p), .tokens = eval_tokens_[p], .slot = static_cast<int64_t>(p),
                     .env_prompt = env_prompt(eval_prompts_[p])});
    return out;
  }

  // Reads each completion (up to its end token and the template's stop
  // text) and scores it against its prompt's answer.
  // With an environment the rewards came with the episodes.
  void score(std::vector<Trajectory>& ts, bool eval) const {
    if (env_) return;
    const std::vector<RlPrompt>& source = eval ? eval_prompts_ : prompts_;
    for (Trajectory& t : ts) {
      std::vector<int32_t> ids = t.completion;
      if (!ids.empty() && ids.back() == eod()) ids.pop_back();
      t.reply = reply_text(tokenizer_->decode(ids), stops_);
      t.reward = task_reward(task_, t.reply, source[static_cast<size_t>(t.prompt)].answer);
    }
  }

 private:
  // What an environment is sent of a prompt: its messages (or text) and answer.
  std::string env_prompt(const RlPrompt& p) const {
    if (!env_) return {};
    nlohmann::json j = {{"answer", p.answer}};
    if (p.messages.empty()) {
      j["prompt"] = {{"text", p.text}};
    } else {
      nlohmann::json ms = nlohmann::json::array();
      for (const data::ChatMessage& m : p.messages) ms.push_back({{"role", m.role}, {"content", m.content}});
      j["prompt"] = {{"messages", ms}};
    }
    return j.dump();
  }

  std::vector<std::vector<int32_t>> encode(const std::vector<RlPrompt>& ps, const std::string& file) const {
    std::vector<std::vector<int32_t>> out;
    const int64_t room = job_.train.seq_length + 1 - job_.rl.sampling.max_new_tokens;
    for (size_t i = 0; i < ps.size(); ++i) {
      out.push_back(tokenizer_->encode(prompt_text(ps[i], tmpl_), data::SpecialTokens::recognise));
      const auto n = static_cast<int64_t>(out.back().size());
      if (n == 0) fail("{}: prompt {} is empty once rendered", file, i + 1);
      if (n > room)
        fail("{}: prompt {} has {} tokens; with --max-new-tokens {} it needs --seq-length {} or more", file, i + 1, n,
             job_.rl.sampling.max_new_tokens, n + job_.rl.sampling.max_new_tokens - 1);
    }
    return out;
  }

  const RlJob& job_;
  Task task_;
  std::unique_ptr<data::Tokenizer> tokenizer_;
  data::ChatTemplate tmpl_;
  std::vector<std::string> stops_;
  std::vector<RlPrompt> prompts_, eval_prompts_;
  std::vector<std::vector<int32_t>> tokens_, eval_tokens_;
  int64_t per_step_ = 0;
  std::optional<EnvSetup> env_;
  mutable std::vector<int64_t> order_;
  mutable int64_t order_epoch_ = -1;
};

// Messages on the sync group (learner rank 0 = group rank 0, generator g =
// group rank g + 1), all point to point: a batch goes as its byte count,
// then the bytes; a weight set as its version, then the values (tag
// kWeightsTag). No collective is left pending while a worker samples: a
// rank inside an MPI collective spins on a core, which the sampling and
// training threads need.
constexpr int kWeightsTag = 1;
void send_batch(comm::Group& sync, const std::vector<uint8_t>& bytes, int64_t& count, std::vector<comm::Work>& w) {
  count = static_cast<int64_t>(bytes.size());
  w.push_back(sync.send_async(&count, 1, DType::i64, 0));
  w.push_back(sync.send_async(bytes.data(), count, DType::u8, 0));
}
// A worker's batch, received into buffers that outlive a worker lost
// mid-message (a stopped one could still write into them later).
struct Inbox {
  int64_t count = 0;
  std::vector<uint8_t> bytes;
};
std::vector<Trajectory> recv_batch(comm::Group& sync, int peer, Inbox& in, std::chrono::milliseconds timeout) {
  sync.recv(&in.count, 1, DType::i64, peer, 0, {.timeout = timeout});
  in.bytes.resize(static_cast<size_t>(in.count));
  sync.recv(in.bytes.data(), in.count, DType::u8, peer, 0, {.timeout = timeout});
  return decode_trajectories(in.bytes);
}

// Every learner rank ends with the batch learner rank 0 holds.
void share_batch(comm::Group& learners, std::vector<Trajectory>& ts) {
  if (learners.size() == 1) return;
  std::vector<uint8_t> bytes;
  if (learners.rank() == 0) bytes = encode_trajectories(ts);
  int64_t count = static_cast<int64_t>(bytes.size());
  learners.broadcast(&count, 1, DType::i64, 0);
  bytes.resize(static_cast<size_t>(count));
  learners.broadcast(bytes.data(), count, DType::u8, 0);
  if (learners.rank() != 0) ts = decode_trajectories(bytes);
}

struct BatchStats {
  double reward_mean = 0, reward_std = 0, exact = 0, length = 0, truncated = 0;
  int64_t age_max = 0;
  double age_mean = 0;
  // With an environment: episodes that timed out or failed (rewards and
  // lengths are over the others), replies per episode, replies not learned.
  int64_t env_timeouts = 0, env_errors = 0, env_unaligned = 0;
  double env_turns = 0;
};
BatchStats batch_stats(const std::vector<Trajectory>& ts, int64_t step) {
  BatchStats b;
  double n = 0;
  for (const Trajectory& t : ts) {
    b.env_timeouts += t.env == EnvStatus::timeout;
    b.env_errors += t.env == EnvStatus::error;
    b.age_max = std::max(b.age_max, step - t.version);
    b.age_mean += static_cast<double>(step - t.version) / static_cast<double>(ts.size());
    if (t.failed()) continue;
    n += 1;
    b.reward_mean += t.reward;
    b.exact += t.reward == 1.0;
    b.length += static_cast<double>(t.completion.size());
    b.truncated += t.truncated;
    b.env_turns += t.turns;
    b.env_unaligned += t.unaligned;
  }
  n = std::max(n, 1.0);
  b.reward_mean /= n, b.exact /= n, b.length /= n, b.truncated /= n, b.env_turns /= n;
  for (const Trajectory& t : ts)
    if (!t.failed()) b.reward_std += (t.reward - b.reward_mean) * (t.reward - b.reward_mean) / n;
  b.reward_std = std::sqrt(b.reward_std);
  return b;
}

// The learners' training job as train/job.h builds it (the optimizer's
// state dtypes, --fp16's loss scaler and --save as `claw train` has them).
train::JobConfig learner_job(const RlJob& job) {
  return {.model = job.model, .train = job.train, .adam = job.adam, .parallel = job.parallel, .ckpt = job.ckpt,
          .command = "claw rl"};
}

class Learner {
 public:
  Learner(RlJob& job, comm::World& world, comm::Group* sync, const Problem& problem)
      : job_(job), world_(world), sync_(sync), problem_(problem), layout_(job.model) {
    runtime::RuntimeConfig rc = train::training_runtime_config(learner_job(job_));
    rc.resolve_and_validate(world_.size());
    train::TrainingJob parts = train::build_training_job(learner_job(job_), std::move(rc), world_);
    rt_ = std::move(parts.runtime);
    opt_ = std::move(parts.optimizer);
    scaler_ = std::move(parts.loss_scaler);
    comm::ParallelState& ps = rt_->parallel_state();
    batch_ = std::make_unique<train::GlobalBatch>(job_.train.grad_accumulation_steps(ps.dp().size()),
                                                  job_.train.micro_batch_size, job_.train.seq_length,
                                                  data::PackingOptions{}, ps.dp().size(), ps.dp().rank());
    load();
    if (job_.rl.grpo.kl_beta > 0) {
      // The reference: the weights the run started from, at the learners' layout.
      runtime::RuntimeConfig ref = train::runtime_config(job_.model, job_.train, job_.parallel, /*training=*/false);
      ref.resolve_and_validate(world_.size());
      ref_ = std::make_unique<runtime::Runtime>(ref, world_);
      if (!reference_dir_.empty()) ref_->load_checkpoint({.root = reference_dir_, .optimizer = false}, nullptr);
    }
    saver_ = train::make_saver(learner_job(job_), *rt_, *opt_);
    if (sync_) {
      lost_.assign(static_cast<size_t>(sync_->size()), false);
      for (int g = 0; g < sync_->size(); ++g) inboxes_.push_back(std::make_unique<Inbox>());
    }
    if (world_.rank() == 0)
      local_ = std::make_unique<Generator>(job_.model, rt_->cpu(),
                                           std::max<int64_t>(job_.train.global_batch_size,
                                                             static_cast<int64_t>(problem_.num_eval())),
                                           job_.train.seq_length + 1, problem_.env());
  }

  void run();

 private:
  void load() {
    if (job_.ckpt.load.empty()) return;
    const runtime::LoadedCheckpoint c = rt_->load_checkpoint(
        {.root = job_.ckpt.load, .step = job_.ckpt.ckpt_step, .optimizer = !job_.ckpt.finetune && !job_.ckpt.no_load_optim},
        opt_.get());
    if (!c.loaded) {
      if (job_.ckpt.finetune) fail("--finetune: no checkpoint under --load {}", job_.ckpt.load);
      return;
    }
    reference_dir_ = c.dir;
    if (job_.ckpt.finetune || !c.state.contains("rl")) {
      log::info("rl", "starting from {} (iteration {}) as version 0", c.dir, c.iteration);
      return;
    }
    start_ = c.iteration;
    reference_dir_ = c.state["rl"].value("reference", std::string());
    if (scaler_ && c.state.contains("loss_scaler")) scaler_->load(c.state["loss_scaler"]);
    if (c.optimizer) opt_->set_steps_taken(c.state.value("optimizer_steps", start_));
    log::info("rl", "resuming {} at step {} (weights version {})", c.dir, start_ + 1, start_);
  }

  // The weight set after `version` optimizer steps: to the local generator
  // (learner rank 0) and, with rollout workers, to each of them as a send
  // left pending (a worker receives a set when the staleness rule makes it,
  // so the learner never waits for that) with its buffer kept until done.
  void publish(int64_t version) {
    if (!spare_.empty()) {  // rank 0's buffers of weight sets the workers have taken
      weights_ = std::move(spare_.back());
      spare_.pop_back();
    }
    gather_weights(*rt_, layout_, weights_);
    if (world_.rank() != 0) return;
    load_weights(local_->model(), rt_->cpu(), layout_, weights_.data());
    local_->set_version(version);
    if (!sync_ || version >= job_.train.train_iters) return;
    reap_sends(false, version);
    auto out = std::make_unique<Outgoing>();
    out->version = version;
    out->weights = std::move(weights_);
    out->works.resize(static_cast<size_t>(sync_->size()));
    for (int g = 1; g < sync_->size(); ++g) {
      if (lost_[g]) continue;
      out->works[g].push_back(sync_->send_async(&out->version, 1, DType::i64, g, kWeightsTag));
      out->works[g].push_back(sync_->send_async(out->weights.data(), layout_.total(), DType::f32, g, kWeightsTag));
    }
    outgoing_.push_back(std::move(out));
  }

  // Sent weight sets the workers have taken give their buffers back; all
  // of them at the end. A send that fails (its worker died) loses the
  // worker.
  void reap_sends(bool all, int64_t step) {
    while (!outgoing_.empty()) {
      Outgoing& o = *outgoing_.front();
      bool done = true;
      for (int g = 1; g < static_cast<int>(o.works.size()); ++g)
        for (comm::Work& w : o.works[g]) {
          if (lost_[g]) break;
          try {
            if (all) w.wait(rollout_timeout());
            done = done && w.test();
          } catch (const CommError& e) {
            lose(g, step, e.what());
          }
        }
      if (!done) return;
      spare_.push_back(std::move(o.weights));
      outgoing_.pop_front();
    }
  }

  // Rollout worker g stopped answering (died, or hangs past
  // --rollout-timeout): never talked to again; learner rank 0 samples its
  // prompts from now on.
  void lose(int g, int64_t step, const std::string& why) {
    if (lost_[g]) return;
    lost_[g] = true;
    ++workers_lost_;
    for (const std::unique_ptr<Outgoing>& o : outgoing_)
      for (const comm::Work& w : o->works[g]) w.abandon("rollout worker lost");
    log::warn("rl", "step {}: rollout worker {} (rank {}) is lost: {}; learner rank 0 samples its prompts from now on",
              step + 1, g - 1, world_.size() + g - 1, why);
  }
  std::chrono::milliseconds rollout_timeout() const {
    return std::chrono::milliseconds(static_cast<int64_t>(job_.rl.rollout_timeout_s * 1000));
  }

  // Step `step`'s rollouts of the prompt slots first, first + stride, ...
  // from learner rank 0's own generator (the current weights), scored.
  std::vector<Trajectory> sample_here(int64_t step, int64_t first, int64_t stride) {
    std::vector<Trajectory> ts = local_->generate(problem_.requests(step, first, stride),
                                                  job_.rl.grpo.num_generations, step, job_.rl.sampling);
    problem_.score(ts, false);
    return ts;
  }

  std::vector<Trajectory> rollouts(int64_t step) {
    std::vector<Trajectory> ts;
    if (world_.rank() == 0) {
      if (!sync_) {
        ts = sample_here(step, 0, 1);
      } else {
        const int K = sync_->size() - 1;
        for (int g = 1; g <= K; ++g) {
          if (!lost_[g]) {
            try {
              std::vector<Trajectory> part = recv_batch(*sync_, g, *inboxes_[g], rollout_timeout());
              for (Trajectory& t : part) ts.push_back(std::move(t));
              continue;
            } catch (const CommError& e) {
              lose(g, step, e.what());
            }
          }
          // A lost worker's prompts: sampled here, with the current weights.
          for (Trajectory& t : sample_here(step, g - 1, K)) ts.push_back(std::move(t));
        }
        // Slot order, G completions per slot: the batch does not depend on
        // how the generators split it.
        std::stable_sort(ts.begin(), ts.end(), [](const Trajectory& a, const Trajectory& b) { return a.slot < b.slot; });
      }
      CLAW_CHECK(static_cast<int64_t>(ts.size()) == job_.train.global_batch_size, "step {}: {} rollouts for a batch of {}",
                 step + 1, ts.size(), job_.train.global_batch_size);
      if (std::all_of(ts.begin(), ts.end(), [](const Trajectory& t) { return t.failed(); }))
        fail("every episode of step {} failed ({} of them), e.g. {}; is the environment at --env-url {} running?",
             step + 1, ts.size(), ts.front().reply, job_.rl.env.url);
      const int64_t K = job_.rl.async ? job_.rl.max_staleness : 0;
      for (const Trajectory& t : ts)
        CLAW_CHECK(t.step == step && step - t.version <= K && t.version <= step,
                   "step {}: a rollout of step {} sampled with weights {} (max staleness {})", step + 1, t.step + 1,
                   t.version, K);
    }
    share_batch(*world_.world_group(), ts);
    return ts;
  }

  // The batch's rows and what the loss needs of each.
  void build(const std::vector<Trajectory>& ts, int64_t step) {
    const int64_t T = job_.train.seq_length, GB = job_.train.global_batch_size;
    const int32_t pad = problem_.eod();
    std::vector<double> rewards;
    std::vector<bool> valid;  // an episode whose environment failed is left out of its group
    for (const Trajectory& t : ts) rewards.push_back(t.reward), valid.push_back(!t.failed());
    const std::vector<double> adv =
        group_advantages(rewards, job_.rl.grpo.num_generations, job_.rl.grpo.advantage_no_std, &valid);
    samples_.assign(static_cast<size_t>(GB), {});
    std::vector<int32_t> tokens(static_cast<size_t>(GB * T), pad), targets(static_cast<size_t>(GB * T), -1);
    for (int64_t i = 0; i < GB; ++i) {
      const Trajectory& t = ts[static_cast<size_t>(i)];
      std::vector<int32_t> seq = t.prompt_tokens;
      seq.insert(seq.end(), t.completion.begin(), t.completion.end());
      const auto P = static_cast<int64_t>(t.prompt_tokens.size()), n = static_cast<int64_t>(t.completion.size());
      CLAW_CHECK(P + n <= T + 1, "a rollout of {} tokens in rows of {}", P + n, T + 1);
      for (int64_t k = 0; k < std::min<int64_t>(T, P + n); ++k) tokens[i * T + k] = seq[k];
      PolicySample& s = samples_[static_cast<size_t>(i)];
      s.prompt_len = P;
      s.advantage = adv[static_cast<size_t>(i)];
      s.on_policy = t.version == step;
      for (int64_t j = 0; j < n; ++j) {
        if (!t.learned(static_cast<size_t>(j))) continue;
        targets[i * T + P - 1 + j] = t.completion[j];
        s.behaviour.push_back(t.logprobs[j]);
        if (!t.learn.empty()) s.positions.push_back(static_cast<int32_t>(P - 1 + j));
      }
      const size_t learned = s.behaviour.size();
      if (job_.rl.grpo.importance_correction) s.proximal.assign(learned, 0.0f);
      if (job_.rl.grpo.kl_beta > 0) s.reference.assign(learned, 0.0f);
    }
    // This rank's rows: micro-batch k holds global rows (k DP + r) B ... + B.
    const int64_t B = batch_->B(), M = batch_->micro_batches();
    std::vector<int32_t> mine_t, mine_y;
    for (int64_t k = 0; k < M; ++k) {
      const int64_t row0 = batch_->sample_offset(k);
      mine_t.insert(mine_t.end(), tokens.begin() + row0 * T, tokens.begin() + (row0 + B) * T);
      mine_y.insert(mine_y.end(), targets.begin() + row0 * T, targets.begin() + (row0 + B) * T);
    }
    batch_->assign(mine_t, mine_y);
  }

  // Per-token log-probabilities of the batch's completions under `rt`'s
  // model into samples_[i].*field (the last pipeline stage's ranks), in the
  // kernels of the training forward: the proximal figures of an on-policy
  // sample are its behaviour ones, and the KL to the reference is 0 at the
  // reference's weights, to the bit.
  void token_logps(runtime::Runtime& rt, std::vector<float> PolicySample::*field, uint64_t sample0) {
    TokenLogps record([&](int64_t sample, int64_t t, float lp) {
      PolicySample& s = samples_[static_cast<size_t>(sample - static_cast<int64_t>(sample0))];
      const int64_t j = s.token_at(t);
      CLAW_CHECK(j >= 0, "position {} of sample {} holds no learned token", t, sample);
      (s.*field)[static_cast<size_t>(j)] = lp;
    }, job_.rl.grpo.learner_batch_invariant);
    train::eval_loss(rt.model(), rt.cpu(), *batch_, job_.train.seed, sample0, &record);
  }

  // Greedy replies to the held-out prompts with the local generator's weights.
  void evaluate(int64_t version, nlohmann::json& rec) {
    if (problem_.num_eval() == 0 || world_.rank() != 0) return;
    const auto t0 = clock::now();
    std::vector<Trajectory> ts = local_->generate(problem_.eval_requests(), 1, version, job_.rl.sampling, true);
    problem_.score(ts, true);
    const BatchStats b = batch_stats(ts, version);
    rec["eval_version"] = version;
    rec["eval_reward"] = b.reward_mean;
    rec["eval_exact_match"] = b.exact;
    log::info("eval", "weights version {}: held-out mean reward {:.4f}, exact match {:.3f} over {} prompts ({:.1f} s); "
              "first reply: '{}'",
              version, b.reward_mean, b.exact, ts.size(), seconds_since(t0), ts.front().reply);
  }

  void save(int64_t iteration) {
    ckpt::SaveInfo info{.iteration = iteration, .model = job_.ckpt.model_flags, .args = job_.ckpt.args};
    info.state = {{"optimizer_steps", opt_->steps_taken()},
                  {"seed", job_.train.seed},
                  {"rl", {{"version", iteration}, {"reference", reference_dir_}}},
                  {"rng", {{"kind", "philox4x32-10"}, {"seed", job_.train.seed}}}};
    if (scaler_) info.state["loss_scaler"] = scaler_->state();
    saver_->save(rt_->checkpoint_shards(opt_.get()), std::move(info));
  }

  RlJob& job_;
  comm::World& world_;
  comm::Group* sync_;
  const Problem& problem_;
  WeightLayout layout_;
  std::unique_ptr<runtime::Runtime> rt_, ref_;
  std::unique_ptr<optim::AdamW> opt_;
  std::unique_ptr<optim::LossScaler> scaler_;  // --fp16
  std::unique_ptr<train::GlobalBatch> batch_;
  std::unique_ptr<ckpt::Saver> saver_;
  std::unique_ptr<Generator> local_;
  std::vector<float> weights_;
  struct Outgoing {  // a weight set on its way to the workers
    int64_t version = 0;
    std::vector<float> weights;
    std::vector<std::vector<comm::Work>> works;  // per worker g (sync group rank)
  };
  std::deque<std::unique_ptr<Outgoing>> outgoing_;
  std::vector<bool> lost_;  // per sync group rank
  std::vector<std::unique_ptr<Inbox>> inboxes_;
  int64_t workers_lost_ = 0;
  std::vector<std::vector<float>> spare_;
  std::vector<PolicySample> samples_;
  std::string reference_dir_;
  int64_t start_ = 0;
};

void Learner::run() {
  const int64_t iters = job_.train.train_iters, GB = job_.train.global_batch_size;
  comm::ParallelState& ps = rt_->parallel_state();
  GrpoLoss loss(job_.rl.grpo);
  train::MetricsWriter metrics(world_.rank() == 0 ? job_.train.metrics_file : std::string(),
                               world_.rank() == 0 ? job_.train.tensorboard_dir : std::string());
  log::info("rl", "GRPO: {} steps of {} prompts x {} completions; {}; max staleness {}; task {}; loss {}{}{}",
            iters, problem_.per_step(), job_.rl.grpo.num_generations,
            sync_ ? fmt::format("{} rollout worker(s){}", sync_->size() - 1, job_.rl.async ? ", asynchronous" : "")
                  : std::string("generation on learner rank 0 (colocated)"),
            job_.rl.async ? job_.rl.max_staleness : 0, job_.rl.task, job_.rl.grpo.loss_agg_mode,
            job_.rl.grpo.kl_beta > 0 ? fmt::format(", KL beta {}", job_.rl.grpo.kl_beta) : "",
            job_.rl.grpo.importance_correction ? fmt::format(", importance correction (C = {})",
                                                            job_.rl.grpo.is_truncation)
                                               : "");
  publish(start_);
  const auto start = clock::now();
  for (int64_t step = start_; step < iters; ++step) {
    nlohmann::json rec = {{"step", step + 1}};
    if (job_.train.eval_interval > 0 && (step - start_) % job_.train.eval_interval == 0) evaluate(step, rec);
    const auto t0 = clock::now();
    const std::vector<Trajectory> ts = rollouts(step);
    const double gen_s = seconds_since(t0);
    const auto t1 = clock::now();
    build(ts, step);
    const uint64_t sample0 = static_cast<uint64_t>(step * GB);
    if (job_.rl.grpo.importance_correction) token_logps(*rt_, &PolicySample::proximal, sample0);
    if (ref_) token_logps(*ref_, &PolicySample::reference, sample0);
    loss.set_batch(static_cast<int64_t>(sample0), &samples_);
    const double lr = job_.lr.at(step);
    const train::StepResult r =
        train::train_step(rt_->model(), *opt_, rt_->cpu(), *batch_, step, lr, job_.train.seed, sample0, {}, &loss,
                          scaler_.get());
    if (r.skipped)
      log::warn("rl", "step {}: the gradients overflowed at loss scale {:g}; the weights did not move (loss scale now "
                "{:g})", step + 1, r.loss_scale, scaler_->scale());
    const double train_s = seconds_since(t1);
    publish(step + 1);
    const double step_s = seconds_since(t0);

    // The loss's sums from the last stage's ranks of each replica.
    const GrpoSums g = loss.take();
    double sums[10] = {g.sequences, g.tokens, g.kl, g.clipped, g.ratio, g.is_weight, g.is_truncated,
                       g.mismatch_tokens, g.mismatch_sum, g.mismatch_over};
    double worst = g.mismatch_max;
    for (comm::Group* grp : {&ps.pp(), &ps.dp()})
      if (grp->size() > 1) {
        grp->all_reduce(sums, 10, DType::f64);
        worst = grp->all_reduce_value(worst, comm::ReduceOp::max);
      }
    const double tok = std::max(sums[1], 1.0);
    const BatchStats b = batch_stats(ts, step);
    rec.update({{"loss", r.loss}, {"grad_norm", r.grad_norm}, {"lr", lr},
                {"reward", b.reward_mean}, {"reward_std", b.reward_std}, {"exact_match", b.exact},
                {"completion_length", b.length}, {"truncated", b.truncated},
                {"clip_fraction", sums[3] / tok}, {"ratio", sums[4] / tok}, {"kl", sums[2] / tok},
                {"is_weight", sums[5] / tok}, {"is_truncated", sums[6] / tok},
                {"logprob_mismatch_mean", sums[7] > 0 ? sums[8] / sums[7] : 0.0},
                {"logprob_mismatch_max", worst}, {"on_policy_tokens", sums[7]},
                {"logprob_mismatch_over_1e-5", sums[9]},
                {"staleness_max", b.age_max}, {"staleness_mean", b.age_mean},
                {"env_timeouts", b.env_timeouts}, {"env_errors", b.env_errors}, {"env_turns", b.env_turns},
                {"env_unaligned_turns", b.env_unaligned}, {"workers_lost", workers_lost_},
                {"rollout_wait_s", gen_s}, {"train_s", train_s}, {"step_s", step_s},
                {"samples_per_s", static_cast<double>(GB) / step_s},
                {"elapsed_s", seconds_since(start)}, {"mem_bytes", peak_rss_bytes()}});
    if (scaler_) rec.update({{"loss_scale", r.loss_scale}, {"skipped", r.skipped}});
    const bool last = step + 1 == iters;
    if (last && job_.train.eval_interval > 0) evaluate(step + 1, rec);
    if (saver_) {
      saver_->poll();
      if ((job_.ckpt.save_interval > 0 && (step + 1) % job_.ckpt.save_interval == 0) || last) save(step + 1);
    }
    metrics.write(rec);
    if ((step + 1) % job_.train.log_interval == 0 || last || step == start_)
      log::info("rl", "step {}/{}: reward {:.4f} (exact {:.3f}), loss {:.5f}, grad norm {:.3f}, clipped {:.3f}, "
                "kl {:.5f}, mismatch {:.2e}, age max {}, rollouts {:.2f} s, train {:.2f} s, {:.1f} samples/s{}",
                step + 1, iters, b.reward_mean, b.exact, r.loss, r.grad_norm, sums[3] / tok, sums[2] / tok,
                rec["logprob_mismatch_mean"].get<double>(), b.age_max, gen_s, train_s,
                static_cast<double>(GB) / step_s,
                problem_.env() ? fmt::format("; environment: {:.2f} replies an episode, {} timed out, {} failed",
                                             b.env_turns, b.env_timeouts, b.env_errors)
                               : std::string());
  }
  reap_sends(true, iters);
  if (saver_) saver_->finish();
  log::info("rl", "done: {} steps in {:.1f} s, peak RSS {}", iters - start_, seconds_since(start),
            format_bytes(static_cast<double>(peak_rss_bytes())));
}

// A generator rank: samples its share of every step's prompts with the
// newest weights it holds that the staleness rule allows.
void run_generator(const RlJob& job, int local_ranks, comm::Group& sync, const Problem& problem) {
  const int K = sync.size() - 1, me = sync.rank() - 1;
  const int64_t iters = job.train.train_iters, stale = job.rl.async ? job.rl.max_staleness : 0;
  const WeightLayout layout(job.model);
  // Threads as a runtime takes them: the node's, shared by the ranks on it.
  const CpuCtx cpu = kernels::make_cpu_ctx(job.train.num_threads > 0 ? job.train.num_threads
                                                                     : std::max(1, kernels::default_num_threads() /
                                                                                       local_ranks));
  const int64_t slots = (problem.per_step() + K - 1) / K;
  Generator gen(job.model, cpu, slots * job.rl.grpo.num_generations, job.train.seq_length + 1, problem.env());
  std::vector<float> weights(static_cast<size_t>(layout.total()));
  int64_t received = -1;  // the newest weight set's version
  auto receive = [&] {     // the next set learner rank 0 sent (they come in version order)
    sync.recv(&received, 1, DType::i64, 0, kWeightsTag);
    sync.recv(weights.data(), layout.total(), DType::f32, 0, kWeightsTag);
  };
  auto take = [&] {
    receive();
    load_weights(gen.model(), cpu, layout, weights.data());
    gen.set_version(received);
  };
  take();
  std::deque<std::vector<uint8_t>> out;
  std::deque<int64_t> counts;
  std::vector<comm::Work> sends;
  for (int64_t step = gen.version(); step < iters; ++step) {
    while (gen.version() < step - stale) take();  // pauses here when it would run further ahead
    std::vector<Trajectory> ts = gen.generate(problem.requests(step, me, K), job.rl.grpo.num_generations, step,
                                              job.rl.sampling);
    problem.score(ts, false);
    out.push_back(encode_trajectories(ts));
    counts.push_back(0);
    send_batch(sync, out.back(), counts.back(), sends);
  }
  for (comm::Work& w : sends) w.wait();
  while (received + 1 < iters) receive();  // the sets sent while it ran ahead, unused: every send completes
}

}  // namespace

void run_rl(RlJob job, comm::World& world) {
  if (job.model.hidden_dropout > 0 || job.model.lora.dropout > 0)
    fail("--{} {}: GRPO compares the learner's log-probabilities with the generator's, which has no dropout; use 0",
         job.model.hidden_dropout > 0 ? "hidden-dropout" : "lora-dropout",
         job.model.hidden_dropout > 0 ? job.model.hidden_dropout : job.model.lora.dropout);
  job.train.resolve_and_validate(1);
  job.rl.validate(world.size(), job.train.global_batch_size);
  job.lr.decay_iters = job.lr.decay_iters > 0 ? job.lr.decay_iters
                                               : std::max(job.train.train_iters, job.lr.warmup_iters + 1);
  job.lr.validate();
  if (job.parallel.dp.diloco_inner_steps > 0)
    fail("--diloco-inner-steps {} with claw rl: the learners take every step together (one weight version a step); "
         "drop the flag",
         job.parallel.dp.diloco_inner_steps);
  if (job.adam.main_params_dtype != DType::f32)
    fail("--main-params-dtype {} with claw rl: the learners publish fp32 weights to the generators; use fp32",
         dtype_name(job.adam.main_params_dtype));
  train::validate_job(learner_job(job));
  const int N = world.size(), K = job.rl.rollout_workers, L = N - K;
  std::vector<int> learners(static_cast<size_t>(L)), generators(static_cast<size_t>(K));
  std::iota(learners.begin(), learners.end(), 0);
  std::iota(generators.begin(), generators.end(), L);
  std::vector<std::vector<int>> parts = {learners};
  if (K > 0) parts.push_back(generators);
  std::unique_ptr<comm::World> mine = world.sub_world(world.rank() < L ? "learners" : "generators", parts);
  // The sync group: learner rank 0 and every generator; the other learners alone.
  std::shared_ptr<comm::Group> sync;
  if (K > 0) {
    std::vector<std::vector<int>> lists = {{0}};
    for (int g : generators) lists[0].push_back(g);
    for (int r = 1; r < L; ++r) lists.push_back({r});
    sync = world.split("rl_sync", lists);
  }
  const Problem problem(job);
  job.rl.sampling.stop_tokens = {problem.eod()};  // a completion ends with the end of text (SFT taught it)
  if (world.rank() < L) {
    const comm::RankGrid grid = comm::RankGrid::make(L, job.parallel.sizes);
    if (grid.cp > 1)
      fail("--context-parallel-size {} for the learners: a sequence's GRPO loss would be split across the CP ranks; "
           "not available yet (the learners run --context-parallel-size 1)",
           grid.cp);
    job.train.resolve_and_validate(grid.dp);
    Learner learner(job, *mine, K > 0 && world.rank() == 0 ? sync.get() : nullptr, problem);
    learner.run();
  } else {
    run_generator(job, world.local_size(), *sync, problem);
  }
  // Learners wait for each other; a worker is done once learner rank 0 has
  // its last batch and it has every weight set (no barrier with the whole
  // job: a lost worker would never join it).
  if (world.rank() < L) mine->world_group()->barrier();
}

}  // namespace claw::rl
