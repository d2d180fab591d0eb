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
// them (SpecialTokens::recognise); ChatTemplate::encode can keep the
// messages' own text out of that.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "claw/data/tokenizer.h"

namespace claw::data {

struct ChatMessage {
  std::string role;  // system, user, assistant
  std::string content;
};

namespace jinja {
class Template;
}

struct ChatTemplate {
  std::string name;  // a built-in name, or the path of a Jinja template
  // A Jinja template (FILE.jinja, a model's tokenizer_config.json or GGUF
  // template): rendered with messages, add_generation_prompt, bos_token and
  // eos_token (set by use_tokens_of).
  std::shared_ptr<const jinja::Template> jinja;
  std::string bos_token, eos_token;
  // bos_token and eos_token of a Jinja template from the tokenizer: its
  // end-of-text token's text (eos), and `bos` when given.
  void use_tokens_of(const Tokenizer& tok, int32_t bos = -1);
  // The messages, then (add_generation_prompt) the start of an assistant
  // turn: rendering messages[0, i) with it and messages[0, i] without it
  // differ by turn i's reply and the text that ends it.
  // `content`, when given, receives where each message's content lies in
  // the text ([begin, end) byte offsets).
  std::string render(const std::vector<ChatMessage>& messages, bool add_generation_prompt = true,
                     std::vector<std::pair<size_t, size_t>>* content = nullptr) const;
  // The rendered messages as token ids, the template's own special tokens
  // as their ids. With content_as_text (what a server does with its users'
  // messages) special-token text inside a message's content is encoded as
  // the characters it is, so a user cannot forge a turn boundary or an end
  // of text; otherwise as the special ids, as encoding the rendered text
  // with SpecialTokens::recognise does.
  std::vector<int32_t> encode(const Tokenizer& tok, const std::vector<ChatMessage>& messages,
                              bool add_generation_prompt, bool content_as_text) const;
  std::vector<std::string> stop() const;
  // The special tokens the template writes (a tokenizer must have each as
  // one id, SpecialTokens::recognise, to express the template); none listed
  // for a Jinja template.
  std::vector<std::string> special_tokens() const;
};

// "llama3", "chatml", "plain", or the path of a Jinja template (FILE.jinja);
// throws naming --chat-template otherwise.
ChatTemplate chat_template(const std::string& name);
// A Jinja template given as its source (a model's own); `name` names it.
ChatTemplate jinja_chat_template(const std::string& source, const std::string& name);
std::vector<std::string> chat_template_names();
// The template to render for `tok`: `name` (a built-in or FILE.jinja) when
// given; else the tokenizer's own (a tokenizer.json directory's
// tokenizer_config.json template, with its bos_token); else
// default_chat_template(tok.vocab_size()). bos_token/eos_token are set.
ChatTemplate chat_template_for(const Tokenizer& tok, const std::string& name);
// The template a model speaks, guessed from its vocabulary: Llama 3's
// (128256, padded up to 128512) uses its own chat tokens; GPT-2's has none
// and gets "plain"; anything else ChatML.
std::string default_chat_template(int64_t vocab_size);

}  // namespace claw::data
