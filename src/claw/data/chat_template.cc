#include "claw/data/chat_template.h"

#include <filesystem>
#include <fstream>
#include <iterator>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "claw/core/error.h"
#include "claw/data/hf_tokenizer.h"
#include "claw/data/jinja.h"

namespace claw::data {

std::vector<std::string> chat_template_names() { return {"llama3", "chatml", "plain"}; }

std::string default_chat_template(int64_t vocab_size) {
  if (vocab_size >= 128000 && vocab_size <= 128512) return "llama3";
  if (vocab_size == 50257) return "plain";
  return "chatml";
}

ChatTemplate chat_template(const std::string& name) {
  for (const std::string& n : chat_template_names())
    if (n == name) return {name};
  if (name.ends_with(".jinja") || std::filesystem::is_regular_file(name)) {
    std::ifstream f(name, std::ios::binary);
    if (!f) fail("--chat-template {}: cannot read the file", name);
    const std::string source((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    ChatTemplate t{name};
    t.jinja = std::make_shared<const jinja::Template>(source, name);
    return t;
  }
  fail("--chat-template '{}' is not one of {}, nor a Jinja template file (FILE.jinja)", name,
       fmt::join(chat_template_names(), ", "));
}

ChatTemplate jinja_chat_template(const std::string& source, const std::string& name) {
  ChatTemplate t{name};
  t.jinja = std::make_shared<const jinja::Template>(source, name);
  return t;
}

ChatTemplate chat_template_for(const Tokenizer& tok, const std::string& name) {
  const auto* hf = dynamic_cast<const HfTokenizer*>(&tok);
  ChatTemplate t;
  if (!name.empty())
    t = chat_template(name);
  else if (hf != nullptr && !hf->chat_template().empty())
    t = jinja_chat_template(hf->chat_template(), hf->chat_template_file());
  else
    t = chat_template(default_chat_template(tok.vocab_size()));
  t.use_tokens_of(tok, hf != nullptr ? hf->bos() : -1);
  return t;
}

void ChatTemplate::use_tokens_of(const Tokenizer& tok, int32_t bos) {
  const std::vector<int32_t> eod{tok.eod()};
  eos_token = tok.decode(eod);
  if (bos >= 0) bos_token = tok.decode(std::vector<int32_t>{bos});
}

std::string ChatTemplate::render(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                                 std::vector<std::pair<size_t, size_t>>* content) const {
  if (jinja) {
    nlohmann::ordered_json msgs = nlohmann::ordered_json::array();
    for (const ChatMessage& m : messages) msgs.push_back({{"role", m.role}, {"content", m.content}});
    const std::string text = jinja->render({{"messages", msgs},
                                            {"add_generation_prompt", add_generation_prompt},
                                            {"bos_token", bos_token},
                                            {"eos_token", eos_token}});
    if (content) {  // each message's content where it first appears after the previous one's
      size_t at = 0;
      for (const ChatMessage& m : messages) {
        const size_t found = m.content.empty() ? std::string::npos : text.find(m.content, at);
        if (found == std::string::npos) continue;
        content->emplace_back(found, found + m.content.size());
        at = found + m.content.size();
      }
    }
    return text;
  }
  std::string out;
  auto put = [&](const std::string& text) {
    if (content) content->emplace_back(out.size(), out.size() + text.size());
    out += text;
  };
  if (name == "llama3") {
    out = "<|begin_of_text|>";
    for (const ChatMessage& m : messages) {
      out += "<|start_header_id|>" + m.role + "<|end_header_id|>\n\n";
      put(m.content);
      out += "<|eot_id|>";
    }
    return add_generation_prompt ? out + "<|start_header_id|>assistant<|end_header_id|>\n\n" : out;
  }
  if (name == "chatml") {
    for (const ChatMessage& m : messages) {
      out += "<|im_start|>" + m.role + "\n";
      put(m.content);
      out += "<|im_end|>\n";
    }
    return add_generation_prompt ? out + "<|im_start|>assistant\n" : out;
  }
  for (const ChatMessage& m : messages) {
    std::string role = m.role;
    if (!role.empty()) role[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(role[0])));
    out += role + ": ";
    put(m.content);
    out += "\n";
  }
  return add_generation_prompt ? out + "Assistant:" : out;
}

std::vector<int32_t> ChatTemplate::encode(const Tokenizer& tok, const std::vector<ChatMessage>& messages,
                                          bool add_generation_prompt, bool content_as_text) const {
  std::vector<std::pair<size_t, size_t>> content;
  const std::string text = render(messages, add_generation_prompt, &content);
  if (!content_as_text) return tok.encode(text, SpecialTokens::recognise);
  if (jinja) {
    // The whole text with special tokens recognised (as transformers
    // tokenizes a rendered template), unless a message's content holds
    // special-token text: then cut at that content's ends, encoding it as
    // text (BPE merges across those two cuts are the price).
    auto forged = [&](const std::pair<size_t, size_t>& span) {
      const std::string_view c = std::string_view(text).substr(span.first, span.second - span.first);
      return tok.encode(c, SpecialTokens::recognise) != tok.encode(c, SpecialTokens::as_text);
    };
    std::vector<int32_t> out;
    size_t pos = 0;
    auto add = [&](size_t from, size_t to, SpecialTokens s) {
      const std::vector<int32_t> ids = tok.encode(std::string_view(text).substr(from, to - from), s);
      out.insert(out.end(), ids.begin(), ids.end());
    };
    for (const auto& span : content) {
      if (!forged(span)) continue;
      add(pos, span.first, SpecialTokens::recognise);
      add(span.first, span.second, SpecialTokens::as_text);
      pos = span.second;
    }
    add(pos, text.size(), SpecialTokens::recognise);
    return out;
  }
  // Cut at the template's special tokens outside the contents (leftmost,
  // then longest); what lies between is text. The same ids as recognise
  // when the contents hold no special-token text: that encoding, too,
  // encodes the runs between special tokens on their own.
  const std::vector<std::string> specials = special_tokens();
  auto in_content = [&](size_t at) {
    for (const auto& [b, e] : content)
      if (at >= b && at < e) return true;
    return false;
  };
  std::vector<int32_t> out;
  size_t pos = 0;
  for (size_t at = 0; at < text.size(); ++at) {
    if (in_content(at)) continue;
    const std::string* found = nullptr;
    for (const std::string& s : specials)
      if (std::string_view(text).substr(at).starts_with(s) && (!found || s.size() > found->size())) found = &s;
    if (!found) continue;
    const std::vector<int32_t> run = tok.encode(std::string_view(text).substr(pos, at - pos), SpecialTokens::as_text);
    out.insert(out.end(), run.begin(), run.end());
    const std::vector<int32_t> id = tok.encode(*found, SpecialTokens::recognise);
    out.insert(out.end(), id.begin(), id.end());
    pos = at + found->size();
    at = pos - 1;
  }
  const std::vector<int32_t> run = tok.encode(std::string_view(text).substr(pos), SpecialTokens::as_text);
  out.insert(out.end(), run.begin(), run.end());
  return out;
}

std::vector<std::string> ChatTemplate::special_tokens() const {
  if (jinja) return {};
  if (name == "llama3") return {"<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"};
  if (name == "chatml") return {"<|im_start|>", "<|im_end|>"};
  return {};
}

std::vector<std::string> ChatTemplate::stop() const {
  if (jinja) return {};  // generation ends at the model's end-of-text id
  if (name == "llama3") return {"<|eot_id|>"};
  if (name == "chatml") return {"<|im_end|>"};
  return {"\nUser:"};
}

}  // namespace claw::data
