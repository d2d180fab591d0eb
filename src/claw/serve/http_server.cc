#include "claw/serve/http_server.h"

#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <mutex>
#include <random>
#include <string_view>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "claw/core/error.h"
#include "claw/core/json_depth.h"
#include "claw/core/log.h"
#include "claw/core/secret.h"
#include "claw/serve/chat_page.h"
#include "claw/serve/http_connections.h"
#include "claw/serve/openai_api.h"
#include "claw/serve/text_stream.h"

namespace claw::serve {
namespace {

using Clock = std::chrono::steady_clock;

// Histogram buckets (seconds) for the latency metrics.
const std::vector<double> kBuckets = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30};

struct Histogram {
  std::vector<uint64_t> counts = std::vector<uint64_t>(kBuckets.size(), 0);
  uint64_t count = 0;
  double sum = 0;
  void add(double v) {
    for (size_t i = 0; i < kBuckets.size(); ++i)
      if (v <= kBuckets[i]) ++counts[i];
    ++count;
    sum += v;
  }
  void print(std::string& out, const std::string& name, const std::string& help) const {
    out += fmt::format("# HELP {} {}\n# TYPE {} histogram\n", name, help, name);
    for (size_t i = 0; i < kBuckets.size(); ++i) out += fmt::format("{}_bucket{{le=\"{}\"}} {}\n", name, kBuckets[i], counts[i]);
    out += fmt::format("{}_bucket{{le=\"+Inf\"}} {}\n{}_sum {}\n{}_count {}\n", name, count, name, sum, name, count);
  }
};

ConnectionLimits connection_limits(const ServerConfig& c) {
  return {.max_connections = c.max_connections,
          .max_connections_per_client = c.max_connections_per_client,
          .header_timeout_s = c.header_timeout_s,
          .max_body_bytes = c.max_body_bytes};
}

// "name", "name:port", "[v6]:port" -> the name, lower case.
std::string host_name(std::string h) {
  if (h.starts_with('[')) {
    h = h.substr(1, h.find(']') - 1);
  } else if (std::count(h.begin(), h.end(), ':') == 1) {
    h = h.substr(0, h.find(':'));
  }
  std::transform(h.begin(), h.end(), h.begin(), [](unsigned char c) { return std::tolower(c); });
  return h;
}

bool is_json_type(std::string t) {
  t = t.substr(0, t.find(';'));
  std::erase_if(t, [](unsigned char c) { return std::isspace(c); });
  std::transform(t.begin(), t.end(), t.begin(), [](unsigned char c) { return std::tolower(c); });
  return t == "application/json";
}

}  // namespace

struct HttpServer::Impl {
  explicit Impl(ServerConfig c) : cfg(std::move(c)), http(connection_limits(cfg)) {
    allowed_hosts = {"localhost", "127.0.0.1", "::1"};
    if (cfg.host != "0.0.0.0" && cfg.host != "::") allowed_hosts.push_back(host_name(cfg.host));
    for (const std::string& h : cfg.allowed_hosts) allowed_hosts.push_back(h == "*" ? h : host_name(h));
  }
  ServerConfig cfg;
  GuardedServer http;
  std::vector<std::string> allowed_hosts;
  std::atomic<int64_t> queued_seqs{0}, queued_tokens{0};  // of the requests being answered
  std::thread thread;
  std::mutex mu;
  std::unique_ptr<ServedModel> model;  // null while loading
  std::atomic<bool> draining{false};
  std::atomic<int64_t> in_flight{0};
  // Metrics.
  std::mutex metrics_mu;
  uint64_t requests_ok = 0, requests_error = 0, prompt_tokens = 0, generation_tokens = 0;
  Histogram ttft, tpot;
  std::atomic<uint64_t> next_id{0};

  bool host_allowed(const std::string& host) const {
    const std::string name = host_name(host);
    return std::any_of(allowed_hosts.begin(), allowed_hosts.end(),
                       [&](const std::string& a) { return a == "*" || a == name; });
  }

  ServedModel* served() {
    std::lock_guard lock(mu);
    return model.get();
  }

  void count(bool ok) {
    std::lock_guard lock(metrics_mu);
    (ok ? requests_ok : requests_error)++;
  }

  void reply_error(httplib::Response& res, const ApiError& e) {
    res.status = e.status;
    res.set_content(error_body(e), "application/json");
  }

