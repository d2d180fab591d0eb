#include "claw/data/pretokenizer.h"

#include "claw/core/error.h"
#include "claw/data/gpt2_pretokenizer.h"
#include "claw/data/tiktoken_pretokenizer.h"

namespace claw::data {

std::string_view to_string(Pretokenizer p) {
  switch (p) {
    case Pretokenizer::gpt2: return "gpt2";
    case Pretokenizer::cl100k: return "cl100k";
    case Pretokenizer::o200k: return "o200k";
    case Pretokenizer::qwen2: return "qwen2";
  }
  CLAW_CHECK(false, "pretokenizer {}", static_cast<int>(p));
  return {};
}

Pretokenizer parse_pretokenizer(std::string_view name, std::string_view flag) {
  for (Pretokenizer p : {Pretokenizer::gpt2, Pretokenizer::cl100k, Pretokenizer::o200k, Pretokenizer::qwen2})
    if (name == to_string(p)) return p;
  fail("{} '{}' is not one of: gpt2, cl100k, o200k, qwen2", flag, name);
}

PretokenEnd pretoken_end_function(Pretokenizer p) {
  switch (p) {
    case Pretokenizer::gpt2: return gpt2_pretoken_end;
    case Pretokenizer::cl100k: return cl100k_pretoken_end;
    case Pretokenizer::o200k: return o200k_pretoken_end;
    case Pretokenizer::qwen2: return qwen2_pretoken_end;
  }
  CLAW_CHECK(false, "pretokenizer {}", static_cast<int>(p));
  return nullptr;
}

size_t pretoken_end(Pretokenizer p, std::string_view text, size_t begin) {
  return pretoken_end_function(p)(text, begin);
}

std::vector<std::string_view> pretokenize(Pretokenizer p, std::string_view text) {
  std::vector<std::string_view> pieces;
  const PretokenEnd end_of = pretoken_end_function(p);
  for (size_t b = 0; b < text.size();) {
    size_t e = end_of(text, b);
    pieces.push_back(text.substr(b, e - b));
    b = e;
  }
  return pieces;
}

}  // namespace claw::data
