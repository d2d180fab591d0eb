#include "claw/cli/tokenize_command.h"

#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "claw/cli/flags.h"
#include "claw/ckpt/format.h"
#include "claw/core/arena.h"
#include "claw/core/error.h"
#include "claw/data/builtin_corpus.h"
#include "claw/data/chat_template.h"
#include "claw/data/pretokenizer_unicode.h"
#include "claw/data/tokenizer_factory.h"
#include "claw/kernels/cpu/blas.h"

namespace claw::cli {
namespace {

struct TokenizeArgs {
  data::TokenizerOptions tokenizer;
  std::string input;  // empty or "-": stdin
  bool decode = false;
  bool special = false;
  bool whole_input = false;
  bool stats = false;
  std::string chat;           // --chat FILE.json: a conversation rendered by --chat-template, then its ids
  std::string chat_template;  // built-in name or FILE.jinja (default: from the vocabulary)
  bool no_generation_prompt = false;
  int64_t num_threads = 0;
  // Longest text held at once (a line; with --whole-input, the input): the
  // reader must stop somewhere, or a stream without newlines (/dev/zero)
  // grows it until the machine runs out.
  int64_t max_line_bytes = int64_t{64} << 20;
  TokenizeArgs() { num_threads = kernels::default_num_threads(); }
};

using F = Flag<TokenizeArgs>;

const std::vector<F>& tokenize_flags() {
  using A = TokenizeArgs;
  static const std::vector<F> flags = {
      string_flag<A>("tokenizer-type", "GPT2BPETokenizer, TikTokenizer, SentencePieceTokenizer or HFTokenizer",
                     [](A& a) -> auto& { return a.tokenizer.type; }),
      string_flag<A>("vocab-file", "GPT-2 encoder.json (default: <data dir>/gpt2/encoder.json)",
                     [](A& a) -> auto& { return a.tokenizer.vocab_file; }),
      string_flag<A>("merge-file", "GPT-2 vocab.bpe (default: <data dir>/gpt2/vocab.bpe)",
                     [](A& a) -> auto& { return a.tokenizer.merge_file; }),
      string_flag<A>("tokenizer-model", "tiktoken rank file (.tiktoken), SentencePiece .model, or tokenizer.json (or its model directory)",
                     [](A& a) -> auto& { return a.tokenizer.model_file; }),
      string_flag<A>("tiktoken-pattern", "pre-tokenizer of a rank file: gpt2, cl100k or o200k (default: from its name)",
                     [](A& a) -> auto& { return a.tokenizer.tiktoken_pattern; }),
      string_flag<A>("input", "read this file instead of stdin", [](A& a) -> auto& { return a.input; }),
      switch_flag<A>("decode", "read lines of ids and print their text", [](A& a) -> auto& { return a.decode; }),
      switch_flag<A>("special", "encode special-token text such as <|endoftext|> as its id (default: as text)",
                     [](A& a) -> auto& { return a.special; }),
      switch_flag<A>("whole-input", "treat the whole input as one text instead of one text per line",
                     [](A& a) -> auto& { return a.whole_input; }),
      int_flag<A>("num-threads", "encoding threads (default: the CPUs this process may use)",
                  [](A& a) -> auto& { return a.num_threads; }),
      int_flag<A>("max-line-bytes", "longest line (with --whole-input: longest input) read, in bytes",
                  [](A& a) -> auto& { return a.max_line_bytes; }),
      switch_flag<A>("stats", "print bytes, tokens and encoding MB/s to stderr",
                     [](A& a) -> auto& { return a.stats; }),
      string_flag<A>("chat", "a conversation (JSON: [{\"role\", \"content\"}, ...] or {\"messages\": [...]}): print it "
                     "rendered by --chat-template, then its ids", [](A& a) -> auto& { return a.chat; }),
      string_flag<A>("chat-template", "with --chat: llama3, chatml, plain or FILE.jinja (default: the tokenizer's own, else from the vocabulary)",
                     [](A& a) -> auto& { return a.chat_template; }),
      switch_flag<A>("no-generation-prompt", "with --chat: end after the last message (no assistant turn opened)",
                     [](A& a) -> auto& { return a.no_generation_prompt; }),
  };
  return flags;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// CPU seconds used by all threads of the process so far: with wall time it
// tells whether threads were slowed by their work or by a busy machine.
double process_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// The input as a stream of blocks; names itself in errors.
class Input {
 public:
  explicit Input(const std::string& path) {
    if (path.empty() || path == "-") {
      name_ = "stdin";
      file_ = stdin;
      return;
    }
    name_ = "--input " + path;
    file_ = std::fopen(path.c_str(), "rb");
    if (file_ == nullptr) fail("--input {}: cannot open ({})", path, std::strerror(errno));
    owned_ = true;
  }
  Input(const Input&) = delete;
  Input& operator=(const Input&) = delete;
  ~Input() {
    if (owned_) std::fclose(file_);
  }

  // Appends up to `max` bytes to `buf`; false at end of input.
  bool read(std::string& buf, size_t max) {
    const size_t old = buf.size();
    buf.resize(old + max);
    const size_t got = std::fread(buf.data() + old, 1, max, file_);
    buf.resize(old + got);
    if (std::ferror(file_)) fail("{}: read error ({})", name_, std::strerror(errno));
    return got > 0;
  }
  const std::string& name() const { return name_; }

 private:
  std::string name_;
  std::FILE* file_ = nullptr;
  bool owned_ = false;
};

void write_out(std::string_view s) {
  if (!s.empty() && std::fwrite(s.data(), 1, s.size(), stdout) != s.size())
    fail("cannot write the output ({})", std::strerror(errno));
}

void append_ids(std::string& out, const std::vector<int32_t>& ids) {
  char buf[16];
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i > 0) out.push_back(' ');
    auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), ids[i]);
    out.append(buf, end);
  }
  out.push_back('\n');
}

