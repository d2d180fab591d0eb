#include "claw/cli/serve_command.h"

#include <csignal>
#include <memory>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "claw/cli/engine_flags.h"
#include "claw/cli/flags.h"
#include "claw/core/error.h"
#include "claw/core/log.h"
#include "claw/data/chat_template.h"
#include "claw/serve/async_engine.h"
#include "claw/serve/http_server.h"

namespace claw::cli {
namespace {

struct ServeArgs {
  EngineFlags engine;
  serve::ServerConfig server;
  std::string max_body_size = "8MiB";
  std::string chat_template;     // empty: from the model
  std::string served_model_name; // empty: the model directory's name
  bool api_key_given = false;
  bool content_special_tokens = false;    // --api-key on the command line (an empty key is refused)
};

void run(ServeArgs& a) {
  if (a.api_key_given && a.server.api_key.empty())
    fail("--api-key is empty: give a key, or leave the flag out to serve without one");
  if (a.server.api_key.empty() && a.server.host != "127.0.0.1" && a.server.host != "localhost" &&
      a.server.host != "::1")
    log::warn("serve", "--host {} without --api-key: anyone who can reach this address can use the model "
              "(requests must still name an allowed Host: this address, loopback or --allowed-hosts)", a.server.host);
  a.server.max_body_bytes = static_cast<int64_t>(parse_size("--max-body-size", a.max_body_size));
  for (const auto& [flag, v] : {std::pair<const char*, int64_t>{"--max-concurrent-requests", a.server.max_concurrent_requests},
                                {"--max-request-sequences", a.server.max_request_sequences},
                                {"--max-queued-sequences", a.server.max_queued_sequences},
                                {"--max-queued-tokens", a.server.max_queued_tokens},
                                {"--max-connections", a.server.max_connections},
                                {"--max-connections-per-client", a.server.max_connections_per_client}})
    if (v < 1) fail("{} must be at least 1 (got {})", flag, v);
  if (!(a.server.header_timeout_s > 0)) fail("--header-timeout must be positive seconds (got {})", a.server.header_timeout_s);
  if (!(a.server.shutdown_timeout_s >= 0))
    fail("--shutdown-timeout must be seconds, 0 or more (got {})", a.server.shutdown_timeout_s);
  if (!a.chat_template.empty()) data::chat_template(a.chat_template);  // refuse a bad name before loading
  // SIGTERM and SIGINT are taken by sigwait below; blocked before any thread
  // starts so that every thread inherits the mask.
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);

  // Under mpirun: ranks > 0 hold their slices of the model and run rank 0's
  // steps until its engine stops (SIGTERM reaches them too, blocked: they
  // end when rank 0 has drained).
  serve::InferenceModelOptions mo = a.engine.model;
  const EngineJob job = start_engine_job(mo);
  if (!job.leader()) {
    serve::InferenceModel m = serve::load_inference_model(mo);
    serve::Engine follower(*m.gpt, a.engine.cpu(), job.agree(a.engine.resolve(m)));
    follower.follow();
    return;
  }
  serve::HttpServer http(a.server);
  http.start();
  log::info("serve", "listening on http://{}:{} (/health is 503 until the model is loaded)", a.server.host, http.port());
  serve::InferenceModel m = serve::load_inference_model(mo);
  const serve::EngineConfig ecfg = job.agree(a.engine.resolve(m));
  serve::AsyncEngine engine(*m.gpt, a.engine.cpu(), ecfg);
  if (!m.tokenizer) fail("{} has no tokenizer: give --tokenizer-type and its files", m.source);
  // The model's own template (a GGUF file's) unless --chat-template names one.
  const bool own = a.chat_template.empty() && !m.chat_template.empty();
  const std::string tmpl = !a.chat_template.empty() ? a.chat_template
                           : own                    ? m.source + " chat template"
                                                    : data::default_chat_template(m.cfg.vocab_size);
  std::vector<std::pair<std::string, std::string>> config = a.engine.resolved(m, engine.config());
  config.insert(config.end(), {{"host", a.server.host}, {"port", std::to_string(http.port())},
                               {"api-key", a.server.api_key.empty() ? "" : "(set)"},
                               {"max-body-size", a.max_body_size},
                               {"max-concurrent-requests", std::to_string(a.server.max_concurrent_requests)},
                               {"max-request-sequences", std::to_string(a.server.max_request_sequences)},
                               {"max-queued-sequences", std::to_string(a.server.max_queued_sequences)},
                               {"max-queued-tokens", std::to_string(a.server.max_queued_tokens)},
                               {"max-connections", std::to_string(a.server.max_connections)},
                               {"max-connections-per-client", std::to_string(a.server.max_connections_per_client)},
                               {"header-timeout", fmt::format("{}", a.server.header_timeout_s)},
                               {"shutdown-timeout", fmt::format("{}", a.server.shutdown_timeout_s)},
                               {"allowed-hosts", fmt::format("{}", fmt::join(a.server.allowed_hosts, ","))},
                               {"chat-template", tmpl},
                               {"content-special-tokens", a.content_special_tokens ? "true" : "false"},
                               {"served-model-name", a.served_model_name.empty() ? m.name : a.served_model_name}});
  print_resolved_config("serve", config);
  data::ChatTemplate chat = own ? data::jinja_chat_template(m.chat_template, tmpl) : data::chat_template(tmpl);
  chat.use_tokens_of(*m.tokenizer, m.bos);
  http.set_model({.name = a.served_model_name.empty() ? m.name : a.served_model_name,
                  .engine = &engine,
                  .tokenizer = m.tokenizer.get(),
                  .eos = m.eos,
                  .chat = chat,
                  .max_model_len = engine.config().max_model_len,
                  .content_special_tokens = a.content_special_tokens});
  log::info("serve", "serving {} as '{}' ({}; chat template {}, context {} tokens) on http://{}:{}", m.source,
            a.served_model_name.empty() ? m.name : a.served_model_name, m.weights_summary(), tmpl,
            engine.config().max_model_len, a.server.host, http.port());
  // The engine steps on this thread, whose OpenMP team loaded the model
  // (async_engine.h says why not on another); a signal ends it from aside.
  std::thread stopper([&] {
    int sig = 0;
    sigwait(&stop, &sig);
    log::info("serve", "{}: draining requests in flight", sig == SIGTERM ? "SIGTERM" : "SIGINT");
    http.drain_and_stop();
    engine.shutdown();
  });
  engine.run();
  stopper.join();  // after a failed step run() returns early; requests get its error until the signal
  log::info("serve", "stopped");
}

}  // namespace