  // One choice: its stream, its text, what the client has been sent.
  struct Choice {
    std::shared_ptr<TokenStream> stream;
    std::shared_ptr<StreamSignal> signal;  // one for all the choices of a request
    std::unique_ptr<TextStream> text;
    int64_t prompt_index = 0;
    int64_t tokens = 0;
    std::string finish;
    Clock::time_point last;
    // Logprobs gathered: the scored prompt's (echo), then, without
    // streaming, the generated tokens'; the text offset of the next prompt
    // token.
    json lp;
    int64_t prompt_offset = 0;
    bool echoed = false, ended = false;  // streaming: the echo went out; the choice is over
  };

  // echo + logprobs: the prompt's first token, which has no log-probability,
  // opens the choice's logprobs; the engine scores the others.
  void open_prompt_scores(const ServedModel& m, const std::vector<int32_t>& prompt, Choice& c) const {
    const std::string s = token_text(m, prompt[0]);
    c.lp["tokens"].push_back(s);
    c.lp["token_logprobs"].push_back(nullptr);
    c.lp["top_logprobs"].push_back(nullptr);
    c.lp["text_offset"].push_back(0);
    c.prompt_offset = static_cast<int64_t>(s.size());
  }
  void add_prompt_score(const ServedModel& m, const ApiRequest& job, const TokenOutput& t, Choice& c) const {
    logprob_entry(m, job, t, c.lp, c.prompt_offset);
    c.prompt_offset += static_cast<int64_t>(token_text(m, t.token).size());
  }

  std::vector<Choice> launch(ServedModel& m, const ApiRequest& job) {
    std::vector<Choice> choices;
    auto signal = std::make_shared<StreamSignal>();
    uint64_t seed = job.seeded ? job.base.sampling.seed : std::random_device{}();
    for (size_t p = 0; p < job.prompts.size(); ++p)
      for (int64_t i = 0; i < job.n; ++i) {
        GenerationRequest r = job.base;
        r.prompt = job.prompts[p];
        r.sampling.seed = seed + choices.size();
        Choice c;
        c.prompt_index = static_cast<int64_t>(p);
        c.text = std::make_unique<TextStream>(*m.tokenizer, job.stop);
        c.last = Clock::now();
        c.signal = signal;
        c.lp = job.chat ? json::array() : completions_logprobs();
        if (job.scores_prompt()) open_prompt_scores(m, job.prompts[p], c);
        try {
          c.stream = m.engine->submit(std::move(r), signal);
        } catch (const Error& e) {
          for (Choice& done : choices) m.engine->cancel(*done.stream);
          const std::string msg = e.what();
          if (msg.find("shutting down") != std::string::npos) throw ApiError{503, msg, "", "server_error"};
          throw ApiError{400, msg, msg.starts_with("prompt") ? "prompt" : ""};
        }
        choices.push_back(std::move(c));
      }
    return choices;
  }

  void record(const Clock::time_point t0, Choice& c) {
    const Clock::time_point now = Clock::now();
    std::lock_guard lock(metrics_mu);
    if (c.tokens == 0)
      ttft.add(std::chrono::duration<double>(now - t0).count());
    else
      tpot.add(std::chrono::duration<double>(now - c.last).count());
    c.last = now;
    ++generation_tokens;
  }

  // Holds one of the --max-concurrent-requests places and the request's
  // sequences and prompt tokens in the admission totals until the response
  // is done (a stream's provider keeps it alive).
  struct Slot {
    explicit Slot(Impl& server) : s(server) {}
    Slot(const Slot&) = delete;
    Slot& operator=(const Slot&) = delete;
    ~Slot() {
      s.queued_seqs -= seqs;
      s.queued_tokens -= tokens;
      --s.in_flight;
    }
    Impl& s;
    int64_t seqs = 0, tokens = 0;
  };