[[noreturn]] void line_too_long(const Input& in, const TokenizeArgs& a, int64_t line) {
  fail("{} {}: longer than --max-line-bytes {} ({}); raise --max-line-bytes to read it", in.name(),
       a.whole_input ? std::string("(--whole-input)") : fmt::format("line {}", line), a.max_line_bytes,
       format_bytes(static_cast<double>(a.max_line_bytes)));
}

// Fails when the unfinished line at the end of `buf` (from `from`) is already too long.
void check_partial_line(const std::string& buf, size_t from, const Input& in, const TokenizeArgs& a, int64_t line) {
  if (static_cast<int64_t>(buf.size() - from) > a.max_line_bytes) line_too_long(in, a, line);
}

void check_utf8(std::string_view text, const Input& in, int64_t first_line) {
  const size_t bad = data::unicode::first_invalid_utf8(text);
  if (bad == text.size()) return;
  const size_t line_start = text.rfind('\n', bad) == std::string_view::npos ? 0 : text.rfind('\n', bad) + 1;
  int64_t line = first_line;
  for (size_t i = 0; i < line_start; ++i) line += text[i] == '\n';
  fail("{} line {}: invalid UTF-8 at byte {} of the line (0x{:02x}); claw tokenize encodes UTF-8 text", in.name(),
       line, bad - line_start + 1, static_cast<unsigned char>(text[bad]));
}

struct Totals {
  int64_t lines = 0, bytes = 0, tokens = 0;
  double encode_s = 0, encode_cpu_s = 0;
};

// Encodes texts on the thread team and prints one line of ids per text.
void encode_and_print(const data::Tokenizer& tok, const TokenizeArgs& a, const std::vector<std::string>& texts,
                      Totals& t) {
  const auto t0 = std::chrono::steady_clock::now();
  const double cpu0 = process_cpu_seconds();
  std::vector<std::vector<int32_t>> ids = tok.encode_batch(
      texts, static_cast<int>(a.num_threads), a.special ? data::SpecialTokens::recognise : data::SpecialTokens::as_text);
  t.encode_s += seconds_since(t0);
  t.encode_cpu_s += process_cpu_seconds() - cpu0;
  std::string out;
  for (size_t i = 0; i < texts.size(); ++i) {
    t.bytes += static_cast<int64_t>(texts[i].size());
    t.tokens += static_cast<int64_t>(ids[i].size());
    append_ids(out, ids[i]);
  }
  t.lines += static_cast<int64_t>(texts.size());
  write_out(out);
}

