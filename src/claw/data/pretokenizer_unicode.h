// The Unicode character classes that the pre-tokenizers' regular
// expressions use (\p{L}, \p{N}, \s, o200k's case classes), as one byte of
// flags per character, and a UTF-8 decoder that returns them.
//
// Classes come from ICU (u_charType, White_Space): the same Unicode
// Character Database properties that Python's `regex` module and Rust's
// `regex` crate (tiktoken) use. Debian 12's ICU 72 implements Unicode 15.0:
// characters assigned in later versions have no class here and may split
// differently from a tiktoken built on newer tables. A byte that does not start a well-formed
// UTF-8 sequence (an ill-formed sequence is consumed as ICU's U8_NEXT does)
// has no class at all, i.e. it is "other" punctuation-like text, so any byte
// string pre-tokenizes and round-trips.
//
// Speed: ASCII is a 128-entry table and the Basic Multilingual Plane a
// 64 KiB table, both filled from ICU on first use; only supplementary
// characters (emoji, historic scripts) call ICU per character.
//
// Thread-safety: pure functions; the tables are built once, thread-safely.
#pragma once

#include <unicode/utf8.h>

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace claw::data::unicode {

enum : uint8_t {
  kLetter = 1 << 0,    // \p{L}: Lu Ll Lt Lm Lo
  kNumber = 1 << 1,    // \p{N}: Nd Nl No
  kSpace = 1 << 2,     // \s: White_Space
  kNewline = 1 << 3,   // \r or \n (also kSpace)
  kUpperish = 1 << 4,  // o200k's [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]
  kLowerish = 1 << 5,  // o200k's [\p{Ll}\p{Lm}\p{Lo}\p{M}]
};

// Flags of one code point; 0 for c < 0 (ICU's ill-formed marker).
uint8_t code_point_flags(int32_t c);

// code_point_flags for U+0000..U+FFFF, indexed by code point: built on
// first use (a static local, so the per-character check inlines to a load).
const uint8_t* build_bmp_flags();
inline const uint8_t* bmp_flags() {
  static const uint8_t* const table = build_bmp_flags();
  return table;
}

struct Char {
  uint8_t flags;
  size_t end;  // byte offset just past the character
};

// The character starting at byte i < s.size().
inline Char next_char(std::string_view s, size_t i) {
  const unsigned char b = static_cast<unsigned char>(s[i]);
  if (b < 0x80) return {bmp_flags()[b], i + 1};
  // A character is at most 4 bytes; a bounded window keeps ICU's int32
  // offsets valid in texts over 2 GiB.
  const size_t left = s.size() - i;
  const int32_t len = static_cast<int32_t>(left < 4 ? left : 4);
  int32_t j = 0;
  UChar32 c;
  U8_NEXT(s.data() + i, j, len, c);
  return {c >= 0 && c < 0x10000 ? bmp_flags()[c] : code_point_flags(c), i + static_cast<size_t>(j)};
}

// Byte offset of the first byte of s that is not part of a well-formed
// UTF-8 sequence, or s.size() if all of s is well-formed.
size_t first_invalid_utf8(std::string_view s);

}  // namespace claw::data::unicode