  // Admission: the request's sequences and prompt tokens against the
  // bounds, before anything reaches the engine. Throws 400 for a request
  // that could never be served, 429 when the server is full.
  void admit(const ApiRequest& job, Slot& slot) {
    const auto prompts = static_cast<int64_t>(job.prompts.size());
    int64_t tokens = 0;
    for (const std::vector<int32_t>& p : job.prompts) tokens += static_cast<int64_t>(p.size());
    tokens *= job.n;
    const int64_t seqs = prompts * job.n;
    if (seqs > cfg.max_request_sequences)
      throw ApiError{400, fmt::format("{} prompt(s) x n {} = {} sequences; at most {} in one request "
                                      "(--max-request-sequences)", prompts, job.n, seqs, cfg.max_request_sequences),
                     job.n > 1 ? "n" : "prompt"};
    if (tokens > cfg.max_queued_tokens)
      throw ApiError{400, fmt::format("the request's prompts x n hold {} tokens; at most {} (--max-queued-tokens)",
                                      tokens, cfg.max_queued_tokens), "prompt"};
    slot.seqs = seqs;
    slot.tokens = tokens;
    const int64_t all_seqs = queued_seqs += seqs, all_tokens = queued_tokens += tokens;
    if (all_seqs > cfg.max_queued_sequences)
      throw ApiError{429, fmt::format("the server holds {} sequences with this request; at most {} "
                                      "(--max-queued-sequences): retry later", all_seqs, cfg.max_queued_sequences),
                     "", "rate_limit_exceeded"};
    if (all_tokens > cfg.max_queued_tokens)
      throw ApiError{429, fmt::format("the server holds {} prompt tokens with this request; at most {} "
                                      "(--max-queued-tokens): retry later", all_tokens, cfg.max_queued_tokens),
                     "", "rate_limit_exceeded"};
  }

  // What every response names: its id, creation time, prompt tokens and start.
  struct Reply {
    std::string id;
    int64_t created;
    int64_t prompt_total;
    Clock::time_point t0;
  };

  void handle(const httplib::Request& req, httplib::Response& res, bool chat) {
    ServedModel* m = served();
    if (!m) return reply_error(res, {503, "the model is still loading", "", "server_error"});
    if (draining) return reply_error(res, {503, "the server is shutting down", "", "server_error"});
    if (++in_flight > cfg.max_concurrent_requests) {
      --in_flight;
      count(false);
      return reply_error(res, {429, fmt::format("more than {} concurrent requests (--max-concurrent-requests)",
                                                cfg.max_concurrent_requests), "", "rate_limit_exceeded"});
    }
    auto slot = std::make_shared<Slot>(*this);
    ApiRequest job;
    std::vector<Choice> choices;
    const Clock::time_point t0 = Clock::now();
    try {
      json body;
      if (const size_t deep = json_too_deep(req.body); deep != std::string::npos)
        bad("", fmt::format("the body nests deeper than {} levels (at byte {})", kMaxJsonDepth, deep));
      try {
        body = json::parse(req.body);
      } catch (const json::exception& e) {
        bad("", fmt::format("the body is not valid JSON: {}", e.what()));
      }
      job = parse_request(*m, body, chat);
      admit(job, *slot);
      choices = launch(*m, job);
    } catch (const ApiError& e) {
      count(false);
      return reply_error(res, e);
    } catch (const std::exception& e) {
      count(false);
      return reply_error(res, {500, e.what(), "", "server_error"});
    }
    const std::string id = fmt::format("{}-{:016x}", chat ? "chatcmpl" : "cmpl", (++next_id) * 0x9E3779B97F4A7C15ull);
    const int64_t created = std::chrono::duration_cast<std::chrono::seconds>(
                                std::chrono::system_clock::now().time_since_epoch()).count();
    int64_t prompt_total = 0;
    for (const Choice& c : choices) prompt_total += static_cast<int64_t>(job.prompts[c.prompt_index].size());
    {
      std::lock_guard lock(metrics_mu);
      prompt_tokens += static_cast<uint64_t>(prompt_total);
    }

    const Reply r{id, created, prompt_total, t0};
    if (job.stream)
      reply_stream(res, m, std::move(job), std::move(choices), r, std::move(slot));
    else
      reply_whole(res, m, job, choices, r);
  }

  // The next token of a choice, waiting while its client is connected:
  // nothing once the choice has ended, or with `gone` set once the client
  // has closed the connection (checked at every token of the request and
  // at least every 100 ms).
  std::optional<TokenOutput> next_token(Choice& c, bool& gone) {
    for (;;) {
      const uint64_t seen = c.signal->count();
      bool ended = false;
      if (std::optional<TokenOutput> t = c.stream->try_next(&ended)) return t;
      if (ended) return std::nullopt;
      if (GuardedServer::client_gone()) {
        gone = true;
        return std::nullopt;
      }
      c.signal->wait_past_for(seen, std::chrono::milliseconds(100));
    }
  }

