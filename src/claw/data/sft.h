// Supervised fine-tuning examples: one JSONL line as token ids and a loss
// mask (which tokens the model learns to predict).
//
// A line is one of
//   {"messages": [{"role": "system" | "user" | "assistant", "content": "..."}, ...]}
//       a conversation, rendered with a chat template (chat_template.h);
//       the loss is on the assistant turns only;
//   {"prompt": "...", "completion": "..."}
//       plain text, prompt then completion, the loss on the completion.
// Other fields are ignored. A conversation needs at least one assistant
// turn (else there is nothing to learn), roles among the three above and
// string contents; each failure is the line's reason, as jsonl_record.h's.
//
// The mask comes from the template itself, which keeps it right for
// templates without generation markers: for each assistant turn i, the
// conversation up to turn i rendered with the generation prompt (the text
// the model is given) and rendered through turn i without it (what it must
// write) differ by the reply and the text that ends it ("Hi<|eot_id|>",
// "Hi<|im_end|>\n", " Hi\n"); those characters are learned, everything else
// (system and user turns, role headers, the generation prompt) is context.
// Each span is tokenized on its own, with the template's special tokens
// recognised, so no token straddles a boundary of the mask. With
// append_eod the example ends in the tokenizer's eod, learned when the
// conversation ends with an assistant turn (where generation stops).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "claw/data/chat_template.h"
#include "claw/data/tokenizer.h"

namespace claw::data {

// Where a dataset's loss masks live: <prefix>_loss_mask.{bin,idx}, a u8
// dataset with the same sequence lengths as the tokens at <prefix>.
inline std::string sft_loss_mask_prefix(const std::string& prefix) { return prefix + "_loss_mask"; }

struct SftRecord {
  std::vector<ChatMessage> messages;  // a conversation, or empty for prompt/completion
  std::string prompt, completion;
  std::string error;  // empty when the line is usable; otherwise why not
};

// Parses one line (without its '\n').
SftRecord parse_sft_line(std::string_view line);
// Appends the messages of a JSON list ({"role", "content"} objects, roles
// system/user/assistant) to `out`; returns why the list is unusable ("" when
// it is), naming `field` and the message's index.
std::string parse_chat_messages(const nlohmann::json& list, std::vector<ChatMessage>& out, std::string_view field,
                                bool need_assistant);

struct SftExample {
  std::vector<int32_t> tokens;
  std::vector<uint8_t> loss_mask;  // 1: learned (the loss covers predicting this token)
};

class SftEncoder {
 public:
  // Throws claw::Error naming --chat-template when the tokenizer has no
  // single id for one of the template's special tokens (it cannot express
  // the template).
  SftEncoder(const Tokenizer& tokenizer, ChatTemplate tmpl, bool append_eod);
  // r must be usable (r.error empty).
  SftExample encode(const SftRecord& r) const;
  const ChatTemplate& chat_template() const { return tmpl_; }

 private:
  void append(SftExample& ex, std::string_view text, uint8_t learned, SpecialTokens special) const;
  const Tokenizer& tokenizer_;
  ChatTemplate tmpl_;
  bool append_eod_;
};

}  // namespace claw::data
