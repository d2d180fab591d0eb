#include "claw/serve/async_engine.h"

#include <exception>

#include "claw/core/log.h"

namespace claw::serve {

uint64_t StreamSignal::count() const {
  std::lock_guard lock(mu_);
  return count_;
}

void StreamSignal::wait_past(uint64_t seen) {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return count_ != seen; });
}

void StreamSignal::wait_past_for(uint64_t seen, std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  cv_.wait_for(lock, timeout, [&] { return count_ != seen; });
}

void StreamSignal::notify() {
  {
    std::lock_guard lock(mu_);
    ++count_;
  }
  cv_.notify_all();
}

void TokenStream::wake() {
  cv_.notify_all();
  if (signal_) signal_->notify();  // lock order: a stream's mu_, then the signal's
}

std::optional<TokenOutput> TokenStream::try_next(bool* ended) {
  std::lock_guard lock(mu_);
  *ended = queue_.empty() && done_;
  if (queue_.empty()) return std::nullopt;
  TokenOutput t = std::move(queue_.front());
  queue_.pop_front();
  return t;
}

std::optional<TokenOutput> TokenStream::next() {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return !queue_.empty() || done_; });
  if (queue_.empty()) return std::nullopt;
  TokenOutput t = std::move(queue_.front());
  queue_.pop_front();
  return t;
}

AsyncEngine::AsyncEngine(model::GPT& model, const CpuCtx& cpu, EngineConfig cfg)
    : engine_(model, cpu, cfg) {}

AsyncEngine::~AsyncEngine() = default;

std::shared_ptr<TokenStream> AsyncEngine::submit(GenerationRequest r, std::shared_ptr<StreamSignal> signal) {
  engine_.validate(r);
  auto s = std::make_shared<TokenStream>();
  s->signal_ = std::move(signal);
  std::weak_ptr<TokenStream> weak = s;
  r.on_token = [weak](const TokenOutput& t) {
    const std::shared_ptr<TokenStream> st = weak.lock();
    if (!st) return false;  // nobody reads it any more
    std::lock_guard lock(st->mu_);
    if (st->cancelled_) return false;
    st->queue_.push_back(t);
    if (t.finish != FinishReason::none) st->done_ = true;
    st->wake();
    return true;
  };
  {
    std::lock_guard lock(mu_);
    if (!failed_.empty()) fail("the engine failed: {}", failed_);
    if (stopping_) fail("the server is shutting down");
    incoming_.emplace_back(std::move(r), s);
  }
  cv_.notify_all();
  return s;
}

void AsyncEngine::cancel(TokenStream& s) {
  {
    std::lock_guard lock(s.mu_);
    if (s.done_) return;
    s.cancelled_ = true;
    s.done_ = true;
    s.wake();
  }
  std::lock_guard lock(mu_);
  // Not yet handed to the engine: its id is still -1 and the engine thread
  // drops it on seeing it cancelled.
  if (s.id_ >= 0) cancels_.push_back(s.id_);
  cv_.notify_all();
}

void AsyncEngine::cancel_all(const std::string& why) {
  {
    std::lock_guard lock(mu_);
    auto end = [&](TokenStream& s) {
      std::lock_guard slock(s.mu_);
      if (s.done_) return;
      s.error_ = why;
      s.cancelled_ = true;
      s.done_ = true;
      s.wake();
      if (s.id_ >= 0) cancels_.push_back(s.id_);
    };
    for (const std::weak_ptr<TokenStream>& w : live_)
      if (const std::shared_ptr<TokenStream> st = w.lock()) end(*st);
    for (auto& in : incoming_) end(*in.second);
  }
  cv_.notify_all();
}

void AsyncEngine::shutdown() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
}

void AsyncEngine::reopen() {
  std::lock_guard lock(mu_);
  if (!failed_.empty()) fail("the engine failed: {}", failed_);
  stopping_ = false;
}

EngineStats AsyncEngine::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

void AsyncEngine::run() {
  for (;;) {
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return !incoming_.empty() || !cancels_.empty() || stopping_ || !engine_.idle(); });
      for (auto& [r, s] : incoming_) {
        std::lock_guard slock(s->mu_);
        if (s->cancelled_) continue;
        s->id_ = engine_.add(std::move(r));
        live_.push_back(s);
      }
      incoming_.clear();
      for (int64_t id : cancels_) engine_.cancel(id);
      cancels_.clear();
      stats_ = engine_.stats();
      std::erase_if(live_, [](const std::weak_ptr<TokenStream>& w) { return w.expired(); });
      if (stopping_ && engine_.idle()) return;
    }
    try {
      engine_.step();
      std::lock_guard lock(mu_);
      stats_ = engine_.stats();
    } catch (const std::exception& e) {
      // A failed step leaves the engine's state unknown: end every request
      // with the error rather than serve from a broken cache.
      log::error("serve", "engine step failed: {}", e.what());
      std::lock_guard lock(mu_);
      stopping_ = true;
      failed_ = e.what();
      for (const std::weak_ptr<TokenStream>& w : live_)
        if (const std::shared_ptr<TokenStream> st = w.lock()) {
          std::lock_guard slock(st->mu_);
          if (!st->done_) st->error_ = failed_;
          st->done_ = true;
          st->wake();
        }
      return;
    }
  }
}

}  // namespace claw::serve
