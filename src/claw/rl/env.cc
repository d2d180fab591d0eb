#include "claw/rl/env.h"

#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <mutex>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "claw/core/error.h"
#include "claw/core/log.h"
#include "claw/rl/rollout.h"
#include "claw/serve/async_engine.h"
#include "claw/serve/http_server.h"

namespace claw::rl {

void EnvConfig::validate() const {
  if (url.empty()) return;
  if (!url.starts_with("http://"))
    fail("--env-url {}: expected http://HOST:PORT[/PATH] (the environment's server; it gets POST PATH/rollout)", url);
  if (!(timeout_s > 0)) fail("--env-timeout {}: expected seconds > 0", timeout_s);
  if (max_turns < 1) fail("--env-max-turns {}: expected 1 or more", max_turns);
}

namespace {
using Clock = std::chrono::steady_clock;

struct Turn {
  std::vector<int32_t> prompt, tokens;
  std::vector<float> logprobs;
  bool truncated = false;
};

struct Episode {
  uint64_t seed = 0;
  int64_t asked = 0;  // replies the environment asked for
  bool open = true;
  std::vector<Turn> turns;
};

struct Outcome {
  EnvStatus status = EnvStatus::error;
  double reward = 0;
  std::string why;
};

// "http://host:port/path" -> ("http://host:port", "/path/rollout").
std::pair<std::string, std::string> split_url(const std::string& url) {
  const size_t slash = url.find('/', url.find("://") + 3);
  std::string base = url.substr(0, slash), path = slash == std::string::npos ? "" : url.substr(slash);
  while (!path.empty() && path.back() == '/') path.pop_back();
  return {base, path + "/rollout"};
}
}  // namespace

struct EnvEpisodes::Impl final : serve::RequestObserver {
  Impl(model::GPT& model, const CpuCtx& cpu, serve::EngineConfig ec, const EnvSetup& s)
      : setup(s), engine(model, cpu, ec), server({.host = s.cfg.host, .port = 0,
                                                   .max_concurrent_requests = std::max<int64_t>(64, ec.max_num_seqs)}) {
    server.start();
    serve::ServedModel m;
    m.name = "claw-rl-policy";
    m.engine = &engine;
    m.tokenizer = setup.tokenizer;
    m.eos = {setup.tokenizer->eod()};
    m.chat = setup.chat;
    m.max_model_len = setup.max_row;
    m.observer = this;
    server.set_model(std::move(m));
    endpoint = fmt::format("http://{}:{}/v1", setup.cfg.host, server.port());
  }

  void prepare(const std::string& model, std::vector<int32_t>& prompt, serve::GenerationRequest& r) override {
    std::lock_guard lock(mu);
    const auto it = episodes.find(model);
    if (it == episodes.end() || !it->second.open)
      fail("no episode '{}' is running on this worker (it ended, timed out, or never was)", model);
    Episode& e = it->second;
    if (e.asked >= setup.cfg.max_turns)
      fail("episode '{}' asked for more than --env-max-turns {} replies", model, setup.cfg.max_turns);
    r.max_tokens = std::min(r.max_tokens, max_new_tokens);
    const auto n = static_cast<int64_t>(prompt.size());
    if (n + r.max_tokens > setup.max_row)
      fail("the conversation of episode '{}' has {} tokens; with {} new ones it does not fit a learner row of {} "
           "(--seq-length + 1)", model, n, r.max_tokens, setup.max_row);
    r.sampling.temperature = temperature;
    r.sampling.top_k = 0;
    r.sampling.top_p = 1.0;
    r.sampling.min_p = 0.0;
    r.sampling.seed = e.seed + static_cast<uint64_t>(e.asked) * 0x9E3779B97F4A7C15ull;
    ++e.asked;
  }

