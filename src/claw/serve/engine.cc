#include "claw/serve/engine.h"

#include <algorithm>
#include <cstring>

#include "claw/core/error.h"
#include "claw/core/log.h"

namespace claw::serve {

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::stop: return "stop";
    case FinishReason::length: return "length";
    case FinishReason::cancelled: return "cancelled";
    default: return "";
  }
}

struct Engine::Seq {
  int64_t id = 0;
  GenerationRequest req;
  std::vector<int32_t> tokens;  // prompt, then what was generated
  int64_t prompt_len = 0;
  int64_t generated = 0;
  std::vector<int32_t> blocks;    // block table
  std::vector<BlockHash> hashes;  // of the leading full blocks that are registered
  int64_t computed = 0;           // leading tokens whose keys and values are cached
  bool rope_long = false;         // longrope: the cached keys were rotated by the long factors
  int64_t prompt_scored = 1;      // prompt_logprobs: the next prompt position to score
  bool admitted_once = false;
};

Engine::Engine(model::GPT& model, const CpuCtx& cpu, EngineConfig cfg)
    : model_(model),
      cpu_(cpu),
      cfg_(cfg),
      vocab_(model.config().vocab_size),
      pool_(cfg.num_blocks, cfg.block_size, cfg.prefix_caching),
      cache_(model.config(), model.tp().dims(), cfg.num_blocks, cfg.block_size, cfg.kv_cache_dtype) {
  if (const model::RopeScaling& rs = model.config().rope_scaling; rs.longrope())
    rope_original_ = rs.original_max_position_embeddings;
  const int64_t context = model.config().max_position_embeddings;
  if (cfg_.max_model_len <= 0) cfg_.max_model_len = context;
  if (cfg_.max_model_len > context)
    fail("--max-model-len {} exceeds the model's context of {} tokens", cfg_.max_model_len, context);
  // One sequence must always be able to finish alone (preemption frees the rest).
  if (cfg_.max_model_len > cfg_.num_blocks * cfg_.block_size) {
    log::info("serve", "the KV cache holds {} tokens ({} blocks of {}); --max-model-len lowered from {}",
             cfg_.num_blocks * cfg_.block_size, cfg_.num_blocks, cfg_.block_size, cfg_.max_model_len);
    cfg_.max_model_len = cfg_.num_blocks * cfg_.block_size;
  }
  if (cfg_.max_num_batched_tokens < 1) fail("--max-num-batched-tokens must be at least 1");
  if (cfg_.max_num_seqs < 1) fail("--max-num-seqs must be at least 1");
}

Engine::~Engine() {
  try {
    stop_followers();
  } catch (const std::exception& e) {
    log::error("serve", "could not stop the tensor-parallel ranks: {}", e.what());
  }
}

void Engine::validate(const GenerationRequest& r) const {
  r.sampling.validate();
  if (r.prompt.empty()) fail("prompt: empty (at least one token)");
  if (r.max_tokens < 1) fail("max_tokens must be at least 1, got {}", r.max_tokens);
  if (r.top_logprobs < 0 || r.top_logprobs > 20) fail("top_logprobs must be between 0 and 20, got {}", r.top_logprobs);
  if (r.prompt_logprobs < -1 || r.prompt_logprobs > 20)
    fail("prompt_logprobs must be between 0 and 20 (or -1: none), got {}", r.prompt_logprobs);
  const int64_t n = static_cast<int64_t>(r.prompt.size());
  if (n + 1 > cfg_.max_model_len)
    fail("prompt: {} tokens leave no room to generate within the context of {} tokens", n, cfg_.max_model_len);
  for (int32_t t : r.prompt)
    if (t < 0 || t >= vocab_) fail("prompt: token id {} is outside the vocabulary [0, {})", t, vocab_);
}

int64_t Engine::add(GenerationRequest r) {
  validate(r);
  const int64_t n = static_cast<int64_t>(r.prompt.size());
  auto s = std::make_unique<Seq>();
  s->id = next_id_++;
  s->tokens = r.prompt;
  s->prompt_len = n;
  s->req = std::move(r);
  waiting_.push_back(s.get());
  const int64_t id = s->id;
  seqs_.emplace(id, std::move(s));
  return id;
}

bool Engine::rope_long(const Seq& s) const {
  return rope_original_ > 0 && static_cast<int64_t>(s.tokens.size()) > rope_original_;
}

BlockHash Engine::hash_root(const Seq& s) const { return rope_long(s) ? BlockHash{.lo = 1} : BlockHash{}; }

