// The engine for servers: request threads submit and read their tokens
// from a stream; one thread runs the engine, stepping whenever there is work.
//
//   AsyncEngine ae(model, cpu, cfg);
//   std::thread stopper([&] { wait_for_sigterm(); ae.shutdown(); });
//   ae.run();                                // the engine steps on this thread
//   auto stream = ae.submit(request);        // any other thread
//   while (auto t = stream->next()) ...      // blocks until the next token or the end
//   ae.cancel(*stream);                      // the client went away
//
// run() belongs on the thread that loaded the model: the kernels' OpenMP
// team is that thread's, and a second team started from another thread
// makes the runtime count more threads than CPUs and put idle workers to
// sleep between regions (measured: 16 -> 60 us a region on 2 cores, close
// to half the decode speed of a small model).
//
// Requests are added and cancelled between steps (under one lock), so the
// engine itself stays single-threaded.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "claw/serve/engine.h"

namespace claw::serve {

// Wakes a reader of several streams (the choices of one request) whenever
// one of them has a token or ends.
class StreamSignal {
 public:
  uint64_t count() const;
  // Returns once count() differs from `seen`.
  void wait_past(uint64_t seen);
  // The same, or after `timeout`, whichever comes first.
  void wait_past_for(uint64_t seen, std::chrono::milliseconds timeout);
  void notify();

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  uint64_t count_ = 0;
};

// One request's tokens as they come.
class TokenStream {
 public:
  // The next token, or nothing once the request has ended (finished,
  // cancelled, or the engine failed: error() then says why).
  std::optional<TokenOutput> next();
  // The next token if one is queued, without waiting; `ended` is set when
  // nothing is queued and nothing more will come.
  std::optional<TokenOutput> try_next(bool* ended);
  const std::string& error() const { return error_; }
  int64_t id() const { return id_; }

 private:
  friend class AsyncEngine;
  void wake();  // under mu_: after queue_ or done_ changed
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<TokenOutput> queue_;
  bool done_ = false;
  bool cancelled_ = false;
  std::string error_;
  int64_t id_ = -1;
  std::shared_ptr<StreamSignal> signal_;
};

class AsyncEngine {
 public:
  AsyncEngine(model::GPT& model, const CpuCtx& cpu, EngineConfig cfg);
  ~AsyncEngine();

  // Validates and queues the request (throws claw::Error naming the field,
  // before anything is queued). Its on_token is replaced by the stream,
  // which also notifies `signal` (when given) of every token and its end.
  std::shared_ptr<TokenStream> submit(GenerationRequest r, std::shared_ptr<StreamSignal> signal = nullptr);
  void cancel(TokenStream& s);
  // Cancels every request admitted and not yet done; their streams end with
  // `why` as their error (a drain that ran out of time).
  void cancel_all(const std::string& why);
  // Steps the engine until shutdown() and every running and waiting request
  // is done, or a step fails (every request then ends with its error).
  void run();
  // No new requests; run() returns once those admitted are done.
  void shutdown();
  // After run() returned from a shutdown (not a failure): requests are
  // admitted again and run() may be called again (claw rl's rounds).
  void reopen();
  EngineStats stats() const;
  const EngineConfig& config() const { return engine_.config(); }

 private:
  Engine engine_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::pair<GenerationRequest, std::shared_ptr<TokenStream>>> incoming_;
  std::vector<int64_t> cancels_;
  bool stopping_ = false;
  std::string failed_;  // why the engine stopped, if a step threw
  std::vector<std::weak_ptr<TokenStream>> live_;
  EngineStats stats_;
};

}  // namespace claw::serve