  void finished(const std::string& model, const std::vector<int32_t>& prompt,
                const std::vector<serve::TokenOutput>& tokens) override {
    std::lock_guard lock(mu);
    const auto it = episodes.find(model);
    if (it == episodes.end() || !it->second.open) return;
    Turn t;
    t.prompt = prompt;
    for (const serve::TokenOutput& o : tokens) {
      t.tokens.push_back(o.token);
      t.logprobs.push_back(static_cast<float>(o.logprob));
      if (o.finish != serve::FinishReason::none) t.truncated = o.finish == serve::FinishReason::length;
    }
    it->second.turns.push_back(std::move(t));
  }

  Outcome play(const std::string& id, const std::string& prompt) const {
    const auto [base, path] = split_url(setup.cfg.url);
    httplib::Client cli(base);
    const auto secs = std::chrono::duration<double>(setup.cfg.timeout_s);
    const auto us = std::chrono::duration_cast<std::chrono::microseconds>(secs).count();
    cli.set_connection_timeout(us / 1000000, us % 1000000);
    cli.set_read_timeout(us / 1000000, us % 1000000);
    cli.set_write_timeout(us / 1000000, us % 1000000);
    nlohmann::json body = nlohmann::json::parse(prompt);
    body["endpoint"] = endpoint;
    body["model"] = id;
    body["max_tokens"] = max_new_tokens;
    const auto t0 = Clock::now();
    const httplib::Result res = cli.Post(path, body.dump(), "application/json");
    if (!res) {
      const bool late = Clock::now() - t0 >= secs * 0.99;
      return {late ? EnvStatus::timeout : EnvStatus::error, 0,
              late ? fmt::format("no answer within --env-timeout {} s", setup.cfg.timeout_s)
                   : res.error() == httplib::Error::Connection
                         ? fmt::format("{}{}: could not connect", base, path)
                         : fmt::format("{}{}: {} error", base, path, httplib::to_string(res.error()))};
    }
    if (res->status != 200)
      return {EnvStatus::error, 0, fmt::format("{}{} answered HTTP {}: {}", base, path, res->status,
                                               res->body.substr(0, 200))};
    try {
      const nlohmann::json j = nlohmann::json::parse(res->body);
      if (!j.is_object() || !j.contains("reward") || !j["reward"].is_number() ||
          !std::isfinite(j["reward"].get<double>()))
        return {EnvStatus::error, 0, fmt::format("the answer has no finite number 'reward': {}", res->body.substr(0, 200))};
      return {EnvStatus::ok, j["reward"].get<double>(), ""};
    } catch (const nlohmann::json::exception& e) {
      return {EnvStatus::error, 0, fmt::format("the answer is not JSON ({}): {}", e.what(), res->body.substr(0, 200))};
    }
  }

  // The episode as one row (see env.h).
  void assemble(Trajectory& t, Episode& e) const {
    const Turn& last = e.turns.back();
    std::vector<int32_t> seq = last.prompt;
    seq.insert(seq.end(), last.tokens.begin(), last.tokens.end());
    std::vector<uint8_t> learn(seq.size(), 0);
    std::vector<float> lp(seq.size(), 0.0f);
    size_t cursor = 0, first = last.prompt.size();
    t.unaligned = 0;
    for (size_t k = 0; k + 1 < e.turns.size(); ++k) {
      const Turn& turn = e.turns[k];
      // Its end-of-text token is not in the later prompt (the template
      // closes the turn its own way): the reply is found, and learned, without it.
      size_t len = turn.tokens.size();
      if (len > 0 && turn.tokens[len - 1] == setup.tokenizer->eod()) --len;
      const auto it = std::search(last.prompt.begin() + static_cast<long>(cursor), last.prompt.end(),
                                  turn.tokens.begin(), turn.tokens.begin() + static_cast<long>(len));
      if (len == 0 || it == last.prompt.end()) {
        ++t.unaligned;
        continue;
      }
      const auto at = static_cast<size_t>(it - last.prompt.begin());
      for (size_t j = 0; j < len; ++j) learn[at + j] = 1, lp[at + j] = turn.logprobs[j];
      first = std::min(first, at);
      cursor = at + len;
    }
    for (size_t j = 0; j < last.tokens.size(); ++j)
      learn[last.prompt.size() + j] = 1, lp[last.prompt.size() + j] = last.logprobs[j];
    const auto f = static_cast<long>(first);
    t.prompt_tokens.assign(seq.begin(), seq.begin() + f);
    t.completion.assign(seq.begin() + f, seq.end());
    t.logprobs.assign(lp.begin() + f, lp.end());
    t.learn.assign(learn.begin() + f, learn.end());
    if (std::all_of(t.learn.begin(), t.learn.end(), [](uint8_t x) { return x != 0; })) t.learn.clear();
    t.truncated = last.truncated;
    t.turns = static_cast<int32_t>(e.turns.size());
    std::vector<int32_t> reply = last.tokens;
    if (!reply.empty() && reply.back() == setup.tokenizer->eod()) reply.pop_back();
    t.reply = setup.tokenizer->decode(reply);
  }

