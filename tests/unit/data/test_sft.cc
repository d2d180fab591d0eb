// SFT examples: golden loss masks for each chat template (single and multi
// turn, with and without a system prompt, ending on a user turn), prompt /
// completion lines, and the lines and templates that are refused.
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "claw/data/gpt2_bpe.h"
#include "claw/data/sft.h"
#include "expect_error.h"

namespace claw::data {
namespace {

// One id per byte (0..255), then one per special token, then eod: the
// masks' boundaries show as exact text. A test double: the encoder's
// logic does not depend on how text becomes ids.
class ByteTokenizer final : public Tokenizer {
 public:
  explicit ByteTokenizer(std::vector<std::string> specials) : specials_(std::move(specials)) {}
  std::string decode(std::span<const int32_t> ids) const override {
    std::string out;
    for (int32_t id : ids)
      out += id < 256 ? std::string(1, static_cast<char>(id))
             : id == eod() ? std::string("<eod>")
                           : specials_[id - 256];
    return out;
  }
  int32_t vocab_size() const override { return 257 + static_cast<int32_t>(specials_.size()); }
  int32_t eod() const override { return 256 + static_cast<int32_t>(specials_.size()); }
  std::string name() const override { return "bytes"; }

 protected:
  std::vector<int32_t> encode_impl(std::string_view text, SpecialTokens special) const override {
    std::vector<int32_t> out;
    for (size_t i = 0; i < text.size();) {
      bool matched = false;
      for (size_t s = 0; special == SpecialTokens::recognise && s < specials_.size() && !matched; ++s)
        if (text.substr(i).starts_with(specials_[s])) {
          out.push_back(256 + static_cast<int32_t>(s));
          i += specials_[s].size();
          matched = true;
        }
      if (!matched) out.push_back(static_cast<unsigned char>(text[i++]));
    }
    return out;
  }

 private:
  std::vector<std::string> specials_;
};

const ByteTokenizer& chat_tokens() {
  static const ByteTokenizer t({"<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>",
                                "<|im_start|>", "<|im_end|>"});
  return t;
}

// The example as maximal runs of equal mask: (text, learned).
using Runs = std::vector<std::pair<std::string, int>>;
Runs runs(const Tokenizer& t, const SftExample& ex) {
  EXPECT_EQ(ex.tokens.size(), ex.loss_mask.size());
  Runs out;
  for (size_t i = 0; i < ex.tokens.size(); ++i) {
    const std::string text = t.decode(std::span<const int32_t>(&ex.tokens[i], 1));
    if (out.empty() || out.back().second != ex.loss_mask[i])
      out.push_back({text, ex.loss_mask[i]});
    else
      out.back().first += text;
  }
  return out;
}

Runs encode(const Tokenizer& t, const std::string& tmpl, const std::string& line) {
  const SftRecord r = parse_sft_line(line);
  EXPECT_EQ(r.error, "") << line;
  return runs(t, SftEncoder(t, chat_template(tmpl), true).encode(r));
}

const std::string kSingle = R"({"messages": [{"role": "user", "content": "Hi"},
                                             {"role": "assistant", "content": "Hello there"}]})";
const std::string kMulti = R"({"messages": [{"role": "system", "content": "Be brief."},
                                            {"role": "user", "content": "2+2?"},
                                            {"role": "assistant", "content": "4"},
                                            {"role": "user", "content": "3+3?"},
                                            {"role": "assistant", "content": "6"}]})";
const std::string kEndsOnUser = R"({"messages": [{"role": "user", "content": "a"},
                                                 {"role": "assistant", "content": "b"},
                                                 {"role": "user", "content": "c"}]})";

std::string one_line(std::string s) {
  std::erase(s, '\n');
  return s;
}

TEST(Sft, Llama3Masks) {
  const ByteTokenizer& t = chat_tokens();
  EXPECT_EQ(encode(t, "llama3", one_line(kSingle)),
            (Runs{{"<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
                   "<|start_header_id|>assistant<|end_header_id|>\n\n",
                   0},
                  {"Hello there<|eot_id|><eod>", 1}}));
  EXPECT_EQ(encode(t, "llama3", one_line(kMulti)),
            (Runs{{"<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
                   "<|start_header_id|>user<|end_header_id|>\n\n2+2?<|eot_id|>"
                   "<|start_header_id|>assistant<|end_header_id|>\n\n",
                   0},
                  {"4<|eot_id|>", 1},
                  {"<|start_header_id|>user<|end_header_id|>\n\n3+3?<|eot_id|>"
                   "<|start_header_id|>assistant<|end_header_id|>\n\n",
                   0},
                  {"6<|eot_id|><eod>", 1}}));
}

