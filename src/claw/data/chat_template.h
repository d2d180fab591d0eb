// Chat templates: a conversation as the prompt text a chat model was trained
// on, ending where the assistant's reply begins, and the text that ends a
// reply.
//
//   llama3   <|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>
//            <|start_header_id|>assistant<|end_header_id|>\n\n          (stop: <|eot_id|>)
//   chatml   <|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n     (stop: <|im_end|>)
//   plain    User: Hi\nAssistant:                                        (stop: \nUser:)
//            for models without chat tokens (GPT-2)
// Special-token text is encoded as the special ids where the tokenizer has
// them (SpecialTokens::recognise).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace claw::serve {

struct ChatMessage {
  std::string role;  // system, user, assistant
  std::string content;
};

struct ChatTemplate {
  std::string name;
  std::string render(const std::vector<ChatMessage>& messages) const;
  std::vector<std::string> stop() const;
};

// "llama3", "chatml" or "plain"; throws naming --chat-template otherwise.
ChatTemplate chat_template(const std::string& name);
std::vector<std::string> chat_template_names();
// The template a model speaks, guessed from its vocabulary: Llama 3's
// (128256, padded up to 128512) uses its own chat tokens; GPT-2's has none
// and gets "plain"; anything else ChatML.
std::string default_chat_template(int64_t vocab_size);

}  // namespace claw::serve
