// The OpenAI API's wire format for `claw serve`: /v1/completions and
// /v1/chat/completions request bodies parsed and checked into an ApiRequest
// (every bad field an ApiError naming it, as OpenAI words its errors), and
// the JSON of responses, stream chunks and log-probabilities. The HTTP
// server (http_server.cc) runs the requests; this file only speaks the format.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "claw/serve/engine.h"
#include "claw/serve/http_server.h"

namespace claw::serve {

using json = nlohmann::json;

// An error the client caused (or may retry), as OpenAI words it.
struct ApiError {
  int status = 400;
  std::string message;
  std::string param;  // the offending field, if any
  std::string type = "invalid_request_error";
  std::string code;
};

// Client bytes echoed in messages (a body that is not UTF-8) become U+FFFD
// instead of making the dump throw.
std::string dump_json(const json& j);
std::string error_body(const ApiError& e);
// A 400 naming the offending field.
[[noreturn]] void bad(const std::string& param, const std::string& message);

// One parsed request of either endpoint: the prompts (each run n times)
// and how to run them.
struct ApiRequest {
  std::string model;  // the request's `model` field
  bool chat = false;
  std::vector<std::vector<int32_t>> prompts;
  std::vector<std::string> prompt_texts;  // for echo
  int64_t n = 1;
  GenerationRequest base;
  std::vector<std::string> stop;
  bool stream = false, include_usage = false, echo = false;
  // vLLM's return_token_ids: the reply carries prompt_token_ids (the ids the
  // model was given, template applied) and each choice's token_ids.
  bool return_token_ids = false;
  int64_t logprobs = -1;  // completions: top alternatives (-1: none); chat: top_logprobs with logprobs true
  bool seeded = false;
  bool scores_prompt() const { return echo && logprobs >= 0; }  // completions' echo with logprobs
};

// A request body (already JSON) for the model; an ApiError when it is not
// one the endpoint (chat or completions) accepts.
ApiRequest parse_request(const ServedModel& m, const json& body, bool chat);

// One token as text (invalid UTF-8 replaced).
std::string token_text(const ServedModel& m, int32_t id);
// Completions' logprobs, empty.
json completions_logprobs();
// Token t's log-probabilities: chat's entry returned; completions' appended
// to completions_lp (its text at `offset`), and an empty json returned.
json logprob_entry(const ServedModel& m, const ApiRequest& job, const TokenOutput& t, json& completions_lp,
                   int64_t offset);
// One server-sent event of a stream: choice `index`'s next text.
std::string chunk_json(const ServedModel& m, const ApiRequest& job, const std::string& id, int64_t created,
                       int64_t index, const std::string& text, const json& lp, const std::string& finish, bool first);
json usage_json(int64_t prompt_tokens, int64_t completion_tokens);

}  // namespace claw::serve