  EnvSetup setup;
  serve::AsyncEngine engine;
  serve::HttpServer server;
  std::string endpoint;
  std::mutex mu;
  std::map<std::string, Episode> episodes;
  double temperature = 1.0;
  int64_t max_new_tokens = 0;
  int64_t round = 0;
};

EnvEpisodes::EnvEpisodes(model::GPT& model, const CpuCtx& cpu, serve::EngineConfig ec, const EnvSetup& setup)
    : impl_(std::make_unique<Impl>(model, cpu, ec, setup)) {}

EnvEpisodes::~EnvEpisodes() { impl_->server.drain_and_stop(); }

const std::string& EnvEpisodes::endpoint() const { return impl_->endpoint; }

void EnvEpisodes::run(std::vector<Trajectory>& out, const std::vector<std::string>& prompts,
                      const std::vector<uint64_t>& seeds, const SamplingConfig& sampling, bool greedy) {
  Impl& s = *impl_;
  const size_t n = out.size();
  std::vector<std::string> ids(n);
  {
    std::lock_guard lock(s.mu);
    s.episodes.clear();
    s.temperature = greedy ? 0.0 : sampling.temperature;
    s.max_new_tokens = sampling.max_new_tokens;
    ++s.round;
    for (size_t i = 0; i < n; ++i) {
      ids[i] = fmt::format("episode-{}-{}-{}", out[i].step, s.round, i);
      s.episodes[ids[i]] = Episode{.seed = seeds[i]};
    }
  }
  std::vector<Outcome> outcomes(n);
  std::vector<std::thread> clients;
  for (size_t i = 0; i < n; ++i)
    clients.emplace_back([&, i] { outcomes[i] = s.play(ids[i], prompts[i]); });
  // The engine steps on this thread (the one whose OpenMP team the kernels
  // use) until every episode has ended.
  std::thread waiter([&] {
    for (std::thread& c : clients) c.join();
    s.engine.shutdown();
  });
  s.engine.run();
  waiter.join();
  s.engine.reopen();
  std::lock_guard lock(s.mu);
  int64_t reported = 0;
  for (size_t i = 0; i < n; ++i) {
    Episode& e = s.episodes[ids[i]];
    e.open = false;
    Trajectory& t = out[i];
    Outcome& o = outcomes[i];
    if (o.status == EnvStatus::ok && e.turns.empty())
      o = {EnvStatus::error, 0, "the environment answered without asking the policy for a reply"};
    t.env = o.status;
    t.reward = o.reward;
    if (o.status == EnvStatus::ok) {
      s.assemble(t, e);
    } else {
      t.completion.clear();
      t.logprobs.clear();
      t.learn.clear();
      t.turns = static_cast<int32_t>(e.turns.size());
      t.truncated = false;
      t.reply = o.why;  // a failed episode's reply says why it failed
      if (reported++ == 0)
        log::warn("rl", "episode {} ({} at {}): {}", ids[i], o.status == EnvStatus::timeout ? "timeout" : "failed",
                  s.setup.cfg.url, o.why);
    }
  }
}

}  // namespace claw::rl
