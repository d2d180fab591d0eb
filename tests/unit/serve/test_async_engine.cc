// The server's engine thread and its request threads (AsyncEngine): clients
// on threads of their own submit, read their streams (blocking, or polling
// one signal for several streams) and cancel while the engine steps on the
// thread that loaded the model. Each request's tokens are bitwise those it
// gets alone; a cancelled one ends and frees its blocks; shutdown refuses new
// requests and returns once the admitted ones are done; reopen serves again.
// scripts/test-sanitize runs these under ThreadSanitizer.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "claw/core/error.h"
#include "claw/model/config.h"
#include "claw/model/gpt.h"
#include "claw/serve/async_engine.h"
#include "claw/serve/engine.h"

namespace claw::serve {
namespace {

// One thread for the kernels: the threads under test are the engine's and
// the clients' (and libgomp, not instrumented, stays out of TSan's way).
const CpuCtx ctx{1};

model::ModelConfig small() {
  model::ModelConfig c = model::model_preset("gpt2-tiny");
  c.num_layers = 2;
  c.vocab_size = 1000;
  c.hidden_dropout = 0;
  c.max_position_embeddings = 128;
  return c;
}

GenerationRequest request_for(int i, int64_t V) {
  std::mt19937 rng(static_cast<uint32_t>(100 + i));
  GenerationRequest r;
  r.prompt.resize(static_cast<size_t>(4 + 3 * i));
  for (int32_t& t : r.prompt) t = static_cast<int32_t>(rng() % V);
  r.max_tokens = 6 + i % 4;
  if (i % 2) r.sampling = {.temperature = 0.8, .top_k = 20, .seed = uint64_t(i)};
  return r;
}

struct Tokens {
  std::vector<int32_t> ids;
  std::vector<double> logprobs;
  bool operator==(const Tokens& o) const {
    return ids == o.ids && logprobs.size() == o.logprobs.size() &&
           std::memcmp(logprobs.data(), o.logprobs.data(), logprobs.size() * sizeof(double)) == 0;
  }
};

// Each request alone in an engine of its own: what it must get under load.
std::vector<Tokens> alone(model::GPT& m, const EngineConfig& cfg, int n) {
  std::vector<Tokens> out(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    Engine e(m, ctx, cfg);
    GenerationRequest r = request_for(i, m.config().vocab_size);
    r.on_token = [&out, i](const TokenOutput& t) {
      out[i].ids.push_back(t.token);
      out[i].logprobs.push_back(t.logprob);
      return true;
    };
    e.add(std::move(r));
    while (e.step()) {
    }
  }
  return out;
}

Tokens read_all(TokenStream& s) {
  Tokens got;
  while (std::optional<TokenOutput> t = s.next()) {
    got.ids.push_back(t->token);
    got.logprobs.push_back(t->logprob);
  }
  return got;
}

TEST(AsyncEngine, ClientThreadsGetTheirTokensWhileTheEngineSteps) {
  const model::ModelConfig c = small();
  model::GPT m(c);
  m.init_weights(ctx, 7);
  // Few blocks and a small step budget: requests wait, prefill in chunks and
  // are preempted while the clients come and go.
  const EngineConfig cfg{.block_size = 8, .num_blocks = 12, .max_num_batched_tokens = 16};
  constexpr int kClients = 4, kPerClient = 3, kRequests = kClients * kPerClient;
  const std::vector<Tokens> expected = alone(m, cfg, kRequests);

  AsyncEngine ae(m, ctx, cfg);
  std::vector<Tokens> got(kRequests);
  std::vector<std::string> errors(kRequests);
  Tokens cancelled;
  std::atomic<int> clients_left{kClients};
  std::vector<std::thread> clients;
  for (int k = 0; k < kClients; ++k)
    clients.emplace_back([&, k] {
      if (k % 2 == 0) {
        // One request after another, each read to its end.
        for (int j = 0; j < kPerClient; ++j) {
          const int i = k * kPerClient + j;
          std::shared_ptr<TokenStream> s = ae.submit(request_for(i, c.vocab_size));
          got[i] = read_all(*s);
          errors[i] = s->error();
        }
      } else {
        // All at once, read as they come through one signal (a request's
        // several choices are served this way).
        auto signal = std::make_shared<StreamSignal>();
        std::vector<std::shared_ptr<TokenStream>> streams;
        for (int j = 0; j < kPerClient; ++j) streams.push_back(ae.submit(request_for(k * kPerClient + j, c.vocab_size), signal));
        std::vector<bool> ended(kPerClient, false);
        for (int open = kPerClient; open > 0;) {
          const uint64_t seen = signal->count();
          for (int j = 0; j < kPerClient; ++j) {
            if (ended[j]) continue;
            const int i = k * kPerClient + j;
            bool end = false;
            while (std::optional<TokenOutput> t = streams[j]->try_next(&end)) {
              got[i].ids.push_back(t->token);
              got[i].logprobs.push_back(t->logprob);
            }
            if (end) {
              ended[j] = true;
              errors[i] = streams[j]->error();
              --open;
            }
          }
          if (open > 0) signal->wait_past(seen);
        }
      }
      // And one the client walks away from after two tokens.
      GenerationRequest r = request_for(k, c.vocab_size);
      r.max_tokens = 40;
      std::shared_ptr<TokenStream> s = ae.submit(std::move(r));
      for (int n = 0; n < 2; ++n)
        if (std::optional<TokenOutput> t = s->next()) {
          if (k == 0) cancelled.ids.push_back(t->token);
        }
      ae.cancel(*s);
      while (s->next()) {
      }
      if (--clients_left == 0) ae.shutdown();
    });
  ae.run();  // on this thread, which loaded the model; returns after shutdown()
  for (std::thread& t : clients) t.join();

  for (int i = 0; i < kRequests; ++i) {
    EXPECT_EQ(errors[i], "") << "request " << i;
    EXPECT_TRUE(got[i] == expected[i]) << "request " << i << ": " << got[i].ids.size() << " tokens, "
                                       << expected[i].ids.size() << " alone";
  }
  EXPECT_EQ(cancelled.ids.size(), 2u);
  const EngineStats st = ae.stats();
  EXPECT_EQ(st.blocks_used, 0) << "a cancelled or finished request kept its blocks";
  EXPECT_EQ(st.running + st.waiting, 0);

  // Shut down: a new request is refused with the reason.
  try {
    ae.submit(request_for(0, c.vocab_size));
    ADD_FAILURE() << "a request was admitted after shutdown";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("shutting down"), std::string::npos) << e.what();
  }
  // Reopened (claw rl's next round): served again, from another thread.
  ae.reopen();
  Tokens again;
  std::thread client([&] {
    std::shared_ptr<TokenStream> s = ae.submit(request_for(3, c.vocab_size));
    again = read_all(*s);
    ae.shutdown();
  });
  ae.run();
  client.join();
  EXPECT_TRUE(again == expected[3]);
}

}  // namespace
}  // namespace claw::serve
