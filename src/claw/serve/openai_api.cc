#include "claw/serve/openai_api.h"

#include <algorithm>

#include <fmt/format.h>

#include "claw/core/error.h"
#include "claw/serve/text_stream.h"

namespace claw::serve {

std::string dump_json(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

std::string error_body(const ApiError& e) {
  json err = {{"message", e.message}, {"type", e.type}, {"param", nullptr}, {"code", nullptr}};
  if (!e.param.empty()) err["param"] = e.param;
  if (!e.code.empty()) err["code"] = e.code;
  return dump_json(json{{"error", err}});
}

void bad(const std::string& param, const std::string& message) { throw ApiError{400, message, param}; }

namespace {

// Typed field access that names the field when the type is wrong.
template <typename T>
T field(const json& body, const char* name, T fallback) {
  if (!body.contains(name) || body[name].is_null()) return fallback;
  const json& v = body[name];
  if constexpr (std::is_same_v<T, bool>) {
    if (!v.is_boolean()) bad(name, fmt::format("'{}' must be a boolean", name));
  } else if constexpr (std::is_integral_v<T>) {
    if (!v.is_number_integer()) bad(name, fmt::format("'{}' must be an integer", name));
  } else if constexpr (std::is_floating_point_v<T>) {
    if (!v.is_number()) bad(name, fmt::format("'{}' must be a number", name));
  } else {
    if (!v.is_string()) bad(name, fmt::format("'{}' must be a string", name));
  }
  return v.get<T>();
}

// chat.completions: the messages rendered by the model's chat template.
void parse_messages(const ServedModel& m, const json& body, ApiRequest& job) {
  if (!body.contains("messages") || !body["messages"].is_array() || body["messages"].empty())
    bad("messages", "'messages' must be a non-empty array of {role, content} objects");
  std::vector<data::ChatMessage> msgs;
  for (size_t i = 0; i < body["messages"].size(); ++i) {
    const json& x = body["messages"][i];
    const std::string at = fmt::format("messages[{}]", i);
    if (!x.is_object() || !x.contains("role") || !x["role"].is_string())
      bad(at + ".role", fmt::format("'{}' needs a string 'role'", at));
    data::ChatMessage cm{x["role"].get<std::string>(), ""};
    if (cm.role != "system" && cm.role != "user" && cm.role != "assistant" && cm.role != "developer")
      bad(at + ".role", fmt::format("'{}.role' must be system, developer, user or assistant, got '{}'", at, cm.role));
    const json& c = x.contains("content") ? x["content"] : json();
    if (c.is_string()) {
      cm.content = c.get<std::string>();
    } else if (c.is_array()) {
      for (const json& part : c) {
        if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") || !part["text"].is_string())
          bad(at + ".content", fmt::format("'{}.content' parts must be {{\"type\": \"text\", \"text\": ...}}", at));
        cm.content += part["text"].get<std::string>();
      }
    } else if (!c.is_null()) {
      bad(at + ".content", fmt::format("'{}.content' must be a string or an array of text parts", at));
    }
    msgs.push_back(std::move(cm));
  }
  job.prompts.push_back(m.chat.encode(*m.tokenizer, msgs, true, !m.content_special_tokens));
  job.prompt_texts.push_back(m.chat.render(msgs));
  for (const std::string& s : m.chat.stop()) job.stop.push_back(s);
}

// completions: a string, strings, token ids or lists of them.
void parse_prompt(const ServedModel& m, const json& body, ApiRequest& job) {
  if (!body.contains("prompt")) bad("prompt", "'prompt' is required");
  const json& p = body["prompt"];
  auto ids_of = [&](const json& a, const std::string& at) {
    std::vector<int32_t> ids;
    for (const json& t : a) {
      if (!t.is_number_integer()) bad("prompt", fmt::format("'{}' must hold token ids (integers)", at));
      ids.push_back(static_cast<int32_t>(std::clamp<int64_t>(t.get<int64_t>(), -1, INT32_MAX)));
    }
    return ids;
  };
  if (p.is_string()) {
    job.prompts.push_back(m.tokenizer->encode(p.get<std::string>()));
    job.prompt_texts.push_back(p.get<std::string>());
  } else if (p.is_array() && !p.empty() && p[0].is_string()) {
    for (const json& s : p) {
      if (!s.is_string()) bad("prompt", "'prompt' mixes strings and other values");
      job.prompts.push_back(m.tokenizer->encode(s.get<std::string>()));
      job.prompt_texts.push_back(s.get<std::string>());
    }
  } else if (p.is_array() && !p.empty() && p[0].is_array()) {
    for (const json& a : p) {
      if (!a.is_array()) bad("prompt", "'prompt' mixes token lists and other values");
      job.prompts.push_back(ids_of(a, "prompt[i]"));
    }
  } else if (p.is_array() && !p.empty()) {
    job.prompts.push_back(ids_of(p, "prompt"));
  } else {
    bad("prompt", "'prompt' must be a string, an array of strings, token ids, or arrays of token ids");
  }
  for (size_t i = job.prompt_texts.size(); i < job.prompts.size(); ++i) {
    for (int32_t t : job.prompts[i])
      if (t < 0 || t >= m.tokenizer->vocab_size())
        bad("prompt", fmt::format("token id {} is outside the vocabulary [0, {})", t, m.tokenizer->vocab_size()));
    job.prompt_texts.push_back(valid_utf8(m.tokenizer->decode(job.prompts[i])));
  }
  job.echo = field<bool>(body, "echo", false);
}

// Length, sampling, n, stop, streaming and log-probabilities.
void parse_options(const ServedModel& m, const json& body, ApiRequest& job) {
  const bool chat = job.chat;
  job.return_token_ids = field<bool>(body, "return_token_ids", false);
  GenerationRequest& r = job.base;
  r.max_tokens = field<int64_t>(body, "max_completion_tokens", field<int64_t>(body, "max_tokens", chat ? 0 : 16));
  if (r.max_tokens == 0 && chat) r.max_tokens = m.max_model_len;  // chat's default: up to the context
  if (r.max_tokens < 1) bad("max_tokens", fmt::format("'max_tokens' must be at least 1, got {}", r.max_tokens));
  r.sampling.temperature = field<double>(body, "temperature", 1.0);
  r.sampling.top_p = field<double>(body, "top_p", 1.0);
  r.sampling.top_k = field<int64_t>(body, "top_k", 0);
  r.sampling.min_p = field<double>(body, "min_p", 0.0);
  job.seeded = body.contains("seed") && !body["seed"].is_null();
  r.sampling.seed = static_cast<uint64_t>(field<int64_t>(body, "seed", 0));
  try {
    r.sampling.validate();
  } catch (const Error& e) {
    const std::string msg = e.what();
    bad(msg.substr(0, msg.find(' ')), msg);
  }
  job.n = field<int64_t>(body, "n", 1);
  if (job.n < 1 || job.n > 16) bad("n", fmt::format("'n' must be between 1 and 16, got {}", job.n));
  if (body.contains("stop") && !body["stop"].is_null()) {
    const json& s = body["stop"];
    if (s.is_string()) {
      job.stop.push_back(s.get<std::string>());
    } else if (s.is_array() && s.size() <= 4) {
      for (const json& x : s) {
        if (!x.is_string()) bad("stop", "'stop' must be a string or an array of up to 4 strings");
        job.stop.push_back(x.get<std::string>());
      }
    } else {
      bad("stop", "'stop' must be a string or an array of up to 4 strings");
    }
  }
  if (!field<bool>(body, "ignore_eos", false)) r.stop_tokens = m.eos;
  job.stream = field<bool>(body, "stream", false);
  if (job.stream && job.return_token_ids)
    bad("return_token_ids", "'return_token_ids' is answered without 'stream' (the whole reply carries the ids)");
  if (body.contains("stream_options") && !body["stream_options"].is_null()) {
    if (!body["stream_options"].is_object()) bad("stream_options", "'stream_options' must be an object");
    if (!job.stream) bad("stream_options", "'stream_options' is only allowed with 'stream': true");
    job.include_usage = field<bool>(body["stream_options"], "include_usage", false);
  }
  if (chat) {
    const bool lp = field<bool>(body, "logprobs", false);
    const int64_t top = field<int64_t>(body, "top_logprobs", 0);
    if (top < 0 || top > 20) bad("top_logprobs", fmt::format("'top_logprobs' must be between 0 and 20, got {}", top));
    if (top > 0 && !lp) bad("top_logprobs", "'top_logprobs' needs 'logprobs': true");
    job.logprobs = lp ? top : -1;
  } else if (body.contains("logprobs") && !body["logprobs"].is_null()) {
    job.logprobs = field<int64_t>(body, "logprobs", 0);
    if (job.logprobs < 0 || job.logprobs > 20)
      bad("logprobs", fmt::format("'logprobs' must be between 0 and 20, got {}", job.logprobs));
  }
  r.top_logprobs = std::max<int64_t>(job.logprobs, 0);
  r.logprob = job.logprobs >= 0;  // otherwise nobody reads it
  // echo with logprobs scores the prompt too (its first token: null).
  if (job.scores_prompt()) r.prompt_logprobs = job.logprobs;
}

}  // namespace

ApiRequest parse_request(const ServedModel& m, const json& body, bool chat) {
  if (!body.is_object()) bad("", "the request body must be a JSON object");
  ApiRequest job;
  job.chat = chat;
  const std::string model_name = field<std::string>(body, "model", m.name);
  job.model = model_name;
  if (model_name != m.name && !m.observer)
    throw ApiError{404, fmt::format("The model '{}' does not exist; this server serves '{}'", model_name, m.name),
                   "model", "invalid_request_error", "model_not_found"};
  if (chat)
    parse_messages(m, body, job);
  else
    parse_prompt(m, body, job);
  for (const auto& p : job.prompts)
    if (p.empty()) bad(chat ? "messages" : "prompt", "the prompt is empty");
  parse_options(m, body, job);
  if (m.observer) {
    GenerationRequest& r = job.base;
    if (job.stream) bad("stream", "this endpoint serves an RL environment: no 'stream'");
    if (job.n != 1 || job.prompts.size() != 1) bad("n", "this endpoint serves an RL environment: one choice a request");
    r.logprob = true;
    try {
      m.observer->prepare(job.model, job.prompts[0], r);
      job.seeded = true;  // the observer's seed, as it set it
    } catch (const Error& e) {
      bad(chat ? "messages" : "prompt", e.what());
    }
  }
  return job;
}

std::string token_text(const ServedModel& m, int32_t id) {
  const int32_t one[1] = {id};
  return valid_utf8(m.tokenizer->decode(one));
}

// Completions' logprobs, empty.
json completions_logprobs() {
  return {{"tokens", json::array()}, {"token_logprobs", json::array()}, {"top_logprobs", json::array()},
          {"text_offset", json::array()}};
}


json logprob_entry(const ServedModel& m, const ApiRequest& job, const TokenOutput& t, json& completions_lp,
                   int64_t offset) {
  if (job.chat) {
    json top = json::array();
    for (const TokenLogprob& x : t.top) {
      const std::string s = token_text(m, x.token);
      top.push_back({{"token", s}, {"logprob", x.logprob}, {"bytes", std::vector<uint8_t>(s.begin(), s.end())}});
    }
    const std::string s = token_text(m, t.token);
    return {{"token", s}, {"logprob", t.logprob}, {"bytes", std::vector<uint8_t>(s.begin(), s.end())}, {"top_logprobs", top}};
  }
  const std::string s = token_text(m, t.token);
  completions_lp["tokens"].push_back(s);
  completions_lp["token_logprobs"].push_back(t.logprob);
  json top = json::object();
  for (const TokenLogprob& x : t.top) top[token_text(m, x.token)] = x.logprob;
  completions_lp["top_logprobs"].push_back(top);
  completions_lp["text_offset"].push_back(offset);
  return {};
}

std::string chunk_json(const ServedModel& m, const ApiRequest& job, const std::string& id, int64_t created, int64_t index,
                       const std::string& text, const json& lp, const std::string& finish, bool first) {
  json choice = {{"index", index}, {"finish_reason", finish.empty() ? json(nullptr) : json(finish)}};
  if (job.chat) {
    json delta = json::object();
    if (first) delta["role"] = "assistant";
    if (!text.empty() || first) delta["content"] = text;
    choice["delta"] = delta;
    choice["logprobs"] = lp.is_null() ? json(nullptr) : json{{"content", json::array({lp})}};
  } else {
    choice["text"] = text;
    choice["logprobs"] = lp;
  }
  json out = {{"id", id}, {"object", job.chat ? "chat.completion.chunk" : "text_completion"}, {"created", created},
              {"model", m.name}, {"choices", json::array({choice})}};
  return "data: " + dump_json(out) + "\n\n";
}

json usage_json(int64_t prompt_tokens, int64_t completion_tokens) {
  return {{"prompt_tokens", prompt_tokens}, {"completion_tokens", completion_tokens},
          {"total_tokens", prompt_tokens + completion_tokens}};
}

}  // namespace claw::serve
