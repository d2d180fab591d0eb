#include "claw/serve/chat_template.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "claw/core/error.h"

namespace claw::serve {

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

std::string ChatTemplate::render(const std::vector<ChatMessage>& messages) const {
  std::string out;
  if (name == "llama3") {
    out = "<|begin_of_text|>";
    for (const ChatMessage& m : messages)
      out += "<|start_header_id|>" + m.role + "<|end_header_id|>\n\n" + m.content + "<|eot_id|>";
    return out + "<|start_header_id|>assistant<|end_header_id|>\n\n";
  }
  if (name == "chatml") {
    for (const ChatMessage& m : messages) out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
    return out + "<|im_start|>assistant\n";
  }
  for (const ChatMessage& m : messages) {
    std::string role = m.role;
    if (!role.empty()) role[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(role[0])));
    out += role + ": " + m.content + "\n";
  }
  return out + "Assistant:";
}

std::vector<std::string> ChatTemplate::stop() const {
  if (name == "llama3") return {"<|eot_id|>"};
  if (name == "chatml") return {"<|im_end|>"};
  return {"\nUser:"};
}

}  // namespace claw::serve
