#include "claw/data/chat_template.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "claw/core/error.h"

namespace claw::data {

std::vector<std::string> chat_template_names() { return {"llama3", "chatml", "plain"}; }

std::string default_chat_template(int64_t vocab_size) {
  if (vocab_size >= 128000 && vocab_size <= 128512) return "llama3";
  if (vocab_size == 50257) return "plain";
  return "chatml";
}

ChatTemplate chat_template(const std::string& name) {
  for (const std::string& n : chat_template_names())
    if (n == name) return {name};
  fail("--chat-template '{}' is not one of {}", name, fmt::join(chat_template_names(), ", "));
}

std::string ChatTemplate::render(const std::vector<ChatMessage>& messages, bool add_generation_prompt) const {
  std::string out;
  if (name == "llama3") {
    out = "<|begin_of_text|>";
    for (const ChatMessage& m : messages)
      out += "<|start_header_id|>" + m.role + "<|end_header_id|>\n\n" + m.content + "<|eot_id|>";
    return add_generation_prompt ? out + "<|start_header_id|>assistant<|end_header_id|>\n\n" : out;
  }
  if (name == "chatml") {
    for (const ChatMessage& m : messages) out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
    return add_generation_prompt ? out + "<|im_start|>assistant\n" : out;
  }
  for (const ChatMessage& m : messages) {
    std::string role = m.role;
    if (!role.empty()) role[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(role[0])));
    out += role + ": " + m.content + "\n";
  }
  return add_generation_prompt ? out + "Assistant:" : out;
}

std::vector<std::string> ChatTemplate::special_tokens() const {
  if (name == "llama3") return {"<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"};
  if (name == "chatml") return {"<|im_start|>", "<|im_end|>"};
  return {};
}

std::vector<std::string> ChatTemplate::stop() const {
  if (name == "llama3") return {"<|eot_id|>"};
  if (name == "chatml") return {"<|im_end|>"};
  return {"\nUser:"};
}

}  // namespace claw::data
