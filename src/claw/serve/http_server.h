// The OpenAI-compatible HTTP server (cpp-httplib), in front of an AsyncEngine.
//
//   POST /v1/completions        prompt: text, [text], [ids] or [[ids]]
//   POST /v1/chat/completions   messages through the chat template
//        fields: model, max_tokens (max_completion_tokens), temperature, top_p,
//        top_k, min_p, n, stop, seed, stream, stream_options.include_usage,
//        logprobs / top_logprobs, echo (completions), ignore_eos
//   GET  /v1/models             the served model
//   GET  /health                503 while the model loads, then 200
//   GET  /metrics               Prometheus text: requests, tokens, queue,
//                               KV blocks, latency histograms
//
// Errors are OpenAI's JSON, {"error": {"message", "type", "param", "code"}},
// with 400 for an invalid request (naming the field), 401 for a missing or
// wrong API key (every endpoint but /health), 403 for a Host not allowed and
// 415 for a body not sent as JSON (without a key), 404 for an unknown model
// or path, 413 for a body over the limit, 429 beyond a limit on requests,
// sequences, tokens or connections, 503 while loading or draining.
// Streaming responses are server-sent events. A client that disconnects,
// streaming or not, has its request cancelled and its KV blocks freed
// within an engine step.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "claw/data/tokenizer.h"
#include "claw/serve/async_engine.h"
#include "claw/data/chat_template.h"

namespace claw::serve {

struct ServerConfig {
  std::string host = "127.0.0.1";  // --host
  int port = 8000;                 // --port (0: any free port; see HttpServer::port())
  std::string api_key;             // --api-key
  int64_t max_body_bytes = 8 << 20;        // --max-body-size
  int64_t max_concurrent_requests = 256;   // --max-concurrent-requests: beyond it, 429
  // Admission: the sequences (prompts x n) and prompt tokens (each
  // sequence's prompt) of one request, and of all requests being answered.
  // A request over a per-request bound gets 400 (it could never be
  // served); one that would take the server over a total bound, 429.
  int64_t max_request_sequences = 256;     // --max-request-sequences
  int64_t max_queued_sequences = 1024;     // --max-queued-sequences
  int64_t max_queued_tokens = 1 << 20;     // --max-queued-tokens
  // Connections (serve/http_connections.h).
  int64_t max_connections = 1024;          // --max-connections
  int64_t max_connections_per_client = 512;  // --max-connections-per-client
  double header_timeout_s = 5;             // --header-timeout
  // Without --api-key, requests must name one of these in Host (a browser
  // page elsewhere cannot reach the server through DNS rebinding) and send
  // JSON (a cross-site form post cannot); empty: loopback names and --host.
  // "*" allows any host.
  std::vector<std::string> allowed_hosts;  // --allowed-hosts
  double shutdown_timeout_s = 30;          // --shutdown-timeout: drain this long, then cancel
};

// A caller that trains on what is sampled (claw rl's environments) sees
// every request: prepare() may refuse it (throw claw::Error: a 400 naming
// the message), replace its prompt tokens and set its sampling; finished()
// gets each reply's generated tokens with their log-probabilities. With an
// observer the `model` field is the observer's to check (an episode id),
// and a request has one choice and no streaming.
class RequestObserver {
 public:
  virtual ~RequestObserver() = default;
  virtual void prepare(const std::string& model, std::vector<int32_t>& prompt, GenerationRequest& r) = 0;
  virtual void finished(const std::string& model, const std::vector<int32_t>& prompt,
                        const std::vector<TokenOutput>& tokens) = 0;
};

// What the endpoints serve, once loaded.
struct ServedModel {
  std::string name;  // the `model` field clients send
  AsyncEngine* engine = nullptr;
  const data::Tokenizer* tokenizer = nullptr;
  std::vector<int32_t> eos;
  data::ChatTemplate chat;
  int64_t max_model_len = 0;
  RequestObserver* observer = nullptr;
  // Special-token text in chat messages' content read as the special
  // tokens (--content-special-tokens); by default as plain text, so that a
  // user cannot forge turns. Completions' prompts are text either way.
  bool content_special_tokens = false;
};

class HttpServer {
 public:
  explicit HttpServer(ServerConfig cfg);
  ~HttpServer();
  // Binds the port (throws naming --host/--port when it cannot) and serves
  // on a background thread; /health answers 503 until set_model().
  void start();
  int port() const { return port_; }
  void set_model(ServedModel m);
  // Stops accepting requests (new ones get 503), waits up to
  // --shutdown-timeout for those in flight to finish, cancels what is left
  // (its clients get 503), then stops listening.
  void drain_and_stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int port_ = 0;
};

}  // namespace claw::serve
