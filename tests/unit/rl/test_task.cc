// Built-in RL tasks (rl/task.h): the checkers' rewards, reply cutting, and
// prompt files with their errors.
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "claw/core/error.h"
#include "claw/rl/task.h"

namespace claw::rl {
namespace {

TEST(RlTask, WordCheckersGivePartialCreditAndOneOnlyWhenExact) {
  EXPECT_EQ(task_reward(Task::reverse, "tree sun cat", "tree sun cat"), 1.0);
  EXPECT_EQ(task_reward(Task::reverse, "  tree  sun cat ", "tree sun cat"), 1.0);
  EXPECT_DOUBLE_EQ(task_reward(Task::reverse, "tree cat sun", "tree sun cat"), 1.0 / 3);
  EXPECT_DOUBLE_EQ(task_reward(Task::reverse, "tree sun cat cat", "tree sun cat"), 3.0 / 4);
  EXPECT_DOUBLE_EQ(task_reward(Task::sort, "a b", "a b c d"), 2.0 / 4);
  EXPECT_EQ(task_reward(Task::sort, "", "a b"), 0.0);
}

TEST(RlTask, AddNeedsTheInteger) {
  EXPECT_EQ(task_reward(Task::add, "42", "42"), 1.0);
  EXPECT_EQ(task_reward(Task::add, " 42 ", "42"), 1.0);
  EXPECT_EQ(task_reward(Task::add, "41", "42"), 0.0);
  EXPECT_EQ(task_reward(Task::add, "42 apples", "42"), 0.0);
  EXPECT_EQ(task_reward(Task::add, "", "42"), 0.0);
}

TEST(RlTask, ReplyIsCutAtTheFirstStop) {
  EXPECT_EQ(reply_text(" tree sun cat\nUser: more", {"\nUser:"}), "tree sun cat");
  EXPECT_EQ(reply_text(" a b<|eot_id|>x\nUser:", {"\nUser:", "<|eot_id|>"}), "a b");
  EXPECT_EQ(reply_text(" a b", {}), "a b");
}

std::string error_of(const std::string& text, Task task = Task::reverse) {
  const std::string path = (std::filesystem::temp_directory_path() / "claw_rl_prompts.jsonl").string();
  std::ofstream(path) << text;
  try {
    read_prompts(path, task);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(RlTask, PromptFiles) {
  const std::string path = (std::filesystem::temp_directory_path() / "claw_rl_prompts_ok.jsonl").string();
  std::ofstream(path) << R"({"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Reverse: a b"}, {"role": "assistant", "content": "b a"}]})"
                      << "\n\n" << R"({"prompt": "Add: 1 + 2 =", "answer": "3"})" << "\n";
  const std::vector<RlPrompt> p = read_prompts(path, Task::reverse);
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(p[0].messages.size(), 2u);
  EXPECT_EQ(p[0].answer, "b a");
  EXPECT_EQ(prompt_text(p[0], data::chat_template("plain")), data::chat_template("plain").render(p[0].messages));
  EXPECT_EQ(p[1].text, "Add: 1 + 2 =");
  EXPECT_EQ(prompt_text(p[1], data::chat_template("plain")), "Add: 1 + 2 =");

  EXPECT_NE(error_of("{\"prompt\": \"x\"}\n").find("claw_rl_prompts.jsonl:1: neither"), std::string::npos);
  EXPECT_NE(error_of("{\"prompt\": \"x\", \"answer\": \"y\"}\nnot json\n").find(".jsonl:2: "), std::string::npos);
  EXPECT_NE(error_of(R"({"messages": [{"role": "user", "content": "hi"}]})").find("assistant"), std::string::npos);
  EXPECT_NE(error_of(R"({"messages": [{"role": "assistant", "content": "hi"}]})").find("no turn before"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"prompt": "1 + 1 =", "answer": "two"})", Task::add).find("\"two\" is no integer"),
            std::string::npos);
  EXPECT_NE(error_of("").find("no prompts"), std::string::npos);
  try {
    parse_task("count");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--task count: expected one of reverse, sort, add"), std::string::npos);
  }
}

}  // namespace
}  // namespace claw::rl
