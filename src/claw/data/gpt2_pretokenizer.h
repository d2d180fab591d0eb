// GPT-2 pre-tokenization (also tiktoken's r50k_base and p50k_base): splits
// text into the pieces that byte-level BPE then encodes one at a time.
// GPT-2 (openai/gpt-2 encoder.py) splits with the regular expression
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
//      (\p{L}), numbers (\p{N}), or "other" (not whitespace, letter or
//      number: punctuation, symbols, marks, controls). The class is that of
//      the first character after the optional space.
//   3. Otherwise the position starts a whitespace run (\s = Unicode
//      White_Space). `\s+(?!\S)` takes the whole run when it ends the text;
//      when a non-space follows, it backtracks one character so the last
//      whitespace character can lead the next piece (" word"). A run of one
//      character before a non-space falls to the final `\s+`.
//
// Character classes: pretokenizer_unicode.h (bytes that are not UTF-8 are
// "other"). Thread-safety: a pure function.
#pragma once

#include <cstddef>
#include <string_view>

namespace claw::data {

// End (byte offset) of the GPT-2 pre-token that starts at byte `begin` of
// `text`; begin < text.size(). The pieces tile the text: the next piece
// starts where this one ends.
size_t gpt2_pretoken_end(std::string_view text, size_t begin);

}  // namespace claw::data
