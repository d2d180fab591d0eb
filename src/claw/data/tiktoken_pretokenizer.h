// Pre-tokenization of tiktoken's cl100k_base and o200k_base encodings
// (patterns from tiktoken_ext/openai_public.py, as shipped in the npm
// tiktoken@1.0.22 registry), as hand-written scanners with the result of the
// regex engine tiktoken uses (fancy-regex: leftmost alternative that
// matches, greedy quantifiers, backtracking).
//
// cl100k_base:
//   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
//   ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//
// o200k_base (U = [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}], W = [\p{Ll}\p{Lm}\p{Lo}\p{M}],
// C = (?i:'s|'t|'re|'ve|'m|'ll|'d)):
//   [^\r\n\p{L}\p{N}]?U*W+C?|[^\r\n\p{L}\p{N}]?U+W*C?|\p{N}{1,3}|
//   ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+
//
// What the alternatives come to, per piece start (P = [^\r\n\p{L}\p{N}]: a
// character that is no letter, number, CR or LF; marks and spaces are in P):
//   - Contractions: "'" then s, t, re, ve, m, ll, d in any case; Unicode
//     case-insensitivity also lets U+017F LONG S match "s".
//   - cl100k words: an optional P character, then a maximal letter run,
//     when a letter follows it ("(hello" and " hello" are one piece each).
//   - o200k words, a camel-case split: U*W+ matches from x when the first
//     character from x that is not Lu/Lt is in W; the greedy U* with
//     backtracking then ends the piece after the W run following the U run,
//     or, if no W character follows the U run, after the last W character
//     inside it. Tried with the P prefix, then without; then U+W*, which by
//     then is a run of Lu/Lt; then a contraction may follow.
//   - Numbers in groups of at most three.
//   - Punctuation: an optional space, a maximal run of characters that are
//     not whitespace, letters or numbers, then any CR/LF (o200k: also '/').
//   - Whitespace: `\s*[\r\n]+` ends the piece just after the last CR/LF of
//     the whitespace run; without CR/LF, the GPT-2 rules (a run followed by
//     text gives its last character to the next piece).
//
// Character classes: pretokenizer_unicode.h. Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <string_view>

namespace claw::data {

// End (byte offset) of the pre-token starting at byte begin < text.size().
size_t cl100k_pretoken_end(std::string_view text, size_t begin);
// Qwen 2's pattern: cl100k's with every digit a piece of its own (\p{N}
// instead of \p{N}{1,3}).
size_t qwen2_pretoken_end(std::string_view text, size_t begin);
size_t o200k_pretoken_end(std::string_view text, size_t begin);

}  // namespace claw::data