void Engine::release(Seq& s) {
  for (auto it = s.blocks.rbegin(); it != s.blocks.rend(); ++it) pool_.release(*it);
  s.blocks.clear();
  s.hashes.clear();
  s.computed = 0;
}

void Engine::finish(Seq& s) {
  release(s);
  std::erase(running_, &s);
  std::erase(waiting_, &s);
  seqs_.erase(s.id);
}

void Engine::cancel(int64_t id) {
  const auto it = seqs_.find(id);
  if (it != seqs_.end()) finish(*it->second);
}

void Engine::preempt(Seq& s) {
  release(s);
  std::erase(running_, &s);
  waiting_.push_front(&s);
  ++stats_.preemptions;
}

// Takes the cached blocks that start the sequence's tokens, leaving at least
// its last token to compute (its logits are what the step needs), and every
// prompt position whose logits still have a prompt token to score.
void Engine::match_prefix(Seq& s) {
  const int64_t bs = cfg_.block_size;
  int64_t full = (static_cast<int64_t>(s.tokens.size()) - 1) / bs;
  if (s.req.prompt_logprobs >= 0 && s.prompt_scored < s.prompt_len) full = std::min(full, (s.prompt_scored - 1) / bs);
  BlockHash parent = hash_root(s);
  int64_t found = 0;
  for (int64_t i = 0; i < full; ++i) {
    const int32_t* tok = s.tokens.data() + i * bs;
    const BlockHash h = BlockPool::hash(parent, tok, bs);
    const int32_t b = pool_.lookup(h, parent, tok);
    if (b < 0) break;
    pool_.retain(b);
    s.blocks.push_back(b);
    s.hashes.push_back(h);
    parent = h;
    ++found;
  }
  if (pool_.prefix_caching()) pool_.count_lookup(full, found);
  s.computed = found * bs;
  stats_.cached_tokens += found * bs;
}

bool Engine::ensure_blocks(Seq& s, int64_t positions) {
  const int64_t need = (positions + cfg_.block_size - 1) / cfg_.block_size;
  while (static_cast<int64_t>(s.blocks.size()) < need) {
    const int32_t b = pool_.allocate();
    if (b < 0) return false;
    s.blocks.push_back(b);
  }
  return true;
}

void Engine::register_full_blocks(Seq& s) {
  const int64_t bs = cfg_.block_size, full = s.computed / bs;
  for (int64_t i = static_cast<int64_t>(s.hashes.size()); i < full; ++i) {
    const BlockHash parent = i > 0 ? s.hashes[i - 1] : hash_root(s);
    const int32_t* tok = s.tokens.data() + i * bs;
    const BlockHash h = BlockPool::hash(parent, tok, bs);
    pool_.register_full(s.blocks[i], h, parent, tok);
    s.hashes.push_back(h);
  }
}

std::vector<Engine::Scheduled> Engine::schedule() {
  std::vector<Scheduled> work;
  int64_t budget = cfg_.max_num_batched_tokens;
  bool preempted = false;
  // Running sequences, oldest first; the newest give way when blocks run out.
  for (size_t i = 0; i < running_.size() && budget > 0;) {
    Seq& s = *running_[i];
    if (s.computed > 0 && s.rope_long != rope_long(s)) release(s);  // longrope's cross-over: compute it again
    s.rope_long = rope_long(s);
    const int64_t n = std::min<int64_t>(static_cast<int64_t>(s.tokens.size()) - s.computed, budget);
    bool fits = ensure_blocks(s, s.computed + n);
    while (!fits && running_.back() != &s) {
      preempt(*running_.back());
      preempted = true;
      fits = ensure_blocks(s, s.computed + n);
    }
    if (!fits) {
      preempt(s);
      preempted = true;
      break;
    }
    work.push_back({&s, n});
    budget -= n;
    ++i;
  }
  // Waiting requests in arrival order (a preempted one is at the front).
  while (!preempted && budget > 0 && !waiting_.empty() &&
         static_cast<int64_t>(running_.size()) < cfg_.max_num_seqs) {
    Seq& s = *waiting_.front();
    s.rope_long = rope_long(s);
    match_prefix(s);
    const int64_t n = std::min<int64_t>(static_cast<int64_t>(s.tokens.size()) - s.computed, budget);
    if (!ensure_blocks(s, s.computed + n)) {
      stats_.cached_tokens -= s.computed;
      release(s);
      break;
    }
    if (!s.admitted_once) stats_.prompt_tokens += s.prompt_len;
    s.admitted_once = true;
    waiting_.pop_front();
    running_.push_back(&s);
    work.push_back({&s, n});
    budget -= n;
  }
  return work;
}