  // A non-streaming response: every choice's whole text.
  void reply_whole(httplib::Response& res, ServedModel* m, const ApiRequest& job, std::vector<Choice>& choices,
                   const Reply& r) {
    const std::string& id = r.id;
    const int64_t created = r.created, prompt_total = r.prompt_total;
    const Clock::time_point t0 = r.t0;
    json out_choices = json::array();
    int64_t completion = 0;
    for (size_t i = 0; i < choices.size(); ++i) {
      Choice& c = choices[i];
      json& lp = c.lp;
      const std::string prefix = job.echo ? job.prompt_texts[c.prompt_index] : "";
      std::vector<TokenOutput> observed;
      bool gone = false;
      while (auto t = next_token(c, gone)) {
        if (t->prompt) {
          add_prompt_score(*m, job, *t, c);
          continue;
        }
        if (m->observer || job.return_token_ids) observed.push_back(*t);
        record(t0, c);
        ++c.tokens;
        const int64_t offset = static_cast<int64_t>(prefix.size() + c.text->text().size());
        // A stop token (end of text) ends the reply without showing in it.
        if (t->finish != FinishReason::stop) c.text->push(t->token);
        if (job.logprobs >= 0) {
          json e = logprob_entry(*m, job, *t, lp, offset);
          if (job.chat) lp.push_back(e);
        }
        if (t->finish != FinishReason::none) c.finish = finish_reason_name(t->finish);
        if (c.text->stopped()) {
          c.finish = "stop";
          m->engine->cancel(*c.stream);
          break;
        }
      }
      if (gone) {  // nobody to answer: every choice's generation stops
        for (Choice& other : choices) m->engine->cancel(*other.stream);
        count(false);
        return reply_error(res, {499, "the client closed the connection", "", "invalid_request_error"});
      }
      if (!c.stream->error().empty()) {
        count(false);
        return reply_error(res, {draining ? 503 : 500, c.stream->error(), "", "server_error"});
      }
      if (m->observer) m->observer->finished(job.model, job.prompts[c.prompt_index], observed);
      c.text->finish();  // what it held back joins text() (one statement each: + leaves the order open)
      const std::string text = valid_utf8(prefix + c.text->text());
      completion += c.tokens;
      json choice = {{"index", i}, {"finish_reason", c.finish.empty() ? "stop" : c.finish}};
      if (job.return_token_ids) {
        json ids = json::array();
        for (const TokenOutput& o : observed) ids.push_back(o.token);
        choice["token_ids"] = std::move(ids);
      }
      if (job.chat) {
        choice["message"] = {{"role", "assistant"}, {"content", text}};
        choice["logprobs"] = job.logprobs >= 0 ? json{{"content", lp}} : json(nullptr);
      } else {
        choice["text"] = text;
        choice["logprobs"] = job.logprobs >= 0 ? lp : json(nullptr);
      }
      out_choices.push_back(choice);
    }
    json out = {{"id", id}, {"object", job.chat ? "chat.completion" : "text_completion"}, {"created", created},
                {"model", m->name}, {"choices", out_choices},
                {"usage", usage_json(prompt_total, completion)}};
    if (job.return_token_ids) out["prompt_token_ids"] = job.prompts.size() == 1 ? json(job.prompts[0]) : json(job.prompts);
    count(true);
    res.set_content(dump_json(out), "application/json");
    return;
  }

