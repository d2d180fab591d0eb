#include "claw/curate/minhash.h"

#include <unicode/uchar.h>
#include <unicode/unorm2.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>

// Header-only xxHash (Debian's libxxhash-dev), inlined into the hot loops.
// Its AVX-512 path trips GCC 12's -Wmaybe-uninitialized inside the
// intrinsics headers; the AVX2 path is as fast for the short inputs here.
#define XXH_INLINE_ALL
#if defined(__AVX512F__) && defined(__AVX2__)
#define XXH_VECTOR 2  // XXH_AVX2
#endif
#include <xxhash.h>

#include "claw/core/error.h"

namespace claw::curate {

void MinHashParams::validate() const {
  if (ngram < 1 || ngram > 64) fail("minhash ngram must be between 1 and 64 words, got {}", ngram);
  if (bands < 1 || bands > 1024) fail("minhash bands must be between 1 and 1024, got {}", bands);
  if (rows < 1 || rows > 1024) fail("minhash rows must be between 1 and 1024, got {}", rows);
  if (bands * rows > 4096) fail("minhash bands x rows must be at most 4096 hashes, got {} x {}", bands, rows);
  if (!(threshold >= 0.0 && threshold <= 1.0))
    fail("minhash threshold must be between 0 (accept every LSH candidate) and 1, got {}", threshold);
}

void MinHasher::shingle_set(std::string_view text, Scratch& scratch, std::vector<uint64_t>& out) const {
  const std::span<const uint64_t> all = shingles(text, scratch);
  out.assign(all.begin(), all.end());
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
}

double MinHasher::jaccard(std::span<const uint64_t> a, std::span<const uint64_t> b) {
  size_t i = 0, j = 0, both = 0;
  while (i < a.size() && j < b.size()) {
    if (a[i] < b[j]) ++i;
    else if (b[j] < a[i]) ++j;
    else ++both, ++i, ++j;
  }
  const size_t either = a.size() + b.size() - both;
  return either == 0 ? 0.0 : static_cast<double>(both) / static_cast<double>(either);
}

double lsh_probability(double s, int bands, int rows) {
  return 1.0 - std::pow(1.0 - std::pow(s, rows), bands);
}

// ---------------------------------------------------------------------------
// Characters

namespace {

// What a code point does to a word.
enum class Kind : uint8_t {
  word,   // part of a word (letters, marks that take space, numbers other than digits)
  digit,  // a decimal digit (Nd): part of a word, runs become "0" when numbers are normalised
  space,  // Unicode White_Space: separates words
  sep,    // punctuation, symbols, controls: separates words
  drop,   // nonspacing marks and format characters: removed, the word goes on
};

struct CharInfo {
  Kind kind;
  char32_t lower;  // simple lowercase mapping
  char32_t base;   // NFD less nonspacing marks, when that is one code point; else itself
};

CharInfo classify_icu(char32_t cp) {
  CharInfo info{Kind::word, cp, cp};
  const auto c = static_cast<UChar32>(cp);
  const int8_t type = u_charType(c);
  if (u_isUWhiteSpace(c)) {
    info.kind = Kind::space;
  } else {
    switch (type) {
      case U_NON_SPACING_MARK:
      case U_FORMAT_CHAR:
        info.kind = Kind::drop;
        break;
      case U_DECIMAL_DIGIT_NUMBER:
        info.kind = Kind::digit;
        break;
      case U_UPPERCASE_LETTER: case U_LOWERCASE_LETTER: case U_TITLECASE_LETTER: case U_MODIFIER_LETTER:
      case U_OTHER_LETTER: case U_COMBINING_SPACING_MARK: case U_ENCLOSING_MARK: case U_LETTER_NUMBER:
      case U_OTHER_NUMBER: case U_PRIVATE_USE_CHAR: case U_UNASSIGNED:
        info.kind = Kind::word;
        break;
      default:  // punctuation, symbols, separators, controls, surrogates
        info.kind = Kind::sep;
        break;
    }
  }
  info.lower = static_cast<char32_t>(u_tolower(c));
  UErrorCode err = U_ZERO_ERROR;
  const UNormalizer2* nfd = unorm2_getNFDInstance(&err);
  if (U_SUCCESS(err)) {
    std::array<UChar, 32> buf{};
    const int32_t len = unorm2_getDecomposition(nfd, c, buf.data(), static_cast<int32_t>(buf.size()), &err);
    if (U_SUCCESS(err) && len > 0) {
      UChar32 only = -1;
      int bases = 0;
      for (int32_t i = 0; i < len;) {
        UChar32 d;
        U16_NEXT(buf.data(), i, len, d);
        if (u_charType(d) == U_NON_SPACING_MARK) continue;
        only = d;
        ++bases;
      }
      if (bases == 1) info.base = static_cast<char32_t>(only);
    }
  }
  return info;
}

// classify_icu for the Basic Multilingual Plane, computed once (a few ms).
class BmpTable {
 public:
  BmpTable() {
    for (char32_t cp = 0; cp < 0x10000; ++cp) {
      CharInfo info = (cp >= 0xD800 && cp < 0xE000) ? CharInfo{Kind::sep, cp, cp} : classify_icu(cp);
      kind_[cp] = info.kind;
      lower_[cp] = info.lower;
      base_[cp] = info.base;
    }
  }
  CharInfo operator()(char32_t cp) const { return {kind_[cp], lower_[cp], base_[cp]}; }

