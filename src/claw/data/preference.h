// Preference pairs for DPO: one JSONL line as two SFT examples (sft.h), the
// chosen and the rejected reply to one prompt.
//
// A line is one of
//   {"prompt": "...", "chosen": "...", "rejected": "..."}
//       plain text: prompt then reply, the loss on the reply;
//   {"prompt": [messages], "chosen": [messages] | "...", "rejected": ...}
//       a conversation and the assistant turns that continue it (a string:
//       one assistant message), rendered with a chat template;
//   {"chosen": [messages], "rejected": [messages]}
//       two whole conversations; the prompt is the messages they share from
//       the start (Hugging Face TRL's implicit-prompt form).
// Other fields are ignored. Each side must add an assistant turn, and the
// two replies must differ; roles and contents as SFT's.
//
// The loss mask of each side is SFT's (the assistant turns), minus the
// tokens both sides share from the start: those are the prompt (with any
// assistant turns in it) and would add the same log-probability to both
// sides, so they are context, and a side's count of learned tokens is its
// reply's.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "claw/data/sft.h"

namespace claw::data {

struct PreferenceRecord {
  SftRecord chosen, rejected;  // usable when error is empty
  std::string error;
};

// Parses one line (without its '\n').
PreferenceRecord parse_preference_line(std::string_view line);

struct PreferenceExample {
  SftExample chosen, rejected;
};

// r must be usable (r.error empty).
PreferenceExample encode_preference(const SftEncoder& encoder, const PreferenceRecord& r);

}  // namespace claw::data
