// Pre-tokenizers: how byte-level BPE tokenizers cut text into pieces before
// merging bytes within each piece. Each is the regular expression of an
// OpenAI encoding, implemented as a hand-written scanner (no regex engine)
// that gives the same pieces:
//
//   gpt2    GPT-2, r50k_base, p50k_base     gpt2_pretokenizer.h
//   cl100k  cl100k_base                     tiktoken_pretokenizer.h
//   o200k   o200k_base                      tiktoken_pretokenizer.h
//   qwen2   Qwen 2 / 2.5 / 3 (cl100k's, one digit a piece)  tiktoken_pretokenizer.h
//
// Invariant: the pieces tile the text (each starts where the previous one
// ended, none is empty), for any bytes, valid UTF-8 or not.
//
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace claw::data {

enum class Pretokenizer : uint8_t { gpt2, cl100k, o200k, qwen2 };

// "gpt2", "cl100k", "o200k", "qwen2".
std::string_view to_string(Pretokenizer p);
// The inverse of to_string; claw::Error naming `flag` and the valid names.
Pretokenizer parse_pretokenizer(std::string_view name, std::string_view flag);

// End (byte offset) of the piece starting at byte begin < text.size().
size_t pretoken_end(Pretokenizer p, std::string_view text, size_t begin);

// The scanner behind pretoken_end(p, ...), for loops that call it per piece.
using PretokenEnd = size_t (*)(std::string_view text, size_t begin);
PretokenEnd pretoken_end_function(Pretokenizer p);

// All pieces of `text`, in order (views into `text`).
std::vector<std::string_view> pretokenize(Pretokenizer p, std::string_view text);

}  // namespace claw::data
