#include "claw/data/sft.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "claw/core/error.h"
#include "claw/data/json_line.h"

namespace claw::data {
namespace {

bool known_role(const std::string& role) { return role == "system" || role == "user" || role == "assistant"; }

}  // namespace

std::string parse_chat_messages(const nlohmann::json& list, std::vector<ChatMessage>& out, std::string_view field,
                                bool need_assistant) {
  if (!list.is_array()) return fmt::format("\"{}\" holds {}, not a list of messages", field, describe_json_type(list));
  if (list.empty()) return fmt::format("\"{}\" is an empty list", field);
  bool assistant = false;
  for (size_t i = 0; i < list.size(); ++i) {
    const nlohmann::json& m = list[i];
    if (!m.is_object()) return fmt::format("{}[{}] is {}, not an object", field, i, describe_json_type(m));
    auto role = m.find("role"), content = m.find("content");
    if (role == m.end() || !role->is_string())
      return fmt::format("{}[{}] has no string \"role\" (system, user or assistant)", field, i);
    if (!known_role(role->get<std::string>()))
      return fmt::format("{}[{}] has the unknown role \"{}\" (system, user or assistant)", field, i,
                         role->get<std::string>());
    if (content == m.end() || !content->is_string())
      return fmt::format("{}[{}] ({}) has no string \"content\"", field, i, role->get<std::string>());
    out.push_back({role->get<std::string>(), content->get<std::string>()});
    assistant |= out.back().role == "assistant";
  }
  if (need_assistant && !assistant) return "a conversation without an assistant turn (nothing to learn)";
  return {};
}

SftRecord parse_sft_line(std::string_view line) {
  SftRecord r;
  nlohmann::json record;
  r.error = parse_json_object(line, record);
  if (!r.error.empty()) return r;
  if (auto it = record.find("messages"); it != record.end()) {
    r.error = parse_chat_messages(*it, r.messages, "messages", true);
    if (!r.error.empty()) r.messages.clear();
    return r;
  }
  auto prompt = record.find("prompt"), completion = record.find("completion");
  if (prompt == record.end() || completion == record.end()) {
    r.error = fmt::format("neither \"messages\" nor \"prompt\" and \"completion\"; the record's keys are {}",
                          describe_json_keys(record));
    return r;
  }
  if (!prompt->is_string() || !completion->is_string()) {
    r.error = fmt::format("\"prompt\" and \"completion\" must be strings (got {} and {})", describe_json_type(*prompt),
                          describe_json_type(*completion));
    return r;
  }
  r.prompt = prompt->get<std::string>();
  r.completion = completion->get<std::string>();
  if (r.completion.empty()) r.error = "an empty \"completion\" (nothing to learn)";
  return r;
}

SftEncoder::SftEncoder(const Tokenizer& tokenizer, ChatTemplate tmpl, bool append_eod)
    : tokenizer_(tokenizer), tmpl_(std::move(tmpl)), append_eod_(append_eod) {
  for (const std::string& special : tmpl_.special_tokens())
    if (tokenizer_.encode(special, SpecialTokens::recognise).size() != 1)
      fail("--chat-template {}: the tokenizer ({}) has no token {} (it cannot express the template); use a "
           "tokenizer with the template's special tokens, or --chat-template plain",
           tmpl_.name, tokenizer_.name(), special);
}

void SftEncoder::append(SftExample& ex, std::string_view text, uint8_t learned, SpecialTokens special) const {
  if (text.empty()) return;
  const std::vector<int32_t> ids = tokenizer_.encode(text, special);
  ex.tokens.insert(ex.tokens.end(), ids.begin(), ids.end());
  ex.loss_mask.insert(ex.loss_mask.end(), ids.size(), learned);
}

SftExample SftEncoder::encode(const SftRecord& r) const {
  CLAW_CHECK(r.error.empty(), "encoding an unusable SFT record: {}", r.error);
  SftExample ex;
  bool ends_learned = true;
  if (r.messages.empty()) {
    // Corpus text: special-token strings stay text, as in pretraining data.
    append(ex, r.prompt, 0, SpecialTokens::as_text);
    append(ex, r.completion, 1, SpecialTokens::as_text);
  } else {
    // The rendered text, cut where the assistant replies begin and end.
    std::string done;  // the part of the conversation's text already tokenized
    std::vector<ChatMessage> upto;
    for (const ChatMessage& m : r.messages) {
      if (m.role == "assistant") {
        const std::string prompt = tmpl_.render(upto, true);
        upto.push_back(m);
        const std::string through = tmpl_.render(upto, false);
        if (!prompt.starts_with(done) || !through.starts_with(prompt))
          fail("chat template {}: a turn does not continue the text before it; SFT cannot place its loss mask",
               tmpl_.name);
        append(ex, std::string_view(prompt).substr(done.size()), 0, SpecialTokens::recognise);
        append(ex, std::string_view(through).substr(prompt.size()), 1, SpecialTokens::recognise);
        done = through;
      } else {
        upto.push_back(m);
      }
    }
    const std::string all = tmpl_.render(upto, false);
    CLAW_CHECK(all.starts_with(done), "chat template {} renders a conversation unlike its turns", tmpl_.name);
    append(ex, std::string_view(all).substr(done.size()), 0, SpecialTokens::recognise);
    ends_learned = r.messages.back().role == "assistant";
  }
  if (append_eod_) {
    ex.tokens.push_back(tokenizer_.eod());
    ex.loss_mask.push_back(ends_learned ? 1 : 0);
  }
  return ex;
}

}  // namespace claw::data
