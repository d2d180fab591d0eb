// Internal to text_stats.cc and spacy_tokenizer.cc, which alone include it:
// the character classes behind text_stats.h as one 32-bit word of flags per
// code point. text_stats.cc computes the flags (Python's str classes, ICU's
// categories, the generated spaCy and datatrove sets); spacy_tokenizer.cc
// reads them and supplies the first and last code points of its literal
// affixes (kPrefixFirst, kSuffixLast). The Basic Multilingual Plane is a
// table built on first use, supplementary code points are computed per call
// (rare in text).
#pragma once

#include <cstdint>

namespace claw::curate::text::detail {

enum : uint32_t {
  kSpace = 1u << 0,        // str.isspace
  kAlpha = 1u << 1,        // str.isalpha (L*)
  kPunctP = 1u << 2,       // general category P* (spaCy's is_punct)
  kDecimal = 1u << 3,      // Nd: re's \d
  kWord = 1u << 4,         // L*, Nd, Nl, No: re's \w less '_'
  kLineBreak = 1u << 5,    // a str.splitlines boundary
  kDtPunct = 1u << 6,      // datatrove PUNCTUATION_SET
  kDtTerminal = 1u << 7,   // datatrove TERMINAL_PUNCTUATION
  kSentPunct = 1u << 8,    // Sentencizer.default_punct_chars
  kSpAlpha = 1u << 9,      // spaCy ALPHA
  kSpLower = 1u << 10,     // spaCy ALPHA_LOWER
  kSpUpper = 1u << 11,     // spaCy ALPHA_UPPER
  kSpLowerQ = 1u << 12,    // ALPHA_LOWER or CONCAT_QUOTES
  kSpUpperQ = 1u << 13,    // ALPHA_UPPER or CONCAT_QUOTES
  kSpIcon = 1u << 14,      // spaCy ICONS
  kSpDotBehind = 1u << 15, // may stand before a suffix '.'
  kPrefixFirst = 1u << 16, // first code point of a literal prefix
  kSuffixLast = 1u << 17,  // last code point of a literal / digit suffix
};

// The flags of c, computed (from ICU and the generated tables).
uint32_t compute_flags(char32_t c);
// compute_flags of U+0000..U+FFFF, indexed by code point; built on first use.
const uint32_t* bmp_flags();

inline uint32_t flags(char32_t c) { return c < 0x10000 ? bmp_flags()[c] : compute_flags(c); }
inline bool has(char32_t c, uint32_t f) { return (flags(c) & f) != 0; }

// First and last code points of the literal affixes, for kPrefixFirst and
// kSuffixLast (the literal lists are small); defined in spacy_tokenizer.cc.
bool literal_first(char32_t c);
bool literal_last(char32_t c);

}  // namespace claw::curate::text::detail
