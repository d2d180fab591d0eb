#include "claw/cli/chat_command.h"

#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <memory>
#include <string>

#include <fmt/format.h>

#include "claw/cli/engine_flags.h"
#include "claw/core/error.h"
#include "claw/core/log.h"
#include "claw/data/chat_template.h"
#include "claw/serve/engine.h"
#include "claw/serve/text_stream.h"

namespace claw::cli {
namespace {

struct ChatArgs {
  EngineFlags engine;
  serve::SamplingParams sampling;
  std::string system;
  std::string chat_template;
  int64_t max_tokens = 512;
  ChatArgs() { engine.engine.max_num_seqs = 1; }
};

void write(const std::string& s) {
  std::fwrite(s.data(), 1, s.size(), stdout);
  std::fflush(stdout);
}

void run(const ChatArgs& a) {
  serve::InferenceModel m = serve::load_inference_model(a.engine.model);
  if (!m.tokenizer) fail("{} has no tokenizer: give --tokenizer-type and its files", m.source);
  // The model's own template (a GGUF file's) unless --chat-template names one.
  const bool own = a.chat_template.empty() && !m.chat_template.empty();
  const std::string name = !a.chat_template.empty() ? a.chat_template
                           : own                    ? m.source + " chat template"
                                                    : data::default_chat_template(m.cfg.vocab_size);
  data::ChatTemplate tmpl = own ? data::jinja_chat_template(m.chat_template, name) : data::chat_template(name);
  tmpl.use_tokens_of(*m.tokenizer, m.bos);
  serve::Engine engine(*m.gpt, a.engine.cpu(), a.engine.resolve(m));
  const bool tty = isatty(STDIN_FILENO);
  if (tty) write(fmt::format("chatting with {} (template {}); /reset starts over, /exit ends\n", m.source, name));
  std::vector<data::ChatMessage> history;
  if (!a.system.empty()) history.push_back({"system", a.system});
  const size_t fresh = history.size();
  std::string line;
  uint64_t turn = 0;
  for (;;) {
    if (tty) write("> ");
    if (!std::getline(std::cin, line) || line == "/exit") break;
    if (line == "/reset") {
      history.resize(fresh);
      if (tty) write("(conversation cleared)\n");
      continue;
    }
    if (line.empty()) continue;
    history.push_back({"user", line});
    const std::vector<int32_t> prompt =
        m.tokenizer->encode(tmpl.render(history), data::SpecialTokens::recognise);
    serve::TextStream text(*m.tokenizer, tmpl.stop());
    serve::GenerationRequest r{.prompt = prompt, .sampling = a.sampling, .max_tokens = a.max_tokens,
                               .stop_tokens = m.eos};
    r.sampling.seed = a.sampling.seed + turn++;
    r.on_token = [&](const serve::TokenOutput& t) {
      if (t.finish == serve::FinishReason::stop) return true;  // the end-of-text token: not shown
      write(text.push(t.token));
      return !text.stopped();
    };
    try {
      engine.add(std::move(r));
    } catch (const Error& e) {
      history.pop_back();
      write(fmt::format("(not sent: {})\n", e.what()));
      continue;
    }
    while (engine.step()) {
    }
    write(text.finish() + "\n");
    history.push_back({"assistant", text.text()});
  }
}

}  // namespace

void add_chat_command(CLI::App& app) {
  auto a = std::make_shared<ChatArgs>();
  CLI::App* sub = app.add_subcommand("chat", "talk with a model in the terminal (its chat template)");
  a->engine.add_to(*sub);
  add_sampling_flags(*sub, a->sampling);
  sub->add_option("--system", a->system, "a system message to start the conversation with");
  sub->add_option("--chat-template", a->chat_template, "llama3, chatml, plain or a Jinja template FILE.jinja (default: from the model)");
  sub->add_option("--max-tokens,-n", a->max_tokens, "longest reply in tokens")->capture_default_str();
  sub->callback([a] { run(*a); });
}

}  // namespace claw::cli