void encode(const data::Tokenizer& tok, const TokenizeArgs& a, Input& in, Totals& t) {
  constexpr size_t kBlock = size_t{4} << 20;  // large enough to keep every thread busy
  std::string buf;
  if (a.whole_input) {
    while (in.read(buf, kBlock)) check_partial_line(buf, 0, in, a, 1);
    check_partial_line(buf, 0, in, a, 1);
    check_utf8(buf, in, 1);
    encode_and_print(tok, a, {std::move(buf)}, t);
    return;
  }
  std::vector<std::string> lines;
  bool more = true;
  while (more) {
    more = in.read(buf, kBlock);
    // Complete lines only, except at the end, where a last line may lack its '\n'.
    size_t end = more ? buf.rfind('\n') : buf.size();
    if (end == std::string::npos) {
      check_partial_line(buf, 0, in, a, t.lines + 1);
      continue;
    }
    if (more) ++end;
    const std::string_view block(buf.data(), end);
    check_utf8(block, in, t.lines + 1);
    lines.clear();
    for (size_t b = 0; b < block.size();) {
      size_t e = block.find('\n', b);
      if (e == std::string_view::npos) e = block.size();
      if (static_cast<int64_t>(e - b) > a.max_line_bytes)
        line_too_long(in, a, t.lines + static_cast<int64_t>(lines.size()) + 1);
      lines.emplace_back(block.substr(b, e - b));
      b = e + 1;
    }
    check_partial_line(buf, end, in, a, t.lines + static_cast<int64_t>(lines.size()) + 1);
    encode_and_print(tok, a, lines, t);
    buf.erase(0, end);
  }
}

// Parses the ids of one line (or, with --whole-input, of everything).
void parse_ids(std::string_view text, const Input& in, int64_t line, std::vector<int32_t>& ids) {
  ids.clear();
  for (size_t b = text.find_first_not_of(" \t\r\n"); b != std::string_view::npos;
       b = text.find_first_not_of(" \t\r\n", b)) {
    size_t e = text.find_first_of(" \t\r\n", b);
    if (e == std::string_view::npos) e = text.size();
    const std::string_view word = text.substr(b, e - b);
    int32_t id = -1;
    auto [p, ec] = std::from_chars(word.data(), word.data() + word.size(), id);
    if (ec != std::errc() || p != word.data() + word.size() || id < 0)
      fail("{} line {}: '{}' is not a token id (--decode reads non-negative integers separated by spaces)", in.name(),
           line, word);
    ids.push_back(id);
    b = e;
  }
}

void decode_ids(const data::Tokenizer& tok, const std::vector<int32_t>& ids, const Input& in, int64_t line,
                std::string& out) {
  try {
    out += tok.decode(ids);
  } catch (const Error& e) {
    fail("{} line {}: {}", in.name(), line, e.what());
  }
}

void decode(const data::Tokenizer& tok, const TokenizeArgs& a, Input& in, Totals& t) {
  std::string buf, out;
  std::vector<int32_t> ids;
  if (a.whole_input) {
    while (in.read(buf, size_t{4} << 20)) check_partial_line(buf, 0, in, a, 1);
    check_partial_line(buf, 0, in, a, 1);
    // Parse line by line so that an error names its line.
    int64_t line = 0;
    std::vector<int32_t> all;
    for (size_t b = 0; b < buf.size();) {
      size_t e = buf.find('\n', b);
      if (e == std::string::npos) e = buf.size();
      parse_ids(std::string_view(buf).substr(b, e - b), in, ++line, ids);
      all.insert(all.end(), ids.begin(), ids.end());
      b = e + 1;
    }
    decode_ids(tok, all, in, line, out);
    t.tokens = static_cast<int64_t>(all.size());
    t.bytes = static_cast<int64_t>(out.size());
    t.lines = line;
    write_out(out);
    return;
  }
  bool more = true;
  while (more) {
    more = in.read(buf, size_t{1} << 20);
    size_t end = more ? buf.rfind('\n') : buf.size();
    if (end == std::string::npos) {
      check_partial_line(buf, 0, in, a, t.lines + 1);
      continue;
    }
    if (more) ++end;
    out.clear();
    for (size_t b = 0; b < end;) {
      size_t e = buf.find('\n', b);
      if (e == std::string::npos || e > end) e = end;
      if (static_cast<int64_t>(e - b) > a.max_line_bytes) line_too_long(in, a, t.lines + 1);
      parse_ids(std::string_view(buf).substr(b, e - b), in, ++t.lines, ids);
      const size_t before = out.size();
      decode_ids(tok, ids, in, t.lines, out);
      t.bytes += static_cast<int64_t>(out.size() - before);
      t.tokens += static_cast<int64_t>(ids.size());
      out.push_back('\n');
      b = e + 1;
    }
    write_out(out);
    buf.erase(0, end);
  }
}

