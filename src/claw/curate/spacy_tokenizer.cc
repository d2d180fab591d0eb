// The tokenizer half of text_stats.h: spaCy's blank English tokenizer
// (prefix, suffix and infix rules, URL matching, special cases and their
// re-merging) and its rule-based sentencizer, on the character classes of
// text_chars.h and the generated tables of spacy_en_tables.inc. That file
// is included by text_stats.cc too: its tables are inline variables, each
// defined once; this file reads the literal affixes and special cases,
// text_stats.cc the character ranges.
#include "claw/curate/text_stats.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "claw/core/error.h"
#include "claw/curate/spacy_en_tables.inc"
#include "claw/curate/text_chars.h"

namespace claw::curate::text {
namespace {

using namespace detail;

inline bool ascii_digit(char32_t c) { return c >= '0' && c <= '9'; }
inline bool ascii_letter(unsigned char c) { return (c | 0x20) >= 'a' && (c | 0x20) <= 'z'; }

std::u32string decode(std::string_view s) {
  std::u32string out;
  for (size_t i = 0; i < s.size();) out.push_back(next_code_point(s, i));
  return out;
}

// ---------------------------------------------------------------------------
// A string -> index table for short keys (special cases), open addressing.

uint64_t hash_bytes(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325ull ^ s.size();
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h ^ (h >> 29);
}

class StringIndex {
 public:
  explicit StringIndex(std::vector<std::string_view> keys) : keys_(std::move(keys)) {
    size_t cap = 16;
    while (cap < keys_.size() * 2) cap *= 2;
    slots_.assign(cap, -1);
    mask_ = cap - 1;
    for (size_t k = 0; k < keys_.size(); ++k) {
      max_len_ = std::max(max_len_, keys_[k].size());
      size_t i = hash_bytes(keys_[k]) & mask_;
      while (slots_[i] >= 0) i = (i + 1) & mask_;
      slots_[i] = static_cast<int32_t>(k);
    }
  }
  int32_t find(std::string_view k) const {
    if (k.size() > max_len_) return -1;
    for (size_t i = hash_bytes(k) & mask_;; i = (i + 1) & mask_) {
      const int32_t v = slots_[i];
      if (v < 0 || keys_[v] == k) return v;
    }
  }
  size_t max_len() const { return max_len_; }

 private:
  std::vector<std::string_view> keys_;
  std::vector<int32_t> slots_;
  size_t mask_ = 0, max_len_ = 0;
};

// ---------------------------------------------------------------------------
// spaCy's English tokenizer rules (spacy/lang/punctuation.py, char_classes.py,
// lang/en/punctuation.py, lang/tokenizer_exceptions.py URL_PATTERN). The
// regexes are searched the way Python's `re` searches them: a prefix is the
// first alternative that matches at the start; a suffix is the match that
// starts leftmost, i.e. the longest alternative that ends at the end; infixes
// are found left to right, the first alternative that matches at a position
// winning.

struct Literal {
  std::u32string text;
  bool after_digit = false;  // (?<=[0-9]) before it (currency, units)
};

struct SpecialCase {
  std::string_view text;
  std::vector<uint32_t> piece_bytes;  // byte length of each token
};

// A chunk of text without whitespace, as code points with their byte offsets.
struct Chunk {
  std::string_view bytes;
  std::u32string cp;
  std::vector<uint32_t> off;  // off[i]: byte offset of cp[i]; off[n] = bytes.size()

  void assign(std::string_view s) {
    bytes = s;
    cp.clear();
    off.clear();
    for (size_t i = 0; i < s.size();) {
      off.push_back(static_cast<uint32_t>(i));
      cp.push_back(next_code_point(s, i));
    }
    off.push_back(static_cast<uint32_t>(s.size()));
  }
  std::string_view sub(size_t b, size_t e) const { return bytes.substr(off[b], off[e] - off[b]); }
};

struct Span {
  uint32_t b, e;  // byte range within the chunk
};

class EnglishRules {
 public:
  EnglishRules();

  // Tokens of a whitespace-free chunk (byte ranges within it), with the
  // special cases and their matcher applied when `specials`.
  void tokenize_chunk(const Chunk& ch, bool specials, std::vector<Span>& out) const;
  bool fast_single_token(std::string_view chunk, std::vector<Span>& out) const;
  // Tokenizer._apply_special_cases on a document's tokens (byte ranges of
  // `text`); rewrites `toks`, using `scratch`.
  struct DocToken {
    size_t b, e;
    bool space;
  };
  void apply_matcher(std::string_view text, std::vector<DocToken>& toks, std::vector<DocToken>& scratch) const;

