#include "claw/data/jsonl_record.h"

#include <cstdint>
#include <cstring>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "claw/core/json_depth.h"
#include "claw/data/json_line.h"

namespace claw::data {
namespace {

// nlohmann's what() is "[json.exception.parse_error.101] parse error at
// line 1, column 7: <reason>"; a JSONL line is always line 1 and the byte
// offset is reported separately, so keep only the reason.
std::string parse_error_reason(const nlohmann::json::parse_error& e) {
  std::string_view what = e.what();
  size_t column = what.find("column ");
  size_t colon = column == std::string_view::npos ? column : what.find(": ", column);
  return std::string(colon == std::string_view::npos ? what : what.substr(colon + 2));
}

}  // namespace

std::string describe_json_keys(const nlohmann::json& object) {
  std::string out;
  int shown = 0;
  for (auto it = object.begin(); it != object.end(); ++it) {
    if (shown++ == 8) return out + ", ...";
    out += fmt::format("{}\"{}\"", out.empty() ? "" : ", ", it.key());
  }
  return out.empty() ? "none" : out;
}

std::string describe_json_type(const nlohmann::json& v) {
  if (v.is_null()) return "null";
  std::string_view name = v.type_name();
  return fmt::format("{} {}", name == "object" || name == "array" ? "an" : "a", name);
}

std::string parse_json_object(std::string_view line, nlohmann::json& out) {
  if (size_t bad = find_invalid_utf8(line); bad != std::string_view::npos)
    return fmt::format("invalid UTF-8 at byte {} of the line (0x{:02x})", bad, static_cast<unsigned char>(line[bad]));
  if (const size_t deep = json_too_deep(line); deep != std::string_view::npos)
    return fmt::format("JSON nested deeper than {} levels at byte {}", kMaxJsonDepth, deep);
  try {
    out = nlohmann::json::parse(line.begin(), line.end());
  } catch (const nlohmann::json::parse_error& e) {
    // e.byte counts from 1 and points at the last byte read.
    return fmt::format("malformed JSON at byte {}: {}", e.byte > 0 ? e.byte - 1 : 0, parse_error_reason(e));
  } catch (const nlohmann::json::exception& e) {  // a number out of range (1e400)
    std::string_view what = e.what();
    return fmt::format("malformed JSON: {}", what.substr(what.find(']') == std::string_view::npos ? 0 : what.find(']') + 2));
  }
  if (!out.is_object()) return fmt::format("expected a JSON object, got {}", describe_json_type(out));
  return {};
}

size_t find_invalid_utf8(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  size_t i = 0;
  while (i < n) {
    // Most corpus text is ASCII: skip eight bytes at a time while no byte
    // has its top bit set.
    if (i + 8 <= n) {
      uint64_t w;
      std::memcpy(&w, p + i, 8);
      if ((w & 0x8080808080808080ull) == 0) {
        i += 8;
        continue;
      }
    }
    const unsigned char c = p[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    // Length and the allowed range of the second byte (RFC 3629, sec. 4):
    // the narrowed ranges exclude overlong forms, surrogates and > U+10FFFF.
    size_t len = 0;
    unsigned char lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
    } else {
      return i;
    }
    if (i + len > n || p[i + 1] < lo || p[i + 1] > hi) return i;
    for (size_t k = 2; k < len; ++k)
      if ((p[i + k] & 0xC0) != 0x80) return i;
    i += len;
  }
  return std::string_view::npos;
}

bool is_blank_line(std::string_view line) { return line.find_first_not_of(" \t\r") == std::string_view::npos; }

JsonlFields parse_jsonl_line(std::string_view line, std::span<const std::string> keys) {
  JsonlFields out;
  nlohmann::json record;
  out.error = parse_json_object(line, record);
  if (!out.error.empty()) return out;
  out.texts.resize(keys.size());
  for (size_t k = 0; k < keys.size(); ++k) {
    auto it = record.find(keys[k]);
    if (it == record.end()) {
      out.error = fmt::format("no key \"{}\" (--json-keys); the record's keys are {}", keys[k], describe_json_keys(record));
      break;
    }
    if (it->is_string()) {
      out.texts[k].push_back(std::move(it->get_ref<std::string&>()));
    } else if (it->is_array()) {
      for (size_t e = 0; e < it->size() && out.error.empty(); ++e) {
        nlohmann::json& sentence = (*it)[e];
        if (sentence.is_string())
          out.texts[k].push_back(std::move(sentence.get_ref<std::string&>()));
        else
          out.error = fmt::format("key \"{}\": element {} of the list is {}, not a string", keys[k], e,
                                  describe_json_type(sentence));
      }
    } else {
      out.error = fmt::format("key \"{}\" holds {}, not a string or a list of strings", keys[k], describe_json_type(*it));
    }
    if (!out.error.empty()) break;
  }
  if (!out.error.empty()) out.texts.clear();
  return out;
}

}  // namespace claw::data
