#include "claw/data/tiktoken_pretokenizer.h"

#include "claw/core/error.h"
#include "claw/data/pretokenizer_unicode.h"

namespace claw::data {
namespace {

using namespace unicode;

bool ascii_ci(char c, char lower) { return c == lower || c == lower - 'a' + 'A'; }

// (?i:'s|'t|'re|'ve|'m|'ll|'d) at i: the end of the match, or 0.
size_t contraction_end(std::string_view s, size_t i) {
  const size_t n = s.size();
  if (i + 1 >= n || s[i] != '\'') return 0;
  const char a = s[i + 1];
  if (ascii_ci(a, 's') || ascii_ci(a, 't') || ascii_ci(a, 'm') || ascii_ci(a, 'd')) return i + 2;
  // U+017F LATIN SMALL LETTER LONG S case-folds to 's'.
  if (a == '\xC5' && i + 2 < n && s[i + 2] == '\xBF') return i + 3;
  if (i + 2 >= n) return 0;
  const char b = s[i + 2];
  if ((ascii_ci(a, 'r') && ascii_ci(b, 'e')) || (ascii_ci(a, 'v') && ascii_ci(b, 'e')) ||
      (ascii_ci(a, 'l') && ascii_ci(b, 'l')))
    return i + 3;
  return 0;
}

// P = [^\r\n\p{L}\p{N}]
bool is_prefix(uint8_t f) { return !(f & (kLetter | kNumber | kNewline)); }
// [^\s\p{L}\p{N}]
bool is_other(uint8_t f) { return !(f & (kLetter | kNumber | kSpace)); }

// End of the maximal run from i of characters having any of `flags`.
size_t run_end(std::string_view s, size_t i, uint8_t flags) {
  while (i < s.size()) {
    Char c = next_char(s, i);
    if (!(c.flags & flags)) break;
    i = c.end;
  }
  return i;
}

// \p{N}{1,3} after the first number, which ends at i.
size_t number_end(std::string_view s, size_t i) {
  for (int k = 1; k < 3 && i < s.size(); ++k) {
    Char c = next_char(s, i);
    if (!(c.flags & kNumber)) break;
    i = c.end;
  }
  return i;
}

// ` ?[^\s\p{L}\p{N}]+` then a run of `tail` characters, or 0 if it does
// not match at b.
size_t punctuation_end(std::string_view s, size_t b, char tail_extra) {
  size_t i = b;
  if (s[b] == ' ' && b + 1 < s.size() && is_other(next_char(s, b + 1).flags)) i = b + 1;
  Char c = next_char(s, i);
  if (!is_other(c.flags)) return 0;
  i = c.end;
  while (i < s.size()) {
    Char d = next_char(s, i);
    if (!is_other(d.flags)) break;
    i = d.end;
  }
  while (i < s.size() && (s[i] == '\r' || s[i] == '\n' || (tail_extra != 0 && s[i] == tail_extra))) ++i;
  return i;
}

// \s*[\r\n]+|\s+(?!\S)|\s+ at b, where a whitespace character starts.
size_t whitespace_end(std::string_view s, size_t b) {
  const size_t n = s.size();
  size_t i = b, last_start = b, after_newline = 0;
  int64_t count = 0;
  while (i < n) {
    Char c = next_char(s, i);
    if (!(c.flags & kSpace)) break;
    if (c.flags & kNewline) after_newline = c.end;
    last_start = i;
    i = c.end;
    ++count;
  }
  if (after_newline != 0) return after_newline;
  if (i == n || count == 1) return i;
  return last_start;
}

// o200k's U*W+ from x: the end of the match, or 0 (see the header).
size_t upper_lower_end(std::string_view s, size_t x) {
  const size_t n = s.size();
  size_t i = x, after_last_w = 0;
  while (i < n) {
    Char c = next_char(s, i);
    if (!(c.flags & kUpperish)) {
      if (c.flags & kLowerish) return run_end(s, c.end, kLowerish);
      break;
    }
    if (c.flags & kLowerish) after_last_w = c.end;
    i = c.end;
  }
  return after_last_w;
}

// o200k's U+W* from x, or 0.
size_t upper_then_lower_end(std::string_view s, size_t x) {
  size_t i = run_end(s, x, kUpperish);
  return i == x ? 0 : run_end(s, i, kLowerish);
}

}  // namespace

namespace {
size_t cl100k_like_end(std::string_view s, size_t b, bool single_digits) {
  const size_t n = s.size();
  CLAW_CHECK(b < n, "begin {} of a {}-byte text", b, n);
  if (size_t e = contraction_end(s, b)) return e;
  const Char c0 = next_char(s, b);
  // [^\r\n\p{L}\p{N}]?\p{L}+
  if (is_prefix(c0.flags) && c0.end < n) {
    Char c1 = next_char(s, c0.end);
    if (c1.flags & kLetter) return run_end(s, c1.end, kLetter);
  }
  if (c0.flags & kLetter) return run_end(s, c0.end, kLetter);
  if (c0.flags & kNumber) return single_digits ? c0.end : number_end(s, c0.end);
  if (size_t e = punctuation_end(s, b, 0)) return e;
  return whitespace_end(s, b);
}
}  // namespace

size_t cl100k_pretoken_end(std::string_view s, size_t b) { return cl100k_like_end(s, b, false); }
size_t qwen2_pretoken_end(std::string_view s, size_t b) { return cl100k_like_end(s, b, true); }

size_t o200k_pretoken_end(std::string_view s, size_t b) {
  const size_t n = s.size();
  CLAW_CHECK(b < n, "begin {} of a {}-byte text", b, n);
  const Char c0 = next_char(s, b);
  // The two word alternatives, each with the optional P prefix first.
  const bool prefix = is_prefix(c0.flags) && c0.end < n;
  size_t e = prefix ? upper_lower_end(s, c0.end) : 0;
  if (e == 0) e = upper_lower_end(s, b);
  if (e == 0 && prefix) e = upper_then_lower_end(s, c0.end);
  if (e == 0) e = upper_then_lower_end(s, b);
  if (e != 0) {
    if (size_t c = contraction_end(s, e)) return c;
    return e;
  }
  if (c0.flags & kNumber) return number_end(s, c0.end);
  if (size_t p = punctuation_end(s, b, '/')) return p;
  return whitespace_end(s, b);
}

}  // namespace claw::data
