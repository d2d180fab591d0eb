#include "claw/data/gpt2_pretokenizer.h"

#include <unicode/uchar.h>
#include <unicode/utf8.h>

#include <algorithm>
#include <array>
#include <cstdint>

#include "claw/core/error.h"

namespace claw::data {
namespace {

enum class CharClass : uint8_t { letter, number, space, other };

// c < 0 is ICU's marker for an ill-formed UTF-8 sequence.
CharClass classify(UChar32 c) {
  if (c < 0) return CharClass::other;
  if (u_hasBinaryProperty(c, UCHAR_WHITE_SPACE)) return CharClass::space;
  uint32_t mask = U_GET_GC_MASK(c);
  if (mask & U_GC_L_MASK) return CharClass::letter;
  if (mask & U_GC_N_MASK) return CharClass::number;
  return CharClass::other;
}

// ASCII is almost all of English text: a table built from the same ICU
// queries keeps the fast path and the general path from disagreeing.
const std::array<CharClass, 128>& ascii_classes() {
  static const std::array<CharClass, 128> table = [] {
    std::array<CharClass, 128> t{};
    for (int c = 0; c < 128; ++c) t[c] = classify(c);
    return t;
  }();
  return table;
}

struct Decoded {
  CharClass cls;
  size_t end;  // byte offset just past the character
};

Decoded next_char(std::string_view s, size_t i) {
  unsigned char b = static_cast<unsigned char>(s[i]);
  if (b < 0x80) return {ascii_classes()[b], i + 1};
  // A character is at most 4 bytes; bounding the window keeps ICU's int32
  // offsets valid for texts over 2 GiB.
  const char* p = s.data() + i;
  int32_t len = static_cast<int32_t>(std::min<size_t>(4, s.size() - i)), j = 0;
  UChar32 c;
  U8_NEXT(p, j, len, c);
  return {classify(c), i + static_cast<size_t>(j)};
}

}  // namespace

size_t gpt2_pretoken_end(std::string_view s, size_t begin) {
  const size_t n = s.size();
  CLAW_CHECK(begin < n, "begin {} of a {}-byte text", begin, n);

  // 's|'t|'re|'ve|'m|'ll|'d
  if (s[begin] == '\'' && begin + 1 < n) {
    char a = s[begin + 1];
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return begin + 2;
    if (begin + 2 < n) {
      char b = s[begin + 2];
      if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return begin + 3;
    }
  }

  // ` ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+`: only U+0020 may lead, and only
  // when a non-space follows it.
  Decoded first = next_char(s, begin);
  CharClass cls = first.cls;
  size_t i = first.end;
  if (s[begin] == ' ' && i < n) {
    Decoded second = next_char(s, i);
    if (second.cls != CharClass::space) {
      cls = second.cls;
      i = second.end;
    }
  }
  if (cls != CharClass::space) {
    while (i < n) {
      Decoded d = next_char(s, i);
      if (d.cls != cls) break;
      i = d.end;
    }
    return i;
  }

  // `\s+(?!\S)|\s+`
  size_t last_start = begin;
  int64_t count = 1;
  while (i < n) {
    Decoded d = next_char(s, i);
    if (d.cls != CharClass::space) break;
    last_start = i;
    i = d.end;
    ++count;
  }
  if (i == n || count == 1) return i;
  return last_start;
}

std::vector<std::string_view> gpt2_pretokenize(std::string_view text) {
  std::vector<std::string_view> pieces;
  for (size_t b = 0; b < text.size();) {
    size_t e = gpt2_pretoken_end(text, b);
    pieces.push_back(text.substr(b, e - b));
    b = e;
  }
  return pieces;
}

}  // namespace claw::data
