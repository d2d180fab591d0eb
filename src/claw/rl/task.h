// Prompts with verifiable answers, and the built-in checkers that score a
// reply against them.
//
// A prompt file is JSONL, one prompt a line, in either form
//   {"messages": [..., {"role": "user", ...}, {"role": "assistant", "content": ANSWER}]}
//       a conversation (scripts/sft_task.py writes these): the messages
//       before the last assistant turn are the prompt, that turn the answer;
//   {"prompt": "...", "answer": "..."}
//       plain text.
// so the file a task's SFT data came from also feeds its RL stage.
//
// Built-in tasks (--task), each reward in [0, 1] and 1 only for an exact
// answer:
//   reverse, sort   the reply's words against the answer's, position by
//                   position: matches / max(count of either) (partial credit
//                   for a small model; 1 iff the word lists are equal)
//   add             1 if the reply is the answer's integer, else 0
// A reply is compared up to the template's stop text, trimmed of spaces.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "claw/data/chat_template.h"

namespace claw::rl {

enum class Task { reverse, sort, add };
Task parse_task(const std::string& name);  // throws naming --task
std::vector<std::string> task_names();

struct RlPrompt {
  std::vector<data::ChatMessage> messages;  // a conversation up to the reply, or empty (text)
  std::string text;                          // plain-text prompt
  std::string answer;
};

// Every line of `path`; throws naming the file and line of the first
// unusable one (not JSON, no answer, an unknown role, an answer `task`
// cannot check: add's is an integer).
std::vector<RlPrompt> read_prompts(const std::string& path, Task task);

// The text the model is prompted with: the conversation rendered with the
// template's generation prompt, or the plain text as it is.
std::string prompt_text(const RlPrompt& p, const data::ChatTemplate& tmpl);

// The reply as the checker reads it: cut at the first of `stops`, trimmed.
std::string reply_text(std::string_view generated, const std::vector<std::string>& stops);

// The reward of `reply` (reply_text) for `answer`.
double task_reward(Task task, std::string_view reply, std::string_view answer);

}  // namespace claw::rl