bool Engine::step() {
  CLAW_CHECK(model_.tp().rank() == 0, "Engine::step on tensor-parallel rank {}: ranks > 0 follow()",
             model_.tp().rank());
  if (idle()) return false;
  const std::vector<Scheduled> work = schedule();
  if (work.empty()) {
    // Nothing fits: only possible when a waiting prompt needs more blocks
    // than are free while nothing runs, which add() rules out.
    CLAW_CHECK(!running_.empty() || waiting_.empty(), "the KV cache cannot hold the next request");
    return !idle();
  }

  // One forward over every scheduled token; sequences whose every token is
  // then cached get their next token (the logits of their last row).
  std::vector<int32_t> tokens;
  std::vector<StepSeq> plan;
  std::vector<int64_t> ready_rows;
  std::vector<Seq*> ready;
  struct PromptRow {
    Seq* seq;
    int64_t row, position;  // the row's logits score the prompt token at position
  };
  std::vector<PromptRow> prompt_rows;
  for (const Scheduled& w : work) {
    Seq& s = *w.seq;
    const int64_t first_row = static_cast<int64_t>(tokens.size());
    if (s.req.prompt_logprobs >= 0)
      for (int64_t j = std::max(s.computed, s.prompt_scored - 1); j < std::min(s.computed + w.n, s.prompt_len - 1); ++j)
        prompt_rows.push_back({&s, first_row + j - s.computed, j + 1});
    tokens.insert(tokens.end(), s.tokens.begin() + s.computed, s.tokens.begin() + s.computed + w.n);
    plan.push_back({.blocks = s.blocks.data(), .num_blocks = static_cast<int64_t>(s.blocks.size()),
                    .context = s.computed, .num_tokens = w.n, .known = static_cast<int64_t>(s.tokens.size())});
    if (s.computed + w.n == static_cast<int64_t>(s.tokens.size())) {
      ready.push_back(&s);
      ready_rows.push_back(static_cast<int64_t>(tokens.size()) - 1);
    }
  }
  const int64_t R = static_cast<int64_t>(ready.size());
  for (const PromptRow& p : prompt_rows) ready_rows.push_back(p.row);  // logits rows R, R + 1, ...
  if (tp_leader()) send_step(tokens, plan, ready_rows);
  run_step(tokens, std::move(plan), ready_rows);
  for (const Scheduled& w : work) {
    w.seq->computed += w.n;
    register_full_blocks(*w.seq);
  }
  // Prompt scores first (a request sees them before its first token); a
  // request whose callback refuses one is dropped after this step's loop.
  std::vector<Seq*> dropped;
  for (size_t k = 0; k < prompt_rows.size(); ++k) {
    Seq& s = *prompt_rows[k].seq;
    if (std::find(dropped.begin(), dropped.end(), &s) != dropped.end()) continue;
    const float* l = logits_.data() + (R + static_cast<int64_t>(k)) * vocab_;
    const int64_t pos = prompt_rows[k].position;
    TokenScores sc = score_token(l, vocab_, s.tokens[pos], s.req.prompt_logprobs);
    const TokenOutput out{.token = s.tokens[pos], .logprob = sc.logprob, .top = std::move(sc.top), .index = pos,
                          .prompt = true};
    s.prompt_scored = pos + 1;
    if (s.req.on_token && !s.req.on_token(out)) dropped.push_back(&s);
  }
  for (int64_t i = 0; i < R; ++i) {
    Seq& s = *ready[i];
    if (std::find(dropped.begin(), dropped.end(), &s) != dropped.end()) continue;
    const float* l = logits_.data() + i * vocab_;
    const SampledToken t = sample_token(l, vocab_, s.req.sampling, static_cast<uint64_t>(s.generated),
                                        /*with_logprob=*/false);
    TokenOutput out{.token = t.token, .index = s.generated};
    out.logits = {l, static_cast<size_t>(vocab_)};
    if (s.req.logprob || s.req.top_logprobs > 0) {  // one pass over the vocabulary for both
      TokenScores sc = score_token(l, vocab_, t.token, s.req.top_logprobs);
      out.logprob = sc.logprob;
      out.top = std::move(sc.top);
    }
    s.tokens.push_back(t.token);
    ++s.generated;
    ++stats_.generated_tokens;
    const bool stop = std::find(s.req.stop_tokens.begin(), s.req.stop_tokens.end(), t.token) != s.req.stop_tokens.end();
    if (stop)
      out.finish = FinishReason::stop;
    else if (s.generated >= s.req.max_tokens || static_cast<int64_t>(s.tokens.size()) >= cfg_.max_model_len)
      out.finish = FinishReason::length;
    const bool keep = !s.req.on_token || s.req.on_token(out);
    if (out.finish != FinishReason::none || !keep) finish(s);
  }
  for (Seq* s : dropped) finish(*s);
  return true;
}