TEST(Sft, ChatmlMasks) {
  const ByteTokenizer& t = chat_tokens();
  EXPECT_EQ(encode(t, "chatml", one_line(kSingle)),
            (Runs{{"<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n", 0}, {"Hello there<|im_end|>\n<eod>", 1}}));
  EXPECT_EQ(encode(t, "chatml", one_line(kMulti)),
            (Runs{{"<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n2+2?<|im_end|>\n"
                   "<|im_start|>assistant\n",
                   0},
                  {"4<|im_end|>\n", 1},
                  {"<|im_start|>user\n3+3?<|im_end|>\n<|im_start|>assistant\n", 0},
                  {"6<|im_end|>\n<eod>", 1}}));
  // After the last reply, a user turn is context and the end is not learned.
  EXPECT_EQ(encode(t, "chatml", one_line(kEndsOnUser)),
            (Runs{{"<|im_start|>user\na<|im_end|>\n<|im_start|>assistant\n", 0},
                  {"b<|im_end|>\n", 1},
                  {"<|im_start|>user\nc<|im_end|>\n<eod>", 0}}));
}

TEST(Sft, PlainMasks) {
  const ByteTokenizer& t = chat_tokens();
  EXPECT_EQ(encode(t, "plain", one_line(kSingle)), (Runs{{"User: Hi\nAssistant:", 0}, {" Hello there\n<eod>", 1}}));
  EXPECT_EQ(encode(t, "plain", one_line(kMulti)),
            (Runs{{"System: Be brief.\nUser: 2+2?\nAssistant:", 0},
                  {" 4\n", 1},
                  {"User: 3+3?\nAssistant:", 0},
                  {" 6\n<eod>", 1}}));
}

TEST(Sft, PlainMasksWithGpt2Bpe) {
  // A real tokenizer: every span is encoded on its own, so the decoded runs
  // are still exactly the template's pieces.
  const Gpt2Bpe bpe = Gpt2Bpe::load(std::string(CLAW_DATA_DIR) + "/gpt2");
  EXPECT_EQ(encode(bpe, "plain", one_line(kMulti)),
            (Runs{{"System: Be brief.\nUser: 2+2?\nAssistant:", 0},
                  {" 4\n", 1},
                  {"User: 3+3?\nAssistant:", 0},
                  {" 6\n<|endoftext|>", 1}}));
}

TEST(Sft, PromptCompletion) {
  const ByteTokenizer& t = chat_tokens();
  // Plain text: special-token strings in it stay text.
  EXPECT_EQ(encode(t, "chatml", R"({"prompt": "Reverse: a b <|im_end|>\n", "completion": "c b a"})"),
            (Runs{{"Reverse: a b <|im_end|>\n", 0}, {"c b a<eod>", 1}}));
  const SftExample ex = SftEncoder(t, chat_template("plain"), true)
                            .encode(parse_sft_line(R"({"prompt": "<|im_end|>", "completion": "x"})"));
  EXPECT_EQ(ex.tokens.size(), std::string("<|im_end|>x").size() + 1);  // byte by byte, then eod
}

TEST(Sft, BadLinesSayWhy) {
  auto error = [](const std::string& line) { return parse_sft_line(line).error; };
  EXPECT_EQ(error(R"({"messages": [{"role": "user", "content": "Hi"}]})"),
            "a conversation without an assistant turn (nothing to learn)");
  EXPECT_EQ(error(R"({"messages": [{"role": "user", "content": "Hi"}, {"role": "tool", "content": "x"}]})"),
            "messages[1] has the unknown role \"tool\" (system, user or assistant)");
  EXPECT_EQ(error(R"({"messages": [{"role": "assistant", "content": 3}]})"),
            "messages[0] (assistant) has no string \"content\"");
  EXPECT_EQ(error(R"({"messages": []})"), "\"messages\" is an empty list");
  EXPECT_EQ(error(R"({"messages": "hi"})"), "\"messages\" holds a string, not a list of messages");
  EXPECT_EQ(error(R"({"text": "x"})"),
            "neither \"messages\" nor \"prompt\" and \"completion\"; the record's keys are \"text\"");
  EXPECT_EQ(error(R"({"prompt": "x", "completion": ""})"), "an empty \"completion\" (nothing to learn)");
  EXPECT_EQ(error("[1]"), "expected a JSON object, got an array");
  EXPECT_NE(error("{\"messages\": ["), "");
}

TEST(Sft, TemplateTheTokenizerCannotExpress) {
  const ByteTokenizer no_chat_tokens({});
  EXPECT_CLAW_ERROR(SftEncoder(no_chat_tokens, chat_template("llama3"), true), "--chat-template llama3",
                    "<|begin_of_text|>", "cannot express", "--chat-template plain");
  EXPECT_CLAW_ERROR(SftEncoder(no_chat_tokens, chat_template("chatml"), true), "--chat-template chatml", "<|im_start|>");
  SftEncoder(no_chat_tokens, chat_template("plain"), true);  // plain needs no special tokens
  EXPECT_CLAW_ERROR(chat_template("vicuna"), "--chat-template 'vicuna'", "llama3, chatml, plain");
}

}  // namespace
}  // namespace claw::data