  // Server-sent events: the choices' tokens as they come, interleaved (each
  // chunk names its index); `slot` is held until the stream ends.
  void reply_stream(httplib::Response& res, ServedModel* m, ApiRequest job, std::vector<Choice> choices, const Reply& r,
                    std::shared_ptr<Slot> slot) {
    const std::string id = r.id;
    const int64_t created = r.created, prompt_total = r.prompt_total;
    const Clock::time_point t0 = r.t0;
    auto state = std::make_shared<std::vector<Choice>>(std::move(choices));
    auto shared_job = std::make_shared<ApiRequest>(std::move(job));
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream",
        [this, m, state, shared_job, id, created, t0, prompt_total, slot](size_t, httplib::DataSink& sink) {
          const ApiRequest& job = *shared_job;
          auto send = [&](const std::string& s) { return sink.is_writable() && sink.write(s.data(), s.size()); };
          auto cancel_all = [&] {
            for (Choice& c : *state) m->engine->cancel(*c.stream);
            return false;
          };
          // The echo goes first; with logprobs, once the prompt is scored.
          auto echo = [&](size_t i) {
            Choice& c = (*state)[i];
            c.echoed = true;
            return send(chunk_json(*m, job, id, created, static_cast<int64_t>(i), job.prompt_texts[c.prompt_index],
                                   job.scores_prompt() ? c.lp : json(nullptr), "", false));
          };
          for (size_t i = 0; i < state->size(); ++i) {
            Choice& c = (*state)[i];
            c.echoed = !job.echo;
            if (job.echo && !job.scores_prompt() && !echo(i)) return cancel_all();
            if (job.chat && !send(chunk_json(*m, job, id, created, static_cast<int64_t>(i), "", nullptr, "", true)))
              return cancel_all();
          }
          // One token of choice i: false when the client went away.
          auto feed = [&](size_t i, const TokenOutput& t) {
            Choice& c = (*state)[i];
            if (t.prompt) {
              add_prompt_score(*m, job, t, c);
              return true;
            }
            if (!c.echoed && !echo(i)) return false;
            record(t0, c);
            ++c.tokens;
            json completions_lp = completions_logprobs();
            const int64_t offset = static_cast<int64_t>(
                (job.echo ? job.prompt_texts[c.prompt_index].size() : 0) + c.text->text().size());
            json lp = nullptr;
            if (job.logprobs >= 0) {
              json e = logprob_entry(*m, job, t, completions_lp, offset);
              lp = job.chat ? e : completions_lp;
            }
            const std::string piece = t.finish == FinishReason::stop ? "" : valid_utf8(c.text->push(t.token));
            std::string finish = t.finish != FinishReason::none ? finish_reason_name(t.finish) : "";
            if (c.text->stopped()) {
              finish = "stop";
              m->engine->cancel(*c.stream);
            }
            const std::string tail = finish.empty() ? "" : valid_utf8(c.text->finish());
            if (!finish.empty()) c.ended = true;
            return send(chunk_json(*m, job, id, created, static_cast<int64_t>(i), piece + tail, lp, finish, false));
          };
          const std::shared_ptr<StreamSignal> signal = state->front().signal;
          for (;;) {
            const uint64_t seen = signal->count();
            bool progressed = false, open = false;
            for (size_t i = 0; i < state->size(); ++i) {
              Choice& c = (*state)[i];
              while (!c.ended) {
                bool over = false;
                const std::optional<TokenOutput> t = c.stream->try_next(&over);
                if (!t) {
                  c.ended = over;  // ended without a last token: cancelled, or the engine failed
                  break;
                }
                progressed = true;
                if (!feed(i, *t)) return cancel_all();  // the client went away
              }
              open = open || !c.ended;
            }
            if (!open) break;
            if (!progressed) signal->wait_past(seen);
          }
          int64_t completion = 0;
          for (const Choice& c : *state) completion += c.tokens;
          if (job.include_usage) {
            json usage = {{"id", id}, {"object", job.chat ? "chat.completion.chunk" : "text_completion"},
                          {"created", created}, {"model", m->name}, {"choices", json::array()},
                          {"usage", usage_json(prompt_total, completion)}};
            const std::string s = "data: " + dump_json(usage) + "\n\n";
            if (!sink.write(s.data(), s.size())) return false;
          }
          const std::string done = "data: [DONE]\n\n";
          sink.write(done.data(), done.size());
          sink.done();
          count(true);
          return true;
        },
        [this, m, state](bool success) {
          if (!success)
            for (Choice& c : *state) m->engine->cancel(*c.stream);
        });
  }

  std::string metrics_text() {
    std::string out;
    const ServedModel* m = served();
    EngineStats s;
    if (m) s = m->engine->stats();
    std::lock_guard lock(metrics_mu);
    auto counter = [&](const char* name, const char* help, double v) {
      out += fmt::format("# HELP {} {}\n# TYPE {} counter\n{} {}\n", name, help, name, name, v);
    };
    auto gauge = [&](const char* name, const char* help, double v) {
      out += fmt::format("# HELP {} {}\n# TYPE {} gauge\n{} {}\n", name, help, name, name, v);
    };
    out += fmt::format("# HELP claw:requests_total Requests answered, by outcome\n# TYPE claw:requests_total counter\n"
                       "claw:requests_total{{outcome=\"success\"}} {}\nclaw:requests_total{{outcome=\"error\"}} {}\n",
                       requests_ok, requests_error);
    counter("claw:prompt_tokens_total", "Prompt tokens of admitted requests", static_cast<double>(prompt_tokens));
    counter("claw:generation_tokens_total", "Tokens generated", static_cast<double>(generation_tokens));
    counter("claw:prefix_cache_hit_tokens_total", "Prompt tokens served from the prefix cache",
            static_cast<double>(s.cached_tokens));
    counter("claw:num_preemptions_total", "Sequences preempted for lack of KV blocks", static_cast<double>(s.preemptions));
    gauge("claw:num_requests_running", "Sequences in the running batch", static_cast<double>(s.running));
    gauge("claw:num_requests_waiting", "Sequences waiting to be scheduled", static_cast<double>(s.waiting));
    gauge("claw:kv_blocks_used", "KV-cache blocks held by sequences", static_cast<double>(s.blocks_used));
    gauge("claw:kv_blocks_free", "KV-cache blocks free (empty or cached)", static_cast<double>(s.blocks_free));
    gauge("claw:http_requests_in_flight", "HTTP generation requests being answered", static_cast<double>(in_flight.load()));
    gauge("claw:admitted_sequences", "Sequences (prompts x n) of the requests being answered",
          static_cast<double>(queued_seqs.load()));
    gauge("claw:admitted_prompt_tokens", "Prompt tokens of the requests being answered",
          static_cast<double>(queued_tokens.load()));
    gauge("claw:http_connections_open", "Open HTTP connections", static_cast<double>(http.open_connections()));
    counter("claw:http_connections_refused_total", "Connections refused beyond --max-connections(-per-client)",
            static_cast<double>(http.refused_connections()));
    counter("claw:engine_steps_total", "Engine steps run", static_cast<double>(s.steps));
    ttft.print(out, "claw:time_to_first_token_seconds", "Time from request to its first token");
    tpot.print(out, "claw:time_per_output_token_seconds", "Time between consecutive tokens of a request");
    return out;
  }
};