void Engine::run_step(const std::vector<int32_t>& tokens, std::vector<StepSeq> plan,
                      const std::vector<int64_t>& ready_rows) {
  const int64_t N = static_cast<int64_t>(tokens.size()), C = model_.config().hidden_size;
  cache_.set_step(std::move(plan));
  model::StepCtx ctx{.cpu = cpu_, .B = 1, .T = N};
  const Tensor hidden = model_.forward_cached(ctx, tokens.data(), cache_);
  ++stats_.steps;
  stats_.computed_tokens += N;
  const int64_t R = static_cast<int64_t>(ready_rows.size());
  if (R == 0) return;
  rows_.resize(static_cast<size_t>(R * C));
  for (int64_t i = 0; i < R; ++i) std::copy_n(hidden.data<float>() + ready_rows[i] * C, C, rows_.data() + i * C);
  logits_.resize(static_cast<size_t>(R * vocab_));
  model::StepCtx lctx{.cpu = cpu_, .B = R, .T = 1};
  lctx.batch_invariant = true;
  model_.full_logits(lctx, Tensor(rows_.data(), DType::f32, {R, C}), logits_.data());
}

// A step's message from the TP leader: a header {N, sequences, ready rows,
// block ids} (N < 0: stop), then the tokens, each sequence's context,
// new-token count and block count, the block ids, the ready rows.
void Engine::send_step(const std::vector<int32_t>& tokens, const std::vector<StepSeq>& plan,
                       const std::vector<int64_t>& ready_rows) {
  int64_t ids = 0;
  for (const StepSeq& s : plan) ids += s.num_blocks;
  int64_t header[4] = {static_cast<int64_t>(tokens.size()), static_cast<int64_t>(plan.size()),
                       static_cast<int64_t>(ready_rows.size()), ids};
  comm::Group& g = *model_.tp().group;
  g.broadcast(header, 4, DType::i64, 0);
  std::vector<int64_t> msg(tokens.begin(), tokens.end());
  for (const StepSeq& s : plan) msg.insert(msg.end(), {s.context, s.num_tokens, s.num_blocks, s.known});
  for (const StepSeq& s : plan) msg.insert(msg.end(), s.blocks, s.blocks + s.num_blocks);
  msg.insert(msg.end(), ready_rows.begin(), ready_rows.end());
  g.broadcast(msg.data(), static_cast<int64_t>(msg.size()), DType::i64, 0);
}

void Engine::stop_followers() {
  if (!tp_leader() || followers_stopped_) return;
  followers_stopped_ = true;
  int64_t header[4] = {-1, 0, 0, 0};
  model_.tp().group->broadcast(header, 4, DType::i64, 0);
}

void Engine::follow() {
  CLAW_CHECK(model_.tp().size() > 1 && model_.tp().rank() > 0, "follow() is for tensor-parallel ranks > 0");
  comm::Group& g = *model_.tp().group;
  for (;;) {
    int64_t header[4];
    g.broadcast(header, 4, DType::i64, 0);
    const int64_t N = header[0], S = header[1], R = header[2], ids = header[3];
    if (N < 0) return;
    std::vector<int64_t> msg(static_cast<size_t>(N + 4 * S + ids + R));
    g.broadcast(msg.data(), static_cast<int64_t>(msg.size()), DType::i64, 0);
    std::vector<int32_t> tokens(msg.begin(), msg.begin() + N);
    std::vector<std::vector<int32_t>> tables(static_cast<size_t>(S));
    std::vector<StepSeq> plan(static_cast<size_t>(S));
    const int64_t* p = msg.data() + N;
    const int64_t* id = p + 4 * S;
    for (int64_t s = 0; s < S; ++s) {
      tables[s].assign(id, id + p[4 * s + 2]);
      id += p[4 * s + 2];
      plan[s] = {.blocks = tables[s].data(), .num_blocks = p[4 * s + 2], .context = p[4 * s], .num_tokens = p[4 * s + 1],
                 .known = p[4 * s + 3]};
    }
    run_step(tokens, std::move(plan), std::vector<int64_t>(id, id + R));
  }
}

EngineStats Engine::stats() const {
  EngineStats s = stats_;
  s.running = static_cast<int64_t>(running_.size());
  s.waiting = static_cast<int64_t>(waiting_.size());
  s.blocks_used = pool_.num_used();
  s.blocks_free = pool_.num_free();
  return s;
}

}  // namespace claw::serve
