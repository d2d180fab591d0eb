#include "claw/cli/generate_command.h"

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <memory>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "claw/cli/engine_flags.h"
#include "claw/cli/flags.h"
#include "claw/ckpt/safetensors.h"
#include "claw/core/error.h"
#include "claw/core/log.h"
#include "claw/serve/engine.h"
#include "claw/serve/text_stream.h"

namespace claw::cli {
namespace {

using Clock = std::chrono::steady_clock;

struct GenerateArgs {
  EngineFlags engine;
  std::string prompt, prompt_file, prompt_tokens;
  int64_t max_tokens = 128;
  serve::SamplingParams sampling;
  std::vector<std::string> stop;
  bool ignore_eos = false;
  bool echo = false;
  int64_t logprobs = 0;
  std::string output_format = "text";
  std::string logits_file;
  GenerateArgs() { engine.engine.max_num_seqs = 1; }  // one request: a cache for one sequence
};

std::vector<int32_t> parse_token_list(const std::string& text) {
  std::vector<int32_t> ids;
  std::string item;
  std::stringstream in(text);
  while (std::getline(in, item, ',')) {
    item.erase(0, item.find_first_not_of(" \t"));
    item.erase(item.find_last_not_of(" \t") + 1);
    if (item.empty()) continue;
    ids.push_back(static_cast<int32_t>(parse_int("--prompt-tokens", item)));
  }
  if (ids.empty()) fail("--prompt-tokens '{}' has no token ids (expected e.g. 464,3290,286)", text);
  return ids;
}

std::string read_prompt_file(const std::string& path) {
  if (path == "-") return std::string(std::istreambuf_iterator<char>(std::cin), {});
  std::ifstream f(path, std::ios::binary);
  if (!f) fail("--prompt-file {}: cannot open", path);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

void write(const std::string& s) {
  std::fwrite(s.data(), 1, s.size(), stdout);
  std::fflush(stdout);
}

void run(const GenerateArgs& a) {
  const int given = !a.prompt.empty() + !a.prompt_file.empty() + !a.prompt_tokens.empty();
  if (given != 1) fail("give exactly one of --prompt TEXT, --prompt-file FILE (- for stdin), --prompt-tokens IDS");
  if (a.output_format != "text" && a.output_format != "json")
    fail("--output-format '{}' is not one of text, json", a.output_format);
  if (a.logprobs != 0 && a.output_format != "json")
    fail("--logprobs {} needs --output-format json (the text output has no log-probabilities)", a.logprobs);
  if (a.logprobs < 0 || a.logprobs > 20) fail("--logprobs must be between 0 and 20, got {}", a.logprobs);
  if (a.echo && a.output_format != "text")
    fail("--echo prints the prompt before a text output; --output-format json reports prompt_tokens instead");
  serve::InferenceModelOptions mo = a.engine.model;
  const EngineJob job = start_engine_job(mo);
  serve::InferenceModel m = serve::load_inference_model(mo);
  log::info("generate", "loaded {}: {} layers, hidden {}, vocabulary {}; {}", m.source, m.cfg.num_layers,
            m.cfg.hidden_size, m.cfg.vocab_size, m.weights_summary());
  const CpuCtx cpu = a.engine.cpu();
  serve::Engine engine(*m.gpt, cpu, job.agree(a.engine.resolve(m)));
  if (!job.leader()) return engine.follow();
  std::vector<std::pair<std::string, std::string>> config = a.engine.resolved(m, engine.config());
  const serve::SamplingParams& sp = a.sampling;
  config.insert(config.end(), {{"prompt", a.prompt}, {"prompt-file", a.prompt_file},
                               {"prompt-tokens", a.prompt_tokens}, {"max-tokens", std::to_string(a.max_tokens)},
                               {"temperature", fmt::format("{}", sp.temperature)}, {"top-k", std::to_string(sp.top_k)},
                               {"top-p", fmt::format("{}", sp.top_p)}, {"min-p", fmt::format("{}", sp.min_p)},
                               {"seed", std::to_string(sp.seed)}, {"stop", fmt::format("{}", fmt::join(a.stop, " "))},
                               {"ignore-eos", a.ignore_eos ? "true" : "false"}, {"echo", a.echo ? "true" : "false"},
                               {"logprobs", std::to_string(a.logprobs)}, {"output-format", a.output_format},
                               {"logits-file", a.logits_file}});
  print_resolved_config("generate", config);
  std::vector<int32_t> prompt;
  std::string prompt_text;
  if (!a.prompt_tokens.empty()) {
    prompt = parse_token_list(a.prompt_tokens);
  } else {
    prompt_text = a.prompt.empty() ? read_prompt_file(a.prompt_file) : a.prompt;
    if (!m.tokenizer) fail("{} has no tokenizer: give --tokenizer-type and its files, or --prompt-tokens", m.source);
    prompt = m.tokenizer->encode(prompt_text);
  }
  if (!a.stop.empty() && !m.tokenizer) fail("--stop needs a tokenizer ({} has none)", m.source);

  std::unique_ptr<serve::TextStream> text;
  if (m.tokenizer) text = std::make_unique<serve::TextStream>(*m.tokenizer, a.stop);
  const bool stream = a.output_format == "text";
  if (stream && a.echo) write(prompt_text.empty() && m.tokenizer ? m.tokenizer->decode(prompt) : prompt_text);
  std::vector<serve::TokenOutput> outputs;
  serve::FinishReason finish = serve::FinishReason::none;
  Clock::time_point first_token;
  std::vector<float> logits;  // --logits-file: each generated token's step
  serve::GenerationRequest r{.prompt = prompt, .sampling = a.sampling, .max_tokens = a.max_tokens,
                             .top_logprobs = a.logprobs};
  if (!a.ignore_eos) r.stop_tokens = m.eos;
  r.on_token = [&](const serve::TokenOutput& t) {
    if (outputs.empty()) first_token = Clock::now();
    outputs.push_back(t);
    if (!a.logits_file.empty()) logits.insert(logits.end(), t.logits.begin(), t.logits.end());
    finish = t.finish;
    if (!text || t.finish == serve::FinishReason::stop) return true;  // a stop token is not text
    const std::string piece = text->push(t.token);
    if (stream) write(piece);
    if (text->stopped()) {
      finish = serve::FinishReason::stop;
      return false;
    }
    return true;
  };
  const Clock::time_point t0 = Clock::now();
  engine.add(std::move(r));
  while (engine.step()) {
  }
  const Clock::time_point t1 = Clock::now();
  if (text && stream) write(text->finish() + "\n");
  if (!a.logits_file.empty() && !outputs.empty()) {
    const int64_t steps = static_cast<int64_t>(outputs.size());
    ckpt::write_safetensors(a.logits_file, {{"logits", DType::f32, {steps, static_cast<int64_t>(logits.size()) / steps},
                                             logits.data()}});
  }
  const double ttft = std::chrono::duration<double>(first_token - t0).count();
  const double decode = std::chrono::duration<double>(t1 - first_token).count();
  const int64_t n = static_cast<int64_t>(outputs.size());
  log::info("generate", "{} prompt tokens, {} generated | time to first token {:.1f} ms | decode {:.1f} tok/s | {}",
            prompt.size(), n, ttft * 1e3, n > 1 ? (n - 1) / decode : 0.0, serve::finish_reason_name(finish));
  if (stream) return;
  nlohmann::json out = {{"prompt_tokens", prompt}, {"finish_reason", serve::finish_reason_name(finish)}};
  nlohmann::json tokens = nlohmann::json::array(), logprobs = nlohmann::json::array(), top = nlohmann::json::array();
  for (const serve::TokenOutput& t : outputs) {
    tokens.push_back(t.token);
    logprobs.push_back(t.logprob);
    nlohmann::json alts = nlohmann::json::array();
    for (const serve::TokenLogprob& x : t.top) alts.push_back({{"token", x.token}, {"logprob", x.logprob}});
    top.push_back(alts);
  }
  out["tokens"] = tokens;
  out["logprobs"] = logprobs;
  if (a.logprobs > 0) out["top_logprobs"] = top;
  if (text) out["text"] = serve::valid_utf8(text->text() + text->finish());
  write(out.dump() + "\n");
}

}  // namespace

void add_generate_command(CLI::App& app) {
  auto a = std::make_shared<GenerateArgs>();
  CLI::App* sub = app.add_subcommand("generate", "generate text from a prompt (greedy unless --temperature > 0)");
  a->engine.add_to(*sub);
  sub->add_option("--prompt,-p", a->prompt, "the prompt text");
  sub->add_option("--prompt-file,-f", a->prompt_file, "read the prompt from this file (- for stdin)");
  sub->add_option("--prompt-tokens", a->prompt_tokens, "the prompt as token ids, comma-separated");
  sub->add_option("--max-tokens,-n", a->max_tokens, "tokens to generate at most")->capture_default_str();
  add_sampling_flags(*sub, a->sampling);
  sub->add_option("--stop", a->stop, "stop before this text (repeatable)");
  sub->add_flag("--ignore-eos", a->ignore_eos, "keep generating after the end-of-text token");
  sub->add_flag("--echo", a->echo, "print the prompt before the continuation");
  sub->add_option("--logprobs", a->logprobs, "with --output-format json: the N most likely tokens at each step (0-20)");
  sub->add_option("--output-format", a->output_format, "text (streamed) or json")->capture_default_str();
  sub->add_option("--logits-file", a->logits_file,
                  "also write the logits of each generated token's step as safetensors ([tokens, vocabulary] f32)");
  sub->callback([a] { run(*a); });
}

}  // namespace claw::cli
