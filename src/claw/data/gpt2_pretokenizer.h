// GPT-2 pre-tokenization: splits text into the pieces that byte-level BPE
// then encodes one at a time. GPT-2 (openai/gpt-2 encoder.py) splits with the
// regular expression
//
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//
// evaluated by Python's `regex` module (leftmost alternative that matches,
// each quantifier greedy). This is a hand-written scanner with the same
// result, so claw needs no regex engine; per piece start it decides:
//
//   1. "'" followed by s, t, m, d, re, ve or ll (case-sensitive ASCII) ->
//      that contraction, even inside a word ("'sup" -> "'s", "up").
//   2. An optional U+0020 SPACE, then a maximal run of one class: letters
//      (\p{L}: Lu Ll Lt Lm Lo), numbers (\p{N}: Nd Nl No), or "other" (not
//      whitespace, letter or number: punctuation, symbols, marks, controls).
//      The class is that of the first character after the optional space.
//   3. Otherwise the position starts a whitespace run (\s = Unicode
//      White_Space). `\s+(?!\S)` takes the whole run when it ends the text;
//      when a non-space follows, it backtracks one character so the last
//      whitespace character can lead the next piece (" word"). A run of one
//      character before a non-space falls to the final `\s+`.
//
// Character classes come from ICU (u_charType / White_Space), the same
// Unicode database properties Python's `regex` uses for \p{L}, \p{N} and \s.
// Bytes that are not valid UTF-8 (which Python could not hold in a str) are
// classed as "other", so any byte string splits and round-trips.
//
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <string_view>
#include <vector>

namespace claw::data {

// End (byte offset) of the GPT-2 pre-token that starts at byte `begin` of
// `text`; begin < text.size(). The pieces tile the text: the next piece
// starts where this one ends.
size_t gpt2_pretoken_end(std::string_view text, size_t begin);

// All pre-tokens of `text`, in order (views into `text`).
std::vector<std::string_view> gpt2_pretokenize(std::string_view text);

}  // namespace claw::data