namespace {

// cpp-httplib (Debian builds it as a library) listens with a backlog of 5:
// a burst of connects (64 streams opening at once, while the engine's
// threads hold the CPUs) overflows it, and the kernel drops some of them
// (the client retries a second later) or resets them. Linux takes a second
// listen() on a listening socket as a new backlog, and the library keeps
// its socket to itself, so the listening socket on `port` is found among
// this process's descriptors.
void widen_listen_backlog(int port) {
  for (int fd = 0; fd < 1024; ++fd) {
    int listening = 0;
    socklen_t len = sizeof listening;
    if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) != 0 || !listening) continue;
    sockaddr_storage addr{};
    len = sizeof addr;
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) continue;
    const int p = addr.ss_family == AF_INET    ? ntohs(reinterpret_cast<const sockaddr_in&>(addr).sin_port)
                  : addr.ss_family == AF_INET6 ? ntohs(reinterpret_cast<const sockaddr_in6&>(addr).sin6_port)
                                               : -1;
    if (p == port) ::listen(fd, SOMAXCONN);  // capped by net.core.somaxconn
  }
}

}  // namespace

HttpServer::HttpServer(ServerConfig cfg) : impl_(std::make_unique<Impl>(std::move(cfg))) {}

HttpServer::~HttpServer() {
  impl_->http.stop();
  if (impl_->thread.joinable()) impl_->thread.join();
}

void HttpServer::set_model(ServedModel m) {
  std::lock_guard lock(impl_->mu);
  impl_->model = std::make_unique<ServedModel>(std::move(m));
}

