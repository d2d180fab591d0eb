#include "claw/rl/task.h"

#include <algorithm>
#include <charconv>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "claw/core/error.h"
#include "claw/data/file_io.h"
#include "claw/data/json_line.h"
#include "claw/data/jsonl_record.h"
#include "claw/data/sft.h"

namespace claw::rl {

namespace {
const std::pair<const char*, Task> kTasks[] = {{"reverse", Task::reverse}, {"sort", Task::sort}, {"add", Task::add}};

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

std::vector<std::string_view> words(std::string_view s) {
  std::vector<std::string_view> out;
  size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
    const size_t b = i;
    while (i < s.size() && !std::isspace(static_cast<unsigned char>(s[i]))) ++i;
    if (i > b) out.push_back(s.substr(b, i - b));
  }
  return out;
}

// Why the line is unusable ("" when it is usable).
std::string parse_prompt(std::string_view line, RlPrompt& p) {
  nlohmann::json record;
  if (std::string e = data::parse_json_object(line, record); !e.empty()) return e;
  if (auto it = record.find("messages"); it != record.end()) {
    std::vector<data::ChatMessage> all;
    if (std::string e = data::parse_chat_messages(*it, all, "messages", true); !e.empty()) return e;
    // The answer: the last assistant turn; the prompt: what comes before it.
    size_t last = all.size();
    while (last > 0 && all[last - 1].role != "assistant") --last;
    p.answer = all[last - 1].content;
    p.messages.assign(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(last - 1));
    if (p.messages.empty()) return "\"messages\" has no turn before the assistant's answer";
    return "";
  }
  auto prompt = record.find("prompt"), answer = record.find("answer");
  if (prompt == record.end() || answer == record.end())
    return fmt::format("neither \"messages\" nor \"prompt\" and \"answer\"; the record's keys are {}",
                       data::describe_json_keys(record));
  if (!prompt->is_string() || !answer->is_string())
    return fmt::format("\"prompt\" and \"answer\" must be strings (got {} and {})", data::describe_json_type(*prompt),
                       data::describe_json_type(*answer));
  p.text = prompt->get<std::string>();
  p.answer = answer->get<std::string>();
  return "";
}
}  // namespace

Task parse_task(const std::string& name) {
  for (const auto& [n, t] : kTasks)
    if (name == n) return t;
  fail("--task {}: expected one of reverse, sort, add", name);
}

std::vector<std::string> task_names() {
  std::vector<std::string> v;
  for (const auto& [n, t] : kTasks) v.emplace_back(n);
  return v;
}

std::vector<RlPrompt> read_prompts(const std::string& path, Task task) {
  const std::string text = data::read_file(path, "prompt file");
  std::vector<RlPrompt> out;
  data::for_each_line(text, [&](int64_t line_no, std::string_view line) {
    if (data::is_blank_line(line)) return;
    RlPrompt p;
    if (std::string e = parse_prompt(line, p); !e.empty()) fail("{}:{}: {}", path, line_no, e);
    if (task == Task::add) {
      const std::string_view a = trim(p.answer);
      long long v = 0;
      const auto [end, ec] = std::from_chars(a.data(), a.data() + a.size(), v);
      if (ec != std::errc() || end != a.data() + a.size() || a.empty())
        fail("{}:{}: the answer \"{}\" is no integer, which --task add checks", path, line_no, p.answer);
    }
    out.push_back(std::move(p));
  });
  if (out.empty()) fail("{}: no prompts (one JSON object a line: \"messages\", or \"prompt\" and \"answer\")", path);
  return out;
}

std::string prompt_text(const RlPrompt& p, const data::ChatTemplate& tmpl) {
  return p.messages.empty() ? p.text : tmpl.render(p.messages, /*add_generation_prompt=*/true);
}

std::string reply_text(std::string_view generated, const std::vector<std::string>& stops) {
  size_t cut = generated.size();
  for (const std::string& s : stops)
    if (!s.empty()) cut = std::min(cut, generated.find(s));
  return std::string(trim(generated.substr(0, cut)));
}

double task_reward(Task task, std::string_view reply, std::string_view answer) {
  reply = trim(reply);
  answer = trim(answer);
  switch (task) {
    case Task::reverse:
    case Task::sort: {
      const auto got = words(reply), want = words(answer);
      const size_t n = std::max(got.size(), want.size());
      if (n == 0) return 1.0;
      size_t same = 0;
      for (size_t i = 0; i < std::min(got.size(), want.size()); ++i) same += got[i] == want[i];
      return static_cast<double>(same) / static_cast<double>(n);
    }
    case Task::add: {
      long long a = 0, b = 0;
      const auto [pa, ea] = std::from_chars(reply.data(), reply.data() + reply.size(), a);
      const auto [pb, eb] = std::from_chars(answer.data(), answer.data() + answer.size(), b);
      if (ea != std::errc() || pa != reply.data() + reply.size()) return 0.0;
      CLAW_CHECK(eb == std::errc() && pb == answer.data() + answer.size(), "the add task's answer {} is no integer "
                 "(read_prompts checks)", answer);
      return a == b ? 1.0 : 0.0;
    }
  }
  return 0.0;
}

}  // namespace claw::rl
