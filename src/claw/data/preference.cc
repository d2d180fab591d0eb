#include "claw/data/preference.h"

#include <algorithm>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "claw/core/error.h"
#include "claw/data/json_line.h"

namespace claw::data {
namespace {

// One side of a chat pair: the prompt's messages and then the reply's.
std::string chat_side(const std::vector<ChatMessage>& prompt, const nlohmann::json& reply, const char* field,
                      SftRecord& out) {
  out.messages = prompt;
  if (reply.is_string()) {
    out.messages.push_back({"assistant", reply.get<std::string>()});
    return {};
  }
  std::vector<ChatMessage> turns;
  if (std::string e = parse_chat_messages(reply, turns, field, true); !e.empty()) return e;
  out.messages.insert(out.messages.end(), turns.begin(), turns.end());
  return {};
}

bool same(const ChatMessage& a, const ChatMessage& b) { return a.role == b.role && a.content == b.content; }

}  // namespace

PreferenceRecord parse_preference_line(std::string_view line) {
  PreferenceRecord r;
  nlohmann::json record;
  r.error = parse_json_object(line, record);
  if (!r.error.empty()) return r;
  auto prompt = record.find("prompt"), chosen = record.find("chosen"), rejected = record.find("rejected");
  if (chosen == record.end() || rejected == record.end()) {
    r.error = fmt::format("a preference pair needs \"chosen\" and \"rejected\" (and \"prompt\"); the record's keys "
                          "are {}", describe_json_keys(record));
    return r;
  }
  if (prompt != record.end() && prompt->is_string()) {
    if (!chosen->is_string() || !rejected->is_string()) {
      r.error = fmt::format("with a text \"prompt\", \"chosen\" and \"rejected\" must be strings (got {} and {})",
                            describe_json_type(*chosen), describe_json_type(*rejected));
      return r;
    }
    r.chosen.prompt = r.rejected.prompt = prompt->get<std::string>();
    r.chosen.completion = chosen->get<std::string>();
    r.rejected.completion = rejected->get<std::string>();
    if (r.chosen.completion.empty() || r.rejected.completion.empty())
      r.error = "an empty \"chosen\" or \"rejected\" reply (nothing to compare)";
  } else if (prompt != record.end()) {
    std::vector<ChatMessage> p;
    r.error = parse_chat_messages(*prompt, p, "prompt", false);
    if (r.error.empty()) r.error = chat_side(p, *chosen, "chosen", r.chosen);
    if (r.error.empty()) r.error = chat_side(p, *rejected, "rejected", r.rejected);
  } else {
    // Whole conversations: the prompt is what they share.
    r.error = parse_chat_messages(*chosen, r.chosen.messages, "chosen", true);
    if (r.error.empty()) r.error = parse_chat_messages(*rejected, r.rejected.messages, "rejected", true);
    if (r.error.empty()) {
      const auto& c = r.chosen.messages;
      const auto& j = r.rejected.messages;
      size_t shared = 0;
      while (shared < c.size() && shared < j.size() && same(c[shared], j[shared])) ++shared;
      auto assistant_after = [&](const std::vector<ChatMessage>& m) {
        return std::any_of(m.begin() + static_cast<std::ptrdiff_t>(shared), m.end(),
                           [](const ChatMessage& x) { return x.role == "assistant"; });
      };
      if (!assistant_after(c) || !assistant_after(j))
        r.error = "\"chosen\" and \"rejected\" must each end in assistant turns after the messages they share";
    }
  }
  if (r.error.empty() && r.chosen.messages.size() == r.rejected.messages.size() &&
      std::equal(r.chosen.messages.begin(), r.chosen.messages.end(), r.rejected.messages.begin(), same) &&
      r.chosen.completion == r.rejected.completion)
    r.error = "\"chosen\" and \"rejected\" are the same reply (nothing to prefer)";
  if (!r.error.empty()) r.chosen = r.rejected = {};
  return r;
}

PreferenceExample encode_preference(const SftEncoder& encoder, const PreferenceRecord& r) {
  CLAW_CHECK(r.error.empty(), "encoding an unusable preference record: {}", r.error);
  PreferenceExample ex{encoder.encode(r.chosen), encoder.encode(r.rejected)};
  const auto& a = ex.chosen.tokens;
  const auto& b = ex.rejected.tokens;
  const size_t shared = static_cast<size_t>(std::mismatch(a.begin(), a.end(), b.begin(), b.end()).first - a.begin());
  std::fill_n(ex.chosen.loss_mask.begin(), shared, uint8_t{0});
  std::fill_n(ex.rejected.loss_mask.begin(), shared, uint8_t{0});
  return ex;
}

}  // namespace claw::data
