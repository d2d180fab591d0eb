// Chat templates: a conversation as the text a chat model is trained on and
// prompted with (ending where the assistant's reply begins), and the text
// that ends a reply. Serving renders prompts with them; SFT renders whole
// conversations and learns the assistant turns (sft.h).
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

namespace claw::data {

struct ChatMessage {
  std::string role;  // system, user, assistant
  std::string content;
};

struct ChatTemplate {
  std::string name;
  // The messages, then (add_generation_prompt) the start of an assistant
  // turn: rendering messages[0, i) with it and messages[0, i] without it
  // differ by turn i's reply and the text that ends it.
  std::string render(const std::vector<ChatMessage>& messages, bool add_generation_prompt = true) const;
  std::vector<std::string> stop() const;
  // The special tokens the template writes (a tokenizer must have each as
  // one id, SpecialTokens::recognise, to express the template).
  std::vector<std::string> special_tokens() const;
};

// "llama3", "chatml" or "plain"; throws naming --chat-template otherwise.
ChatTemplate chat_template(const std::string& name);
std::vector<std::string> chat_template_names();
// The template a model speaks, guessed from its vocabulary: Llama 3's
// (128256, padded up to 128512) uses its own chat tokens; GPT-2's has none
// and gets "plain"; anything else ChatML.
std::string default_chat_template(int64_t vocab_size);

}  // namespace claw::data