void add_serve_command(CLI::App& app) {
  auto a = std::make_shared<ServeArgs>();
  CLI::App* sub = app.add_subcommand("serve", "serve a model over an OpenAI-compatible HTTP API");
  a->engine.add_to(*sub);
  sub->add_option("--host", a->server.host, "address to listen on")->capture_default_str();
  sub->add_option("--port", a->server.port, "port to listen on (0: any free port)")->capture_default_str();
  CLI::Option* key = sub->add_option("--api-key", a->server.api_key,
                                     "require 'Authorization: Bearer KEY' (all but /health)");
  sub->add_option("--max-body-size", a->max_body_size, "largest request body")->capture_default_str();
  sub->add_option("--max-concurrent-requests", a->server.max_concurrent_requests,
                  "requests answered at once; more get 429")->capture_default_str();
  sub->add_option("--max-request-sequences", a->server.max_request_sequences,
                  "sequences (prompts x n) in one request; more get 400")->capture_default_str();
  sub->add_option("--max-queued-sequences", a->server.max_queued_sequences,
                  "sequences of all requests being answered; more get 429")->capture_default_str();
  sub->add_option("--max-queued-tokens", a->server.max_queued_tokens,
                  "prompt tokens (x n) of all requests being answered; more get 429")->capture_default_str();
  sub->add_option("--max-connections", a->server.max_connections, "open connections; more get 503")
      ->capture_default_str();
  sub->add_option("--max-connections-per-client", a->server.max_connections_per_client,
                  "open connections from one address; more get 429")->capture_default_str();
  sub->add_option("--header-timeout", a->server.header_timeout_s,
                  "seconds for a request's head to arrive")->capture_default_str();
  sub->add_option("--allowed-hosts", a->server.allowed_hosts,
                  "Host names accepted without --api-key besides loopback and --host ('*': any)")->delimiter(',');
  sub->add_option("--shutdown-timeout", a->server.shutdown_timeout_s,
                  "on SIGTERM, seconds to let requests finish before cancelling them")->capture_default_str();
  sub->add_option("--chat-template", a->chat_template,
                  "llama3, chatml, plain or a Jinja template FILE.jinja (default: from the model)");
  sub->add_flag("--content-special-tokens", a->content_special_tokens,
                "read special-token text in chat messages as the special tokens (default: as text)");
  sub->add_option("--served-model-name", a->served_model_name, "the model name clients use (default: the directory's)");
  sub->callback([a, key] {
    a->api_key_given = key->count() > 0;
    run(*a);
  });
}

}  // namespace claw::cli
