// The character half of text_stats.h: code points of UTF-8 text, Python's
// str character classes and str.strip / splitlines / split / count, and the
// flags of text_chars.h that both halves read. The spaCy tokenizer and
// sentencizer are in spacy_tokenizer.cc.
#include "claw/curate/text_stats.h"

#include <unicode/uchar.h>
#include <unicode/utf8.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "claw/curate/spacy_en_tables.inc"
#include "claw/curate/text_chars.h"

namespace claw::curate::text {
namespace {

using namespace detail;

template <size_t N>
bool in_ranges(const tables::CodeRange (&r)[N], char32_t c) {
  const tables::CodeRange* it =
      std::upper_bound(r, r + N, c, [](char32_t v, const tables::CodeRange& x) { return v < x.lo; });
  return it != r && c <= (it - 1)->hi;
}

bool python_space(char32_t c) {
  switch (c) {
    case 0x09: case 0x0A: case 0x0B: case 0x0C: case 0x0D: case 0x1C: case 0x1D: case 0x1E: case 0x1F:
    case 0x20: case 0x85: case 0xA0: case 0x1680: case 0x2028: case 0x2029: case 0x202F: case 0x205F:
    case 0x3000:
      return true;
    default:
      return c >= 0x2000 && c <= 0x200A;
  }
}

bool python_line_break(char32_t c) {
  switch (c) {
    case 0x0A: case 0x0B: case 0x0C: case 0x0D: case 0x1C: case 0x1D: case 0x1E: case 0x85: case 0x2028:
    case 0x2029:
      return true;
    default:
      return false;
  }
}

}  // namespace

namespace detail {

uint32_t compute_flags(char32_t c) {
  uint32_t f = 0;
  if (python_space(c)) f |= kSpace;
  if (python_line_break(c)) f |= kLineBreak;
  const int8_t t = u_charType(static_cast<UChar32>(c));
  switch (t) {
    case U_UPPERCASE_LETTER: case U_LOWERCASE_LETTER: case U_TITLECASE_LETTER: case U_MODIFIER_LETTER:
    case U_OTHER_LETTER:
      f |= kAlpha | kWord;
      break;
    case U_DECIMAL_DIGIT_NUMBER:
      f |= kDecimal | kWord;
      break;
    case U_LETTER_NUMBER: case U_OTHER_NUMBER:
      f |= kWord;
      break;
    case U_DASH_PUNCTUATION: case U_START_PUNCTUATION: case U_END_PUNCTUATION: case U_CONNECTOR_PUNCTUATION:
    case U_OTHER_PUNCTUATION: case U_INITIAL_PUNCTUATION: case U_FINAL_PUNCTUATION:
      f |= kPunctP;
      break;
    default:
      break;
  }
  if (in_ranges(tables::kDatatrovePunctuation, c)) f |= kDtPunct;
  if (in_ranges(tables::kDatatroveTerminal, c)) f |= kDtTerminal;
  if (in_ranges(tables::kSentencizerPunct, c)) f |= kSentPunct;
  if (in_ranges(tables::kAlpha, c)) f |= kSpAlpha;
  if (in_ranges(tables::kAlphaLower, c)) f |= kSpLower;
  if (in_ranges(tables::kAlphaUpper, c)) f |= kSpUpper;
  if (in_ranges(tables::kAlphaLowerOrQuote, c)) f |= kSpLowerQ;
  if (in_ranges(tables::kAlphaUpperOrQuote, c)) f |= kSpUpperQ;
  if (in_ranges(tables::kIcon, c)) f |= kSpIcon;
  if (in_ranges(tables::kSuffixDotBehind, c)) f |= kSpDotBehind;
  if (literal_first(c)) f |= kPrefixFirst;
  if (literal_last(c)) f |= kSuffixLast;
  return f;
}

const uint32_t* bmp_flags() {
  static const std::vector<uint32_t> table = [] {
    std::vector<uint32_t> t(0x10000);
    for (char32_t c = 0; c < 0x10000; ++c) t[c] = compute_flags(c);
    return t;
  }();
  return table.data();
}

}  // namespace detail

char32_t next_code_point(std::string_view s, size_t& i) {
  const unsigned char b = static_cast<unsigned char>(s[i]);
  if (b < 0x80) {
    ++i;
    return b;
  }
  // A bounded window keeps ICU's int32 offsets valid in texts over 2 GiB.
  const int32_t window = static_cast<int32_t>(std::min<size_t>(s.size() - i, 4));
  int32_t k = 0;
  UChar32 c;
  U8_NEXT(reinterpret_cast<const uint8_t*>(s.data() + i), k, window, c);
  i += static_cast<size_t>(k);
  return c < 0 ? 0xFFFD : static_cast<char32_t>(c);
}

size_t length(std::string_view s) {
  // Every byte but a continuation byte (10xxxxxx) starts a code point; for
  // ill-formed input this can differ from next_code_point's count.
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

char32_t last_code_point(std::string_view s) {
  size_t i = s.size() - 1;
  const size_t stop = s.size() >= 4 ? s.size() - 4 : 0;
  while (i > stop && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) --i;
  size_t j = i;
  const char32_t c = next_code_point(s, j);
  return j == s.size() ? c : 0xFFFD;
}

bool py_isspace(char32_t c) { return c < 0x80 ? (bmp_flags()[c] & kSpace) != 0 : python_space(c); }
bool py_isalpha(char32_t c) { return has(c, kAlpha); }
bool is_decimal(char32_t c) { return has(c, kDecimal); }
bool is_line_break(char32_t c) { return python_line_break(c); }
bool is_datatrove_punctuation(char32_t c) { return has(c, kDtPunct); }
bool is_terminal_punctuation(char32_t c) { return has(c, kDtTerminal); }

const std::vector<std::string>& terminal_punctuation() {
  static const std::vector<std::string> list = [] {
    std::vector<std::string> out;
    for (const tables::CodeRange& r : tables::kDatatroveTerminal) {
      for (char32_t c = r.lo; c <= r.hi; ++c) {
        char buf[4];
        int32_t n = 0;
        U8_APPEND_UNSAFE(buf, n, static_cast<UChar32>(c));
        out.emplace_back(buf, static_cast<size_t>(n));
      }
    }
    return out;
  }();
  return list;
}

std::string_view lstrip(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    size_t j = i;
    if (!py_isspace(next_code_point(s, j))) break;
    i = j;
  }
  return s.substr(i);
}

std::string_view rstrip(std::string_view s) {
  while (!s.empty()) {
    const unsigned char b = static_cast<unsigned char>(s.back());
    if (b < 0x80) {
      if (!(bmp_flags()[b] & kSpace)) break;
      s.remove_suffix(1);
      continue;
    }
    size_t i = s.size() - 1;
    const size_t stop = s.size() >= 4 ? s.size() - 4 : 0;
    while (i > stop && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) --i;
    size_t j = i;
    const char32_t c = next_code_point(s, j);
    if (j != s.size() || !python_space(c)) break;
    s = s.substr(0, i);
  }
  return s;
}

std::string_view strip(std::string_view s) { return rstrip(lstrip(s)); }

void split_lines(std::string_view s, std::vector<std::string_view>& out) {
  size_t start = 0, i = 0;
  while (i < s.size()) {
    const unsigned char b = static_cast<unsigned char>(s[i]);
    if (b >= 0x20 && b < 0x80) {  // fast path: printable ASCII is never a break
      ++i;
      continue;
    }
    size_t next = i;
    const char32_t c = next_code_point(s, next);
    if (python_line_break(c)) {
      out.push_back(s.substr(start, i - start));
      if (c == U'\r' && next < s.size() && s[next] == '\n') ++next;
      start = next;
    }
    i = next;
  }
  if (start < s.size()) out.push_back(s.substr(start));
}

void split_whitespace(std::string_view s, std::vector<std::string_view>& out) {
  size_t i = 0, start = 0;
  bool in_word = false;
  while (i < s.size()) {
    size_t next = i;
    const bool space = py_isspace(next_code_point(s, next));
    if (space && in_word) out.push_back(s.substr(start, i - start));
    if (!space && !in_word) start = i;
    in_word = !space;
    i = next;
  }
  if (in_word) out.push_back(s.substr(start));
}

size_t count(std::string_view s, std::string_view needle) {
  size_t n = 0;
  for (size_t pos = s.find(needle); pos != std::string_view::npos; pos = s.find(needle, pos + needle.size())) ++n;
  return n;
}

}  // namespace claw::curate::text
