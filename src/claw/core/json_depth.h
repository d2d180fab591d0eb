// How deeply a JSON text nests, found without parsing it: nlohmann's parser
// is iterative, but dumping, comparing or walking a value recurses once per
// level, so a record of 100,000 nested brackets parses and then overflows
// the stack. Readers of untrusted JSON refuse such a text up front.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace claw {

// Deeper than any document, config or request has reason to be.
inline constexpr int kMaxJsonDepth = 512;

// The byte offset of the first '[' or '{' (outside strings) that opens
// level max_depth + 1, or npos when the text nests no deeper than max_depth.
inline size_t json_too_deep(std::string_view text, int max_depth = kMaxJsonDepth) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\')
        ++i;  // the escaped character cannot end the string
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) return i;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return std::string_view::npos;
}

}  // namespace claw
