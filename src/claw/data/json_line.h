// Internal to the data layer: one JSONL line as a JSON object (nlohmann),
// with the reasons a bad line is reported by (jsonl_record.h, sft.h).
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace claw::data {

// Empty with `out` set to the line's object, or why the line is not one:
// "invalid UTF-8 at byte 3 of the line (0xff)", "malformed JSON at byte
// 17: ...", "expected a JSON object, got an array".
std::string parse_json_object(std::string_view line, nlohmann::json& out);
// A value's type for a message: "a number", "an object", "null".
std::string describe_json_type(const nlohmann::json& v);
// An object's keys for a message: "\"a\", \"b\"" (the first 8), or "none".
std::string describe_json_keys(const nlohmann::json& object);

}  // namespace claw::data