 private:
  std::array<Kind, 0x10000> kind_;
  std::array<char32_t, 0x10000> lower_, base_;
};

const BmpTable& bmp_table() {
  static const BmpTable* table = new BmpTable();  // never destroyed: usable from threads at exit
  return *table;
}

CharInfo classify(char32_t cp) { return cp < 0x10000 ? bmp_table()(cp) : classify_icu(cp); }

// ASCII: letters and digits make words, everything else separates them.
constexpr std::array<Kind, 128> kAsciiKind = [] {
  std::array<Kind, 128> k{};
  for (int c = 0; c < 128; ++c) {
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) k[c] = Kind::word;
    else if (c >= '0' && c <= '9') k[c] = Kind::digit;
    else if (c == ' ' || (c >= '\t' && c <= '\r')) k[c] = Kind::space;
    else k[c] = Kind::sep;
  }
  return k;
}();

inline char ascii_lower(unsigned char c) { return static_cast<char>(c >= 'A' && c <= 'Z' ? c + 32 : c); }

// Decodes the UTF-8 sequence at s[i] (s[i] >= 0x80) into cp; returns its
// length, or 0 when it is not valid UTF-8 (overlong, surrogate, > U+10FFFF,
// truncated).
inline size_t decode_utf8(std::string_view s, size_t i, char32_t& cp) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data()) + i;
  const size_t left = s.size() - i;
  const unsigned char c = p[0];
  auto cont = [&](size_t k) { return k < left && (p[k] & 0xC0) == 0x80; };
  if (c >= 0xC2 && c <= 0xDF) {
    if (!cont(1)) return 0;
    cp = (char32_t(c & 0x1F) << 6) | (p[1] & 0x3F);
    return 2;
  }
  if (c >= 0xE0 && c <= 0xEF) {
    if (!cont(1) || !cont(2)) return 0;
    cp = (char32_t(c & 0x0F) << 12) | (char32_t(p[1] & 0x3F) << 6) | (p[2] & 0x3F);
    if (cp < 0x800 || (cp >= 0xD800 && cp < 0xE000)) return 0;
    return 3;
  }
  if (c >= 0xF0 && c <= 0xF4) {
    if (!cont(1) || !cont(2) || !cont(3)) return 0;
    cp = (char32_t(c & 0x07) << 18) | (char32_t(p[1] & 0x3F) << 12) | (char32_t(p[2] & 0x3F) << 6) | (p[3] & 0x3F);
    if (cp < 0x10000 || cp > 0x10FFFF) return 0;
    return 4;
  }
  return 0;
}

inline void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    const char b[2] = {static_cast<char>(0xC0 | (cp >> 6)), static_cast<char>(0x80 | (cp & 0x3F))};
    out.append(b, 2);
  } else if (cp < 0x10000) {
    const char b[3] = {static_cast<char>(0xE0 | (cp >> 12)), static_cast<char>(0x80 | ((cp >> 6) & 0x3F)),
                       static_cast<char>(0x80 | (cp & 0x3F))};
    out.append(b, 3);
  } else {
    const char b[4] = {static_cast<char>(0xF0 | (cp >> 18)), static_cast<char>(0x80 | ((cp >> 12) & 0x3F)),
                       static_cast<char>(0x80 | ((cp >> 6) & 0x3F)), static_cast<char>(0x80 | (cp & 0x3F))};
    out.append(b, 4);
  }
}

