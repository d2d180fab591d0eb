// One line of a JSONL corpus, as Megatron's preprocess_data.py reads it:
// a JSON object whose --json-keys fields hold the text to tokenize. A field
// is a string (one text) or a list of strings (pre-split sentences, one
// text each; preprocess writes each as its own sequence of the document).
// Other fields are ignored.
//
// A line is rejected, with the reason, when it is not valid UTF-8 (Megatron
// opens the input as UTF-8 and fails on the first bad byte), is not a JSON
// object, lacks a requested key, or holds something other than text there.
// Reasons name the byte offset within the line (0-based) where there is one.
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace claw::data {

// Offset of the first byte of `s` that is not part of well-formed UTF-8
// (RFC 3629: no overlong forms, no surrogates, nothing above U+10FFFF), or
// std::string_view::npos if `s` is valid.
size_t find_invalid_utf8(std::string_view s);

struct JsonlFields {
  // texts[k]: the texts of keys[k], in order (one for a string field).
  std::vector<std::vector<std::string>> texts;
  // Empty when the line is usable; otherwise why not, e.g.
  // "malformed JSON at byte 17: ...", "no key \"text\"".
  std::string error;
};

// Parses one line (without its '\n') and extracts `keys`.
JsonlFields parse_jsonl_line(std::string_view line, std::span<const std::string> keys);

// True for a line of spaces, tabs and carriage returns only.
bool is_blank_line(std::string_view line);

}  // namespace claw::data
