#include "claw/data/gpt2_pretokenizer.h"

#include <cstdint>

#include "claw/core/error.h"
#include "claw/data/pretokenizer_unicode.h"

namespace claw::data {
namespace {

using namespace unicode;

// The run class of rule 2: which of letter / number / space a character is
// (at most one: Unicode gives no character two of them), 0 for "other".
uint8_t run_class(uint8_t flags) { return flags & (kLetter | kNumber | kSpace); }

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
  Char first = next_char(s, begin);
  uint8_t cls = run_class(first.flags);
  size_t i = first.end;
  if (s[begin] == ' ' && i < n) {
    Char second = next_char(s, i);
    if (!(second.flags & kSpace)) {
      cls = run_class(second.flags);
      i = second.end;
    }
  }
  if (cls != kSpace) {
    while (i < n) {
      Char c = next_char(s, i);
      if (run_class(c.flags) != cls) break;
      i = c.end;
    }
    return i;
  }

  // `\s+(?!\S)|\s+`
  size_t last_start = begin;
  int64_t count = 1;
  while (i < n) {
    Char c = next_char(s, i);
    if (!(c.flags & kSpace)) break;
    last_start = i;
    i = c.end;
    ++count;
  }
  if (i == n || count == 1) return i;
  return last_start;
}

}  // namespace claw::data