// The kind of the code point at s[i] and its length (1 for an invalid byte,
// which separates).
inline Kind kind_at(std::string_view s, size_t i, size_t& len) {
  const auto c = static_cast<unsigned char>(s[i]);
  if (c < 0x80) {
    len = 1;
    return kAsciiKind[c];
  }
  char32_t cp;
  len = decode_utf8(s, i, cp);
  if (len == 0) {
    len = 1;
    return Kind::sep;
  }
  return classify(cp).kind;
}

inline bool is_decimal_separator(std::string_view s, size_t i, size_t& len) {
  const auto c = static_cast<unsigned char>(s[i]);
  if (c == '.' || c == ',') {
    len = 1;
    return true;
  }
  if (c < 0x80) return false;
  char32_t cp;
  len = decode_utf8(s, i, cp);
  // datatrove's NUMBERS_PATTERN: [.,،٫⎖⎗⎘]
  return len != 0 && (cp == 0x060C || cp == 0x066B || cp == 0x2396 || cp == 0x2397 || cp == 0x2398);
}

// The end of the number starting with the digit at s[i]: a run of digits,
// then at most one decimal separator followed by another run of digits.
size_t skip_number(std::string_view s, size_t i) {
  auto skip_digits = [&](size_t j) {
    size_t len;
    while (j < s.size() && kind_at(s, j, len) == Kind::digit) j += len;
    return j;
  };
  i = skip_digits(i);
  size_t sep_len, len;
  if (i < s.size() && is_decimal_separator(s, i, sep_len) && i + sep_len < s.size() &&
      kind_at(s, i + sep_len, len) == Kind::digit)
    i = skip_digits(i + sep_len);
  return i;
}

}  // namespace

size_t normalize_words(std::string_view text, const TextNorm& norm, std::string& out,
                       std::vector<uint32_t>& word_starts) {
  word_starts.clear();
  // Output bound: ASCII maps to one byte; a separator yields at most one
  // space; a code point of k >= 2 bytes maps to at most 4 <= 2k bytes.
  out.resize(2 * text.size() + 8);
  char* const base = out.data();
  char* w = base;
  bool in_word = false;
  auto begin_word = [&] {
    if (in_word) return;
    if (!word_starts.empty()) *w++ = ' ';
    word_starts.push_back(static_cast<uint32_t>(w - base));
    in_word = true;
  };
  auto put = [&](char32_t cp) {
    if (cp < 0x80) {
      *w++ = static_cast<char>(cp);
    } else if (cp < 0x800) {
      *w++ = static_cast<char>(0xC0 | (cp >> 6));
      *w++ = static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      *w++ = static_cast<char>(0xE0 | (cp >> 12));
      *w++ = static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      *w++ = static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      *w++ = static_cast<char>(0xF0 | (cp >> 18));
      *w++ = static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      *w++ = static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      *w++ = static_cast<char>(0x80 | (cp & 0x3F));
    }
  };
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  const bool lower = norm.lowercase;
  size_t i = 0;
  while (i < n) {
    unsigned char c = s[i];
    if (c < 0x80) {
      const Kind k = kAsciiKind[c];
      if (k == Kind::word) {  // the common case: a run of ASCII letters
        begin_word();
        do {
          *w++ = lower ? ascii_lower(c) : static_cast<char>(c);
        } while (++i < n && (c = s[i]) < 0x80 && kAsciiKind[c] == Kind::word);
      } else if (k == Kind::digit) {
        begin_word();
        if (norm.normalize_numbers) {
          *w++ = '0';
          i = skip_number(text, i);
        } else {
          *w++ = static_cast<char>(c);
          ++i;
        }
      } else {
        in_word = false;
        ++i;
      }
      continue;
    }
    char32_t cp;
    const size_t len = decode_utf8(text, i, cp);
    if (len == 0) {  // not UTF-8: separates
      in_word = false;
      ++i;
      continue;
    }
    const CharInfo info = classify(cp);
    switch (info.kind) {
      case Kind::drop:
        i += len;
        break;
      case Kind::space:
      case Kind::sep:
        in_word = false;
        i += len;
        break;
      case Kind::digit:
        begin_word();
        if (norm.normalize_numbers) {
          *w++ = '0';
          i = skip_number(text, i);
        } else {
          put(cp);
          i += len;
        }
        break;
      case Kind::word: {
        char32_t m = lower ? info.lower : cp;
        if (norm.strip_diacritics) m = (m == cp) ? info.base : classify(m).base;
        begin_word();
        put(m);
        i += len;
        break;
      }
    }
  }
  out.resize(static_cast<size_t>(w - base));
  return word_starts.size();
}