void HttpServer::start() {
  Impl& s = *impl_;
  httplib::Server& h = s.http;
  h.set_pre_routing_handler([&s](const httplib::Request& req, httplib::Response& res) {
    if (req.path == "/health") return httplib::Server::HandlerResponse::Unhandled;
    if (!s.cfg.api_key.empty()) {
      if (req.path == "/" || same_secret(req.get_header_value("Authorization"), "Bearer " + s.cfg.api_key))
        return httplib::Server::HandlerResponse::Unhandled;
      s.reply_error(res, {401, "Incorrect API key provided (Authorization: Bearer <--api-key>)", "",
                          "invalid_request_error", "invalid_api_key"});
      return httplib::Server::HandlerResponse::Handled;
    }
    // Without a key: what a web page elsewhere could send is refused.
    const std::string host = req.get_header_value("Host");
    if (!host.empty() && !s.host_allowed(host)) {
      s.reply_error(res, {403, fmt::format("Host '{}' is not served here: without --api-key, requests must name "
                                           "this server (loopback or --host), or one of --allowed-hosts", host),
                          "", "invalid_request_error"});
      return httplib::Server::HandlerResponse::Handled;
    }
    if (req.method == "POST" && !is_json_type(req.get_header_value("Content-Type"))) {
      s.reply_error(res, {415, fmt::format("Content-Type '{}': requests are JSON (application/json)",
                                           req.get_header_value("Content-Type")), "", "invalid_request_error"});
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
  h.set_error_handler([&s](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    if (res.status == 404)
      s.reply_error(res, {404, fmt::format("no route {} {}", req.method, req.path), "", "invalid_request_error"});
    else if (res.status == 413)
      s.reply_error(res, {413, fmt::format("the body is larger than {} bytes (--max-body-size)", s.cfg.max_body_bytes),
                          "", "invalid_request_error"});
    else
      s.reply_error(res, {res.status, fmt::format("HTTP {}", res.status), "", "invalid_request_error"});
  });
  h.set_exception_handler([&s](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "internal error";
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    s.reply_error(res, {500, what, "", "server_error"});
  });
  h.Get("/", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(std::string(kChatPage), "text/html; charset=utf-8");
  });
  h.Get("/health", [&s](const httplib::Request&, httplib::Response& res) {
    if (!s.served()) {
      res.status = 503;
      res.set_content("{\"status\":\"loading\"}", "application/json");
    } else if (s.draining) {
      res.status = 503;
      res.set_content("{\"status\":\"draining\"}", "application/json");
    } else {
      res.set_content("{\"status\":\"ok\"}", "application/json");
    }
  });
  h.Get("/v1/models", [&s](const httplib::Request&, httplib::Response& res) {
    const ServedModel* m = s.served();
    if (!m) return s.reply_error(res, {503, "the model is still loading", "", "server_error"});
    json out = {{"object", "list"},
                {"data", json::array({{{"id", m->name}, {"object", "model"}, {"created", 0}, {"owned_by", "claw"},
                                       {"max_model_len", m->max_model_len}}})}};
    res.set_content(dump_json(out), "application/json");
  });
  h.Get("/metrics", [&s](const httplib::Request&, httplib::Response& res) {
    res.set_content(s.metrics_text(), "text/plain; version=0.0.4");
  });
  h.Post("/v1/completions", [&s](const httplib::Request& req, httplib::Response& res) { s.handle(req, res, false); });
  h.Post("/v1/chat/completions", [&s](const httplib::Request& req, httplib::Response& res) { s.handle(req, res, true); });
  if (s.cfg.port == 0) {
    port_ = h.bind_to_any_port(s.cfg.host);
    if (port_ < 0) fail("--host {}: cannot listen on any port", s.cfg.host);
  } else {
    if (!h.bind_to_port(s.cfg.host, s.cfg.port))
      fail("--host {} --port {}: cannot listen (in use, or not an address of this machine)", s.cfg.host, s.cfg.port);
    port_ = s.cfg.port;
  }
  widen_listen_backlog(port_);
  auto ended = std::make_shared<std::atomic<bool>>(false);
  s.thread = std::thread([&h, ended] {
    h.listen_after_bind();
    *ended = true;
  });
  // Until the thread is in its accept loop, stop() would not reach it and
  // the destructor would wait forever (a model that fails to load, just after).
  while (!h.is_running() && !*ended) std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

void HttpServer::drain_and_stop() {
  Impl& s = *impl_;
  s.draining = true;
  const Clock::time_point deadline =
      Clock::now() +
      std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s.cfg.shutdown_timeout_s));
  while (s.in_flight.load() > 0 && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  if (s.in_flight.load() > 0) {
    log::warn("serve", "{} request(s) still running after --shutdown-timeout {} s: cancelled", s.in_flight.load(),
              s.cfg.shutdown_timeout_s);
    if (ServedModel* m = s.served()) m->engine->cancel_all("the server is shutting down (--shutdown-timeout)");
    // Their handlers answer at once; a stream whose client reads nothing
    // fails its write within the write timeout.
    while (s.in_flight.load() > 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  s.http.stop();
  if (s.thread.joinable()) s.thread.join();
}

}  // namespace claw::serve