// --chat: the conversation as the template renders it, then its ids (the
// messages' own special-token text as text unless --special), for looking
// at what a template makes of a conversation.
void print_chat(const data::Tokenizer& tok, const TokenizeArgs& a) {
  const nlohmann::json j = ckpt::read_json_file(a.chat, "the conversation (--chat)");
  const nlohmann::json& list = j.is_object() && j.contains("messages") ? j["messages"] : j;
  if (!list.is_array() || list.empty())
    fail("--chat {}: expected a non-empty array of {{\"role\", \"content\"}} objects, or {{\"messages\": [...]}}",
         a.chat);
  std::vector<data::ChatMessage> messages;
  for (size_t i = 0; i < list.size(); ++i) {
    const nlohmann::json& m = list[i];
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string() || !m.contains("content") ||
        !m["content"].is_string())
      fail("--chat {}: message {} needs string \"role\" and \"content\"", a.chat, i);
    messages.push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
  }
  const data::ChatTemplate tmpl = data::chat_template_for(tok, a.chat_template);
  const bool gen = !a.no_generation_prompt;
  const std::vector<int32_t> ids = tmpl.encode(tok, messages, gen, !a.special);
  fmt::print("{}\n{}\n", tmpl.render(messages, gen), fmt::join(ids, " "));
}

struct TokenizeCommand {
  std::unique_ptr<FlagBinder<TokenizeArgs>> binder;

  void run() {
    TokenizeArgs a;
    binder->apply(a);
    if (a.num_threads < 1) fail("--num-threads {} must be at least 1", a.num_threads);
    if (a.max_line_bytes < 1) fail("--max-line-bytes {} must be at least 1", a.max_line_bytes);
    data::TokenizerOptions& o = a.tokenizer;
    if (o.type == "GPT2BPETokenizer" && o.vocab_file.empty() && o.merge_file.empty()) {
      o.vocab_file = data::default_data_dir() + "/gpt2/encoder.json";
      o.merge_file = data::default_data_dir() + "/gpt2/vocab.bpe";
    }
    const auto t0 = std::chrono::steady_clock::now();
    const std::unique_ptr<data::Tokenizer> tok = data::make_tokenizer(o);
    const double load_s = seconds_since(t0);
    if (!a.chat.empty()) return print_chat(*tok, a);
    Input in(a.input);
    Totals t;
    const auto t1 = std::chrono::steady_clock::now();
    if (a.decode)
      decode(*tok, a, in, t);
    else
      encode(*tok, a, in, t);
    if (std::fflush(stdout) != 0) fail("cannot write the output ({})", std::strerror(errno));
    if (a.stats)
      fmt::print(stderr,
                 "tokenize: tokenizer={} mode={} threads={} lines={} bytes={} tokens={} load_s={:.3f} "
                 "encode_s={:.4f} encode_cpu_s={:.4f} encode_mb_per_s={:.2f} total_s={:.4f}\n",
                 tok->name(), a.decode ? "decode" : "encode", a.num_threads, t.lines, t.bytes, t.tokens, load_s,
                 t.encode_s, t.encode_cpu_s, t.encode_s > 0 ? t.bytes / t.encode_s / 1e6 : 0.0, seconds_since(t1));
  }
};

}  // namespace

void add_tokenize_command(CLI::App& app) {
  auto cmd = std::make_shared<TokenizeCommand>();
  CLI::App* sub = app.add_subcommand("tokenize", "print the token ids of text on stdin (--decode: the reverse)");
  sub->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  static const TokenizeArgs defaults;
  cmd->binder = std::make_unique<FlagBinder<TokenizeArgs>>(*sub, tokenize_flags(), defaults);
  sub->callback([cmd] { cmd->run(); });
}

}  // namespace claw::cli