void normalize_space_case(std::string_view text, std::string& out) {
  out.clear();
  out.reserve(text.size());
  bool pending_space = false;
  const size_t n = text.size();
  for (size_t i = 0; i < n;) {
    const auto c = static_cast<unsigned char>(text[i]);
    char32_t cp = c;
    size_t len = 1;
    Kind kind;
    if (c < 0x80) {
      kind = kAsciiKind[c];
    } else if ((len = decode_utf8(text, i, cp)) == 0) {
      len = 1;
      kind = Kind::sep;  // not UTF-8: kept as the byte it is
      cp = 0xFFFFFFFF;
    } else {
      kind = classify(cp).kind;
    }
    if (kind == Kind::space) {
      pending_space = !out.empty();
      i += len;
      continue;
    }
    if (pending_space) out.push_back(' ');
    pending_space = false;
    if (c < 0x80) out.push_back(ascii_lower(c));
    else if (cp == 0xFFFFFFFF) out.push_back(static_cast<char>(c));
    else append_utf8(out, classify(cp).lower);
    i += len;
  }
}

// ---------------------------------------------------------------------------
// MinHash

namespace {

// Permutations are evaluated kBlock at a time: the block's multipliers,
// offsets and minimums stay in vector registers over all shingles.
constexpr int kBlock = 16;

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

}  // namespace

MinHasher::MinHasher(const MinHashParams& params) : params_(params) {
  params_.validate();
  const int p = params_.num_perm();
  const int padded = (p + kBlock - 1) / kBlock * kBlock;
  a_.resize(padded);
  b_.resize(padded);
  uint64_t state = params_.seed ^ 0x6D696E68617368ULL;  // "minhash"
  for (int i = 0; i < padded; ++i) {
    a_[i] = splitmix64(state) | 1;  // odd: x -> a x + b is a bijection mod 2^64
    b_[i] = splitmix64(state);
  }
  (void)bmp_table();  // build it now rather than inside the first add()
}

std::span<const uint64_t> MinHasher::shingles(std::string_view text, Scratch& s) const {
  const size_t words = normalize_words(text, params_.norm, s.words, s.word_starts);
  s.shingles.clear();
  const auto n = static_cast<size_t>(params_.ngram);
  if (words < n) return {};
  s.shingles.resize(words - n + 1);
  const char* base = s.words.data();
  const uint32_t* starts = s.word_starts.data();
  for (size_t i = 0; i + n <= words; ++i) {
    const size_t end = i + n < words ? starts[i + n] - 1 : s.words.size();
    s.shingles[i] = XXH3_64bits(base + starts[i], end - starts[i]);
  }
  return s.shingles;
}

void MinHasher::signature(std::span<const uint64_t> shingles, std::span<uint32_t> sig) const {
  const int p = num_perm();
  CLAW_CHECK(static_cast<int>(sig.size()) == p, "signature of {} entries, expected {}", sig.size(), p);
  CLAW_CHECK(!shingles.empty());
  const uint64_t* xs = shingles.data();
  const size_t count = shingles.size();
  for (int i0 = 0; i0 < p; i0 += kBlock) {
    alignas(64) uint64_t a[kBlock], b[kBlock], m[kBlock];
    for (int l = 0; l < kBlock; ++l) {
      a[l] = a_[i0 + l];
      b[l] = b_[i0 + l];
      m[l] = std::numeric_limits<uint64_t>::max();
    }
    // min commutes with the monotone >> 32: take it on the full 64 bits.
    for (size_t j = 0; j < count; ++j) {
      const uint64_t x = xs[j];
      for (int l = 0; l < kBlock; ++l) m[l] = std::min(m[l], a[l] * x + b[l]);
    }
    for (int l = 0; l < kBlock && i0 + l < p; ++l) sig[i0 + l] = static_cast<uint32_t>(m[l] >> 32);
  }
}

uint64_t MinHasher::band_key(std::span<const uint32_t> sig, int band) const {
  CLAW_CHECK(band >= 0 && band < params_.bands);
  return XXH3_64bits(sig.data() + static_cast<size_t>(band) * params_.rows, sizeof(uint32_t) * params_.rows);
}

double MinHasher::estimate_jaccard(std::span<const uint32_t> a, std::span<const uint32_t> b) {
  CLAW_CHECK(a.size() == b.size() && !a.empty());
  size_t equal = 0;
  for (size_t i = 0; i < a.size(); ++i) equal += a[i] == b[i];
  return static_cast<double>(equal) / static_cast<double>(a.size());
}

}  // namespace claw::curate