  size_t find_prefix(const Chunk& ch, size_t b, size_t e) const;
  size_t find_suffix(const Chunk& ch, size_t b, size_t e) const;
  size_t infix_at(const char32_t* s, size_t b, size_t e, size_t i) const;
  bool any_infix(const Chunk& ch, size_t b, size_t e) const;
  bool url_match(const char32_t* s, size_t n) const;

 private:
  bool emit_special(std::string_view key, uint32_t at, std::vector<Span>& out) const;
  void split_affixes(const Chunk& ch, bool specials, std::vector<Span>& out) const;
  bool url_host_tail(const char32_t* s, size_t n, size_t h) const;
  bool url_tail(const char32_t* s, size_t n, size_t r) const;

  // Literal prefixes grouped by first code point, in regex order.
  std::array<std::vector<std::u32string>, 128> prefix_ascii_;
  std::unordered_map<char32_t, std::vector<std::u32string>> prefix_other_;
  // Literal suffixes (with currency and units after a digit) by last code point.
  std::array<std::vector<Literal>, 128> suffix_ascii_;
  std::unordered_map<char32_t, std::vector<Literal>> suffix_other_;

  std::vector<SpecialCase> specials_;
  StringIndex special_index_{{}};
  // The special cases the tokenizer's PhraseMatcher re-merges: a key that
  // has a prefix, suffix or infix, as its affix split without special cases
  // (the pattern), indexed by the pattern's first token; a bit per pair of
  // first bytes of a pattern's first two tokens rejects most tokens at once.
  struct Pattern {
    std::vector<std::string_view> tokens;
    int32_t special;
  };
  std::vector<Pattern> patterns_;
  std::vector<std::vector<uint32_t>> patterns_by_first_;
  StringIndex first_index_{{}};
  std::vector<uint64_t> pair_bits_ = std::vector<uint64_t>(65536 / 64, 0);
  bool single_patterns_ = false;  // a one-token pattern that changes its token
};

const std::vector<std::u32string>* prefix_group(const std::array<std::vector<std::u32string>, 128>& a,
                                                const std::unordered_map<char32_t, std::vector<std::u32string>>& m,
                                                char32_t c) {
  if (c < 128) return &a[c];
  auto it = m.find(c);
  return it == m.end() ? nullptr : &it->second;
}

// The first and last code points of the literal affixes, for the flags
// kPrefixFirst and kSuffixLast (kept apart from EnglishRules, whose
// constructor already reads the flags).
struct LiteralEnds {
  std::vector<char32_t> first, last;
  LiteralEnds() {
    for (std::string_view p : tables::kPrefixLiterals) first.push_back(decode(p).front());
    for (std::string_view s : tables::kSuffixLiterals) last.push_back(decode(s).back());
    for (std::string_view s : tables::kCurrency) last.push_back(decode(s).back());
    for (std::string_view s : tables::kUnits) last.push_back(decode(s).back());
    std::sort(first.begin(), first.end());
    std::sort(last.begin(), last.end());
  }
};
const LiteralEnds& literal_ends() {
  static const LiteralEnds ends;
  return ends;
}

EnglishRules::EnglishRules() {
  for (std::string_view p : tables::kPrefixLiterals) {
    std::u32string d = decode(p);
    // The structure this file relies on (checked by the generator too):
    // no literal prefix starts with '.', '+' or an icon.
    CLAW_CHECK(d[0] != U'.' && d[0] != U'+' && !has(d[0], kSpIcon));
    if (d[0] < 128)
      prefix_ascii_[d[0]].push_back(d);
    else
      prefix_other_[d[0]].push_back(d);
  }
  auto add_suffix = [&](std::string_view s, bool after_digit) {
    Literal lit{decode(s), after_digit};
    CLAW_CHECK(lit.text.back() != U'.');  // the '.' rules are written out in find_suffix
    const char32_t last = lit.text.back();
    if (last < 128)
      suffix_ascii_[last].push_back(std::move(lit));
    else
      suffix_other_[last].push_back(std::move(lit));
  };
  for (std::string_view s : tables::kSuffixLiterals) add_suffix(s, false);
  for (std::string_view s : tables::kCurrency) add_suffix(s, true);
  for (std::string_view s : tables::kUnits) add_suffix(s, true);

  std::vector<std::string_view> keys;
  for (const auto& sc : tables::kSpecialCases) {
    SpecialCase c{sc.text, {}};
    size_t start = 0;
    for (size_t i = 0; i <= sc.tokens.size(); ++i) {
      if (i == sc.tokens.size() || sc.tokens[i] == '\037') {
        c.piece_bytes.push_back(static_cast<uint32_t>(i - start));
        start = i + 1;
      }
    }
    specials_.push_back(std::move(c));
    keys.push_back(sc.text);
  }
  special_index_ = StringIndex(keys);

  // Tokenizer.add_special_case: a key that has a prefix, suffix or infix
  // (or a space) also goes to the PhraseMatcher, as its affix split.
  Chunk ch;
  std::vector<Span> pieces;
  std::vector<std::string_view> firsts;
  for (size_t k = 0; k < specials_.size(); ++k) {
    const std::string_view key = specials_[k].text;
    ch.assign(key);
    bool whitespace = false;
    for (char32_t c : ch.cp) whitespace |= has(c, kSpace);
    // Whitespace keys (" ", "\t", "\n", "\xa0") map to themselves; the
    // matcher could only rewrite a whitespace token into the same token.
    if (whitespace) continue;
    const size_t n = ch.cp.size();
    if (!find_prefix(ch, 0, n) && !find_suffix(ch, 0, n) && !any_infix(ch, 0, n)) continue;
    pieces.clear();
    tokenize_chunk(ch, false, pieces);
    Pattern pat{{}, static_cast<int32_t>(k)};
    for (const Span& p : pieces) pat.tokens.push_back(key.substr(p.b, p.e - p.b));
    // A one-token pattern of a one-token special case ("'", "—") rewrites
    // its token into itself, and being shortest it blocks no other match.
    if (pat.tokens.size() == 1) {
      if (specials_[k].piece_bytes.size() == 1) continue;
      single_patterns_ = true;
    } else {
      const unsigned a = static_cast<unsigned char>(pat.tokens[0][0]);
      const unsigned b = static_cast<unsigned char>(pat.tokens[1][0]);
      pair_bits_[(a << 8 | b) >> 6] |= uint64_t{1} << (b & 63);
    }
    auto it = std::find(firsts.begin(), firsts.end(), pat.tokens[0]);
    if (it == firsts.end()) {
      firsts.push_back(pat.tokens[0]);
      patterns_by_first_.emplace_back();
      it = firsts.end() - 1;
    }
    patterns_by_first_[it - firsts.begin()].push_back(static_cast<uint32_t>(patterns_.size()));
    patterns_.push_back(std::move(pat));
  }
  first_index_ = StringIndex(firsts);
}

bool EnglishRules::emit_special(std::string_view key, uint32_t at, std::vector<Span>& out) const {
  const int32_t k = special_index_.find(key);
  if (k < 0) return false;
  for (uint32_t len : specials_[k].piece_bytes) {
    out.push_back({at, at + len});
    at += len;
  }
  return true;
}

size_t EnglishRules::find_prefix(const Chunk& ch, size_t b, size_t e) const {
  if (b >= e) return 0;
  const char32_t* s = ch.cp.data();
  const char32_t c = s[b];
  if (c == U'.') {  // \.\.+
    size_t j = b;
    while (j < e && s[j] == U'.') ++j;
    return j - b >= 2 ? j - b : 0;
  }
  if (c == U'+') return b + 1 < e && ascii_digit(s[b + 1]) ? 0 : 1;  // \+(?![0-9])
  const uint32_t f = flags(c);
  if (f & kPrefixFirst) {
    if (const auto* group = prefix_group(prefix_ascii_, prefix_other_, c)) {
      for (const std::u32string& lit : *group)
        if (lit.size() <= e - b && std::equal(lit.begin(), lit.end(), s + b)) return lit.size();
    }
  }
  return (f & kSpIcon) ? 1 : 0;
}

size_t EnglishRules::find_suffix(const Chunk& ch, size_t b, size_t e) const {
  if (b >= e) return 0;
  const char32_t* s = ch.cp.data();
  const char32_t last = s[e - 1];
  if (last == U'.') {
    size_t j = e - 1;
    while (j > b && s[j - 1] == U'.') --j;
    if (e - j >= 2) return e - j;  // \.\.+
    if (e - 1 == b) return 0;
    const char32_t prev = s[e - 2];
    if (has(prev, kSpDotBehind)) return 1;  // (?<=[0-9{al}%²\-\+{p}(?:{q})])\.
    if (e - 2 > b) {
      const char32_t prev2 = s[e - 3];
      if (prev2 == 0xB0 && std::u32string_view(U"FfCcKk").find(prev) != std::u32string_view::npos)
        return 1;                                                    // (?<=°[FfCcKk])\.
      if (has(prev2, kSpUpper) && has(prev, kSpUpper)) return 1;  // (?<=[{au}][{au}])\.
    }
    return 0;
  }
  const uint32_t f = flags(last);
  size_t best = (f & kSpIcon) ? 1 : 0;
  if (last == U'+' && e - 1 > b && ascii_digit(s[e - 2])) best = 1;  // (?<=[0-9])\+
  if (f & kSuffixLast) {
    const std::vector<Literal>* group = nullptr;
    if (last < 128) {
      group = &suffix_ascii_[last];
    } else if (auto it = suffix_other_.find(last); it != suffix_other_.end()) {
      group = &it->second;
    }
    if (group) {
      for (const Literal& lit : *group) {
        const size_t len = lit.text.size();
        if (len <= best || len > e - b) continue;
        if (!std::equal(lit.text.begin(), lit.text.end(), s + e - len)) continue;
        if (lit.after_digit && !(e - len > b && ascii_digit(s[e - len - 1]))) continue;
        best = len;
      }
    }
  }
  return best;
}

// The length of the infix match at i of the core s[b, e), or 0.
size_t EnglishRules::infix_at(const char32_t* s, size_t b, size_t e, size_t i) const {
  const char32_t c = s[i];
  if (c == U'.' && i + 1 < e && s[i + 1] == U'.') {  // \.\.+
    size_t j = i;
    while (j < e && s[j] == U'.') ++j;
    return j - i;
  }
  if (c == U'\u2026') return 1;  // …
  const uint32_t fc = flags(c);
  if (fc & kSpIcon) return 1;
  if (i == b) return 0;  // every other rule has a lookbehind
  const char32_t prev = s[i - 1];
  const bool has_next = i + 1 < e;
  const char32_t next = has_next ? s[i + 1] : 0;
  // (?<=[0-9])[+\-\*^](?=[0-9-])
  if (ascii_digit(prev) && (c == U'+' || c == U'-' || c == U'*' || c == U'^') && has_next &&
      (ascii_digit(next) || next == U'-'))
    return 1;
  // (?<=[{al}{q}])\.(?=[{au}{q}])
  if (c == U'.' && has_next && has(prev, kSpLowerQ) && has(next, kSpUpperQ)) return 1;
  const bool prev_alpha = has(prev, kSpAlpha);
  // (?<=[{a}]),(?=[{a}])
  if (c == U',' && has_next && prev_alpha && has(next, kSpAlpha)) return 1;
  if (prev_alpha || ascii_digit(prev)) {
    // (?<=[{a}0-9])(?:-|–|—|--|---|——|~)(?=[{a}])
    static constexpr std::u32string_view kHyphens[] = {U"-", U"\u2013", U"\u2014", U"--",
                                                       U"---", U"\u2014\u2014", U"~"};
    for (std::u32string_view h : kHyphens) {
      if (h.size() < e - i && std::u32string_view(s + i, h.size()) == h && has(s[i + h.size()], kSpAlpha))
        return h.size();
    }
    // (?<=[{a}0-9])[:<>=/](?=[{a}])
    if ((c == U':' || c == U'<' || c == U'>' || c == U'=' || c == U'/') && has_next && has(next, kSpAlpha))
      return 1;
  }
  return 0;
}

bool EnglishRules::any_infix(const Chunk& ch, size_t b, size_t e) const {
  for (size_t i = b; i < e; ++i)
    if (infix_at(ch.cp.data(), b, e, i)) return true;
  return false;
}

// URL_MATCH(s): the whole s matches URL_PATTERN. The pattern's backtracking
// reduces to: an optional scheme "xx://", an optional "user@" (any '@'
// after at least one character), then an IPv4 address or a domain name,
// an optional ":port" and an optional path starting with / ? or #.
bool EnglishRules::url_match(const char32_t* s, size_t n) const {
  if (std::find(s, s + n, U'.') == s + n) return false;  // both host forms need a dot
  size_t starts[2];
  int count = 0;
  size_t k = 0;  // (?:[\w\+\-\.]{2,})://
  while (k < n && (has(s[k], kWord) || s[k] == U'_' || s[k] == U'+' || s[k] == U'-' || s[k] == U'.')) ++k;
  if (k >= 2 && k + 3 <= n && s[k] == U':' && s[k + 1] == U'/' && s[k + 2] == U'/') starts[count++] = k + 3;
  starts[count++] = 0;
  for (int t = 0; t < count; ++t) {
    const size_t p = starts[t];
    if (url_host_tail(s, n, p)) return true;
    for (size_t j = p + 1; j < n; ++j)  // (?:\S+(?::\S*)?@)?
      if (s[j] == U'@' && url_host_tail(s, n, j + 1)) return true;
  }
  return false;
}

// (?::\d{2,5})?(?:[/?#]\S*)?$ from r.
bool EnglishRules::url_tail(const char32_t* s, size_t n, size_t r) const {
  if (r == n) return true;
  if (s[r] == U'/' || s[r] == U'?' || s[r] == U'#') return true;
  if (s[r] != U':') return false;
  size_t j = r + 1;
  while (j < n && has(s[j], kDecimal)) ++j;
  const size_t digits = j - r - 1;
  if (digits < 2 || digits > 5) return false;
  return j == n || s[j] == U'/' || s[j] == U'?' || s[j] == U'#';
}

bool EnglishRules::url_host_tail(const char32_t* s, size_t n, size_t h) const {
  if (h >= n) return false;
  // IPv4: four runs of \d separated by dots, each a valid octet, not private.
  {
    size_t b[4], e[4], j = h;
    bool ok = true;
    for (int o = 0; o < 4 && ok; ++o) {
      if (o > 0) {
        if (j < n && s[j] == U'.')
          ++j;
        else
          ok = false;
      }
      b[o] = j;
      while (j < n && has(s[j], kDecimal)) ++j;
      e[o] = j;
      ok = ok && e[o] > b[o];
    }
    if (ok) {
      auto octet = [&](int o) { return std::u32string_view(s + b[o], e[o] - b[o]); };
      auto d = [](char32_t c) { return has(c, kDecimal); };
      auto in = [](char32_t c, char32_t lo, char32_t hi) { return c >= lo && c <= hi; };
      const std::u32string_view o1 = octet(0), o2 = octet(1), o3 = octet(2), o4 = octet(3);
      // (?:[1-9]\d?|1\d\d|2[01]\d|22[0-3])
      const bool first = (o1.size() == 1 && in(o1[0], '1', '9')) ||
                         (o1.size() == 2 && in(o1[0], '1', '9') && d(o1[1])) ||
                         (o1.size() == 3 && ((o1[0] == '1' && d(o1[1]) && d(o1[2])) ||
                                             (o1[0] == '2' && in(o1[1], '0', '1') && d(o1[2])) ||
                                             (o1[0] == '2' && o1[1] == '2' && in(o1[2], '0', '3'))));
      // (?:1?\d{1,2}|2[0-4]\d|25[0-5])
      auto middle = [&](std::u32string_view o) {
        return (o.size() >= 1 && o.size() <= 2 && std::all_of(o.begin(), o.end(), d)) ||
               (o.size() == 3 && ((o[0] == '1' && d(o[1]) && d(o[2])) ||
                                  (o[0] == '2' && in(o[1], '0', '4') && d(o[2])) ||
                                  (o[0] == '2' && o[1] == '5' && in(o[2], '0', '5'))));
      };
      // (?:[1-9]\d?|1\d\d|2[0-4]\d|25[0-4])
      const bool last = (o4.size() == 1 && in(o4[0], '1', '9')) ||
                        (o4.size() == 2 && in(o4[0], '1', '9') && d(o4[1])) ||
                        (o4.size() == 3 && ((o4[0] == '1' && d(o4[1]) && d(o4[2])) ||
                                            (o4[0] == '2' && in(o4[1], '0', '4') && d(o4[2])) ||
                                            (o4[0] == '2' && o4[1] == '5' && in(o4[2], '0', '4'))));
      // The private and local networks the negative lookaheads exclude.
      const bool excluded = o1 == U"10" || o1 == U"127" || (o1 == U"169" && o2 == U"254") ||
                            (o1 == U"192" && o2 == U"168") ||
                            (o1 == U"172" && o2.size() == 2 &&
                             ((o2[0] == '1' && in(o2[1], '6', '9')) || (o2[0] == '2' && d(o2[1])) ||
                              (o2[0] == '3' && in(o2[1], '0', '1'))));
      if (first && middle(o2) && middle(o3) && last && !excluded && url_tail(s, n, e[3])) return true;
    }
  }
  // Domain: labels "[X][X_-]{0,62}[X]" or "[X]" each followed by '.', then
  // a TLD of 2..63 ALPHA_LOWER. No character of the host is one that can
  // start the port or path, so the host is the longest run of host characters.
  auto label_char = [](char32_t c) {
    return (c < 128 && (ascii_letter(static_cast<unsigned char>(c)) || ascii_digit(c))) || (c >= 0xA1 && c <= 0xFFFF);
  };
  size_t r = h;
  while (r < n && (label_char(s[r]) || s[r] == U'_' || s[r] == U'-' || s[r] == U'.' || has(s[r], kSpLower))) ++r;
  size_t dot = r;
  while (dot > h && s[dot - 1] != U'.') --dot;
  if (dot == h) return false;  // no dot
  const size_t tld = r - dot;
  if (tld < 2 || tld > 63) return false;
  for (size_t i = dot; i < r; ++i)
    if (!has(s[i], kSpLower)) return false;
  for (size_t lb = h; lb < dot;) {
    size_t le = lb;
    while (s[le] != U'.') ++le;
    const size_t len = le - lb;
    if (len == 0 || len > 64 || !label_char(s[lb]) || !label_char(s[le - 1])) return false;
    for (size_t i = lb; i < le; ++i)
      if (!label_char(s[i]) && s[i] != U'_' && s[i] != U'-') return false;
    lb = le + 1;
  }
  return url_tail(s, n, r);
}

// Tokenizer._split_affixes and _attach_tokens for one chunk.
void EnglishRules::split_affixes(const Chunk& ch, bool specials, std::vector<Span>& out) const {
  const size_t n = ch.cp.size();
  size_t b = 0, e = n, last_size = 0;
  // Prefix and suffix ranges in code points; few per chunk.
  std::array<std::pair<uint32_t, uint32_t>, 16> pre_inline, suf_inline;
  std::vector<std::pair<uint32_t, uint32_t>> pre_more, suf_more;
  size_t npre = 0, nsuf = 0;
  auto push = [](auto& inline_buf, auto& more, size_t& count, size_t x, size_t y) {
    if (count < inline_buf.size())
      inline_buf[count] = {static_cast<uint32_t>(x), static_cast<uint32_t>(y)};
    else
      more.push_back({static_cast<uint32_t>(x), static_cast<uint32_t>(y)});
    ++count;
  };
  auto get = [](const auto& inline_buf, const auto& more, size_t i) {
    return i < inline_buf.size() ? inline_buf[i] : more[i - inline_buf.size()];
  };
  auto special = [&](size_t x, size_t y) { return specials && special_index_.find(ch.sub(x, y)) >= 0; };
  while (e > b && e - b != last_size) {
    if (special(b, e)) break;
    last_size = e - b;
    const size_t pre = find_prefix(ch, b, e);
    if (pre && b + pre < e && special(b + pre, e)) {
      push(pre_inline, pre_more, npre, b, b + pre);
      b += pre;
      break;
    }
    const size_t suf = find_suffix(ch, b + pre, e);
    if (suf && e - suf > b && special(b, e - suf)) {
      push(suf_inline, suf_more, nsuf, e - suf, e);
      e -= suf;
      break;
    }
    if (pre && suf && pre + suf <= e - b) {
      push(pre_inline, pre_more, npre, b, b + pre);
      push(suf_inline, suf_more, nsuf, e - suf, e);
      b += pre;
      e -= suf;
    } else if (pre) {
      push(pre_inline, pre_more, npre, b, b + pre);
      b += pre;
    } else if (suf) {
      push(suf_inline, suf_more, nsuf, e - suf, e);
      e -= suf;
    }
  }
  auto span = [&](size_t x, size_t y) { return Span{ch.off[x], ch.off[y]}; };
  for (size_t i = 0; i < npre; ++i) {
    auto [x, y] = get(pre_inline, pre_more, i);
    out.push_back(span(x, y));
  }
  if (e > b) {
    if (specials && emit_special(ch.sub(b, e), ch.off[b], out)) {
    } else if (url_match(ch.cp.data() + b, e - b)) {
      out.push_back(span(b, e));
    } else {
      // Infixes; a match at the very start is skipped (spaCy issue #768).
      size_t start = b;
      for (size_t i = b; i < e;) {
        const size_t len = infix_at(ch.cp.data(), b, e, i);
        if (!len) {
          ++i;
          continue;
        }
        if (i != b) {
          if (i != start) out.push_back(span(start, i));
          out.push_back(span(i, i + len));
          start = i + len;
        }
        i += len;
      }
      if (start < e) out.push_back(span(start, e));
    }
  }
  for (size_t i = nsuf; i-- > 0;) {
    auto [x, y] = get(suf_inline, suf_more, i);
    out.push_back(span(x, y));
  }
}

// Tokenizer._apply_special_cases: runs of tokens equal to a pattern are
// replaced by the special case's tokens, longest first, then leftmost; a run
// whose first or last token is taken by a longer one is dropped. A run across
// a space is matched too (spaCy's PhraseMatcher compares tokens only) but
// never applied, as its text, having the space, is no special case: it only
// takes its tokens.
void EnglishRules::apply_matcher(std::string_view text, std::vector<DocToken>& toks,
                                 std::vector<DocToken>& scratch) const {
  struct Match {
    size_t start, end;
    int32_t special;
    bool applies;
  };
  const size_t m = toks.size();
  std::vector<Match> matches;
  auto view = [&](const DocToken& t) { return text.substr(t.b, t.e - t.b); };
  for (size_t i = 0; i < m; ++i) {
    if (toks[i].space) continue;
    if (!single_patterns_) {
      if (i + 1 == m) break;
      const unsigned a = static_cast<unsigned char>(text[toks[i].b]);
      const unsigned b = static_cast<unsigned char>(text[toks[i + 1].b]);
      if (!(pair_bits_[(a << 8 | b) >> 6] >> (b & 63) & 1)) continue;
    }
    const int32_t f = first_index_.find(view(toks[i]));
    if (f < 0) continue;
    for (uint32_t p : patterns_by_first_[f]) {
      const Pattern& pat = patterns_[p];
      const size_t len = pat.tokens.size();
      if (i + len > m) continue;
      bool same = true, applies = true;
      for (size_t t = 1; t < len && same; ++t) {
        same = !toks[i + t].space && view(toks[i + t]) == pat.tokens[t];
        applies = applies && toks[i + t - 1].e == toks[i + t].b;
      }
      if (same) matches.push_back({i, i + len, pat.special, applies});
    }
  }
  if (matches.empty()) return;
  std::stable_sort(matches.begin(), matches.end(), [](const Match& a, const Match& b) {
    if (a.end - a.start != b.end - b.start) return a.end - a.start > b.end - b.start;
    return a.start < b.start;
  });
  std::vector<char> seen(m, 0);
  std::vector<Match> keep;
  for (const Match& x : matches) {
    if (!seen[x.start] && !seen[x.end - 1] && x.applies) keep.push_back(x);
    for (size_t t = x.start; t < x.end; ++t) seen[t] = 1;
  }
  if (keep.empty()) return;
  std::sort(keep.begin(), keep.end(), [](const Match& a, const Match& b) { return a.start < b.start; });
  scratch.clear();
  size_t t = 0;
  for (const Match& x : keep) {
    while (t < x.start) scratch.push_back(toks[t++]);
    size_t at = toks[x.start].b;
    for (uint32_t len : specials_[x.special].piece_bytes) {
      scratch.push_back({at, at + len, false});
      at += len;
    }
    t = x.end;
  }
  while (t < m) scratch.push_back(toks[t++]);
  toks.swap(scratch);
}

void EnglishRules::tokenize_chunk(const Chunk& ch, bool specials, std::vector<Span>& out) const {
  if (specials && emit_special(ch.bytes, 0, out)) return;
  split_affixes(ch, specials, out);
}

// A chunk of ASCII letters only, or ASCII digits only, is one token unless it
// is a special case: no prefix, suffix, infix or URL rule can match it.
bool EnglishRules::fast_single_token(std::string_view chunk, std::vector<Span>& out) const {
  const unsigned char c0 = static_cast<unsigned char>(chunk[0]);
  if (ascii_letter(c0)) {
    for (unsigned char c : chunk)
      if (!ascii_letter(c)) return false;
  } else if (ascii_digit(c0)) {
    for (unsigned char c : chunk)
      if (!ascii_digit(c)) return false;
  } else {
    return false;
  }
  if (!emit_special(chunk, 0, out)) out.push_back({0, static_cast<uint32_t>(chunk.size())});
  return true;
}

const EnglishRules& english() {
  static const EnglishRules rules;
  return rules;
}

// Calls emit(token_text, is_whitespace_token) for each token of spaCy's
// tokenizer (Tokenizer._tokenize_affixes, then _apply_special_cases).
template <typename Emit>
void tokenize(std::string_view text, Emit&& emit) {
  if (text.empty()) return;
  using DocToken = EnglishRules::DocToken;
  const EnglishRules& rules = english();
  Chunk chunk;
  std::vector<Span> spans;
  std::vector<DocToken> toks, scratch;
  toks.reserve(text.size() / 4 + 4);
  auto chunk_tokens = [&](size_t start, size_t end) {
    const std::string_view piece = text.substr(start, end - start);
    spans.clear();
    if (!rules.fast_single_token(piece, spans)) {
      chunk.assign(piece);
      rules.tokenize_chunk(chunk, true, spans);
    }
    for (const Span& s : spans) toks.push_back({start + s.b, start + s.e, false});
  };
  size_t i = 0, start = 0;
  size_t j = 0;
  bool in_ws = py_isspace(next_code_point(text, j));
  while (i < text.size()) {
    size_t next = i;
    const char32_t c = next_code_point(text, next);
    if (py_isspace(c) != in_ws) {
      if (start < i) {
        if (in_ws)
          toks.push_back({start, i, true});
        else
          chunk_tokens(start, i);
      }
      start = c == U' ' ? next : i;  // one ' ' after a token is its trailing space
      in_ws = !in_ws;
    }
    i = next;
  }
  if (start < text.size()) {
    if (in_ws)
      toks.push_back({start, text.size(), true});
    else
      chunk_tokens(start, text.size());
  }
  rules.apply_matcher(text, toks, scratch);
  for (const DocToken& t : toks) emit(text.substr(t.b, t.e - t.b), t.space);
}

bool token_is_punct(std::string_view t) {
  for (size_t i = 0; i < t.size();)
    if (!has(next_code_point(t, i), kPunctP)) return false;
  return true;
}

bool token_in_punct_chars(std::string_view t) {
  size_t i = 0;
  const char32_t c = next_code_point(t, i);
  return i == t.size() && has(c, kSentPunct);
}

// Sentencizer.predict: calls cut(end_of_sentence) after each sentence but
// the last, and returns the number of sentences.
template <typename Cut>
size_t sentences(std::string_view text, Cut&& cut) {
  size_t count = 0;
  bool seen_period = false;
  const char* prev_end = nullptr;  // end of the token before the current one
  tokenize(text, [&](std::string_view tok, bool space) {
    if (count == 0) count = 1;
    const bool in_punct_chars = !space && token_in_punct_chars(tok);
    if (seen_period && !in_punct_chars && (space || !token_is_punct(tok))) {
      cut(static_cast<size_t>(prev_end - text.data()));
      ++count;
      seen_period = false;
    } else if (in_punct_chars) {
      seen_period = true;
    }
    prev_end = tok.data() + tok.size();
  });
  return count;
}

}  // namespace

namespace detail {

bool literal_first(char32_t c) {
  const auto& v = literal_ends().first;
  return std::binary_search(v.begin(), v.end(), c);
}
bool literal_last(char32_t c) {
  const auto& v = literal_ends().last;
  return std::binary_search(v.begin(), v.end(), c);
}

}  // namespace detail

void spacy_tokenize(std::string_view text, std::vector<Token>& out) {
  tokenize(text, [&](std::string_view t, bool space) { out.push_back({t, space}); });
}

void split_into_words(std::string_view text, std::vector<std::string_view>& out) {
  tokenize(text, [&](std::string_view t, bool space) {
    if (!space) out.push_back(t);
  });
}

size_t count_sentences(std::string_view text) {
  const size_t n = sentences(text, [](size_t) {});
  return n == 0 ? 1 : n;
}

void split_into_sentences(std::string_view text, std::vector<std::string_view>& out) {
  size_t start = 0;
  sentences(text, [&](size_t end) {
    out.push_back(text.substr(start, end - start));
    start = end;
  });
  out.push_back(text.substr(start));
}

}  // namespace claw::curate::text
