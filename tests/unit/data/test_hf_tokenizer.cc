// tokenizer.json (data/hf_tokenizer.h) on small files written here: each
// stage's rules on inputs chosen to tell them apart, and one error line per
// malformed or unsupported field. The real vocabularies are compared with
// the tokenizers library by tests/e2e/tokenizer/hf_vs_tokenizers.py.
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "claw/data/gpt2_bpe.h"
#include "claw/data/hf_tokenizer.h"
#include "expect_error.h"
#include "temp_dir.h"

namespace claw::data {
namespace {

using json = nlohmann::json;
using Ids = std::vector<int32_t>;

// GPT-2's alphabet character for byte b (gpt2_bpe.h).
std::string alphabet(int b) {
  auto printable = [](int c) { return (c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE); };
  int cp = b;
  if (!printable(b)) {
    cp = 256;
    for (int c = 0; c < b; ++c) cp += !printable(c);
  }
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

// A byte-level file: the 256 bytes (id = byte), then merges "h e" -> 256,
// "he l" -> 257, "hel l" -> 258, "hell o" -> 259, "Ġ h" -> 260; added
// tokens from 261.
json byte_level_file() {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[alphabet(b)] = b;
  const std::string sp = alphabet(' ');
  vocab["he"] = 256;
  vocab["hel"] = 257;
  vocab["hell"] = 258;
  vocab["hello"] = 259;
  vocab[sp + "h"] = 260;
  return {{"version", "1.0"},
          {"added_tokens", json::array({{{"id", 261}, {"content", "<|end|>"}, {"special", true}, {"lstrip", false},
                                         {"rstrip", false}, {"single_word", false}, {"normalized", false}}})},
          {"normalizer", nullptr},
          {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
          {"post_processor", nullptr},
          {"decoder", {{"type", "ByteLevel"}}},
          {"model",
           {{"type", "BPE"},
            {"vocab", vocab},
            {"merges", json::array({"h e", "he l", "hel l", "hell o", sp + " h"})}}}};
}

HfTokenizer parse(const json& j) { return HfTokenizer::parse(j.dump(), "t/tokenizer.json", "<|end|>"); }

TEST(HfTokenizer, ByteLevelMergesAddedTokensAndRoundTrips) {
  const HfTokenizer t = parse(byte_level_file());
  EXPECT_EQ(t.mode(), "byte-level");
  EXPECT_EQ(t.eod(), 261);
  EXPECT_EQ(t.encode("hello"), (Ids{259}));
  EXPECT_EQ(t.encode("hello hello"), (Ids{259, ' ', 259}));  // " hello": "h e" ranks before "Ġ h"
  EXPECT_EQ(t.encode("hello<|end|>", SpecialTokens::recognise), (Ids{259, 261}));
  EXPECT_EQ(t.encode("<|end|>", SpecialTokens::as_text).size(), 7u);  // special tokens as text by default
  const std::string bytes = "caf\xc3\xa9 \xff\xfe\n";                  // any bytes, valid UTF-8 or not
  EXPECT_EQ(t.decode(t.encode(bytes)), bytes);
  EXPECT_EQ(t.decode(Ids{259, 261}), "hello<|end|>");
}

TEST(HfTokenizer, AddedTokenRules) {
  json f = byte_level_file();
  f["added_tokens"].push_back({{"id", 262}, {"content", "<L>"}, {"special", true}, {"lstrip", true}});
  f["added_tokens"].push_back({{"id", 263}, {"content", "<R>"}, {"special", true}, {"rstrip", true}});
  f["added_tokens"].push_back({{"id", 264}, {"content", "lo"}, {"special", false}, {"single_word", true},
                               {"normalized", false}});
  const HfTokenizer t = parse(f);
  const auto rec = SpecialTokens::recognise;
  EXPECT_EQ(t.encode("h  <L>", rec), (Ids{'h', 262}));         // lstrip takes the spaces before it
  EXPECT_EQ(t.encode("<R>  h", rec), (Ids{263, 'h'}));         // rstrip the spaces after it
  EXPECT_EQ(t.encode("a lo b", rec), (Ids{'a', ' ', 264, ' ', 'b'}));  // a word of its own: the added token
  EXPECT_EQ(t.encode("hello", rec), (Ids{259}));               // inside a word: not matched
  EXPECT_EQ(t.encode("a lo b", SpecialTokens::as_text), (Ids{'a', ' ', 264, ' ', 'b'}));  // non-special: always
}

// A character-level (SentencePiece-style) file: Llama 2's legacy shape.
json character_file() {
  json vocab = {{"<unk>", 0}, {"<s>", 1}, {"</s>", 2}};
  for (int b = 0; b < 256; ++b) vocab[fmt::format("<0x{:02X}>", b)] = 3 + b;
  int next = 259;
  for (const char* t : {"▁", "a", "b", "▁a", "ab", "▁ab", "é"}) vocab[t] = next++;
  return {{"added_tokens", json::array({{{"id", 0}, {"content", "<unk>"}, {"special", true}},
                                        {{"id", 1}, {"content", "<s>"}, {"special", true}},
                                        {{"id", 2}, {"content", "</s>"}, {"special", true}}})},
          {"normalizer",
           {{"type", "Sequence"},
            {"normalizers", json::array({{{"type", "Prepend"}, {"prepend", "▁"}},
                                         {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "▁"}}})}}},
          {"pre_tokenizer", nullptr},
          {"post_processor",
           {{"type", "TemplateProcessing"},
            {"single", json::array({{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
                                    {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
            {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {1}}, {"tokens", {"<s>"}}}}}}}},
          {"decoder",
           {{"type", "Sequence"},
            {"decoders", json::array({{{"type", "Replace"}, {"pattern", {{"String", "▁"}}}, {"content", " "}},
                                      {{"type", "ByteFallback"}},
                                      {{"type", "Fuse"}},
                                      {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}})}}},
          {"model",
           {{"type", "BPE"}, {"unk_token", "<unk>"}, {"byte_fallback", true}, {"fuse_unk", true}, {"vocab", vocab},
            {"merges", json::array({"▁ a", "a b", "▁a b"})}}}};
}

TEST(HfTokenizer, CharacterModeByteFallbackAndPostProcessor) {
  const HfTokenizer t = HfTokenizer::parse(character_file().dump(), "t/tokenizer.json", "</s>");
  EXPECT_EQ(t.mode(), "character");
  const int32_t sp = 259, a = 260, b = 261, ab = 263, sp_ab = 264, e_acute = 265;
  EXPECT_EQ(t.encode("ab"), (Ids{sp_ab}));                      // Prepend ▁, then ▁a + b
  EXPECT_EQ(t.encode("ab ab"), (Ids{sp_ab, sp_ab}));
  EXPECT_EQ(t.encode("é"), (Ids{sp, e_acute}));                 // a character in the vocabulary
  EXPECT_EQ(t.encode("€"), (Ids{sp, 3 + 0xE2, 3 + 0x82, 3 + 0xAC}));  // one outside it: its bytes
  EXPECT_EQ(t.encode("ba"), (Ids{sp, b, a}));
  EXPECT_EQ(t.add_special_tokens(t.encode("ab")), (Ids{1, sp_ab}));
  EXPECT_EQ(t.decode(t.encode("ab €é")), "ab €é");              // the leading ▁ stripped, bytes joined
  (void)ab;
}

TEST(HfTokenizer, EveryBadFieldIsOneLineNamingIt) {
  const std::string src = "t/tokenizer.json";
  auto bad = [&](json j) { return HfTokenizer::parse(j.dump(), src, "<|end|>"); };
  EXPECT_CLAW_ERROR(HfTokenizer::parse("{\"model\": ", src, ""), "t/tokenizer.json", "not valid JSON");
  EXPECT_CLAW_ERROR(HfTokenizer::parse("[]", src, ""), "t/tokenizer.json", "JSON object");
  json f = byte_level_file();
  f["pre_tokenizer"] = {{"type", "BertPreTokenizer"}};
  EXPECT_CLAW_ERROR(bad(f), "t/tokenizer.json", "pre_tokenizer.type", "BertPreTokenizer", "not supported");
  f = byte_level_file();
  f["normalizer"] = {{"type", "Sequence"}, {"normalizers", json::array({{{"type", "Precompiled"}}})}};
  EXPECT_CLAW_ERROR(bad(f), "normalizer.normalizers[0].type", "Precompiled", "not supported");
  f = byte_level_file();
  f["model"]["type"] = "WordPiece";
  EXPECT_CLAW_ERROR(bad(f), "model.type", "WordPiece", "supported: BPE");
  f = byte_level_file();
  f["model"]["merges"].push_back("x zz");
  EXPECT_CLAW_ERROR(bad(f), "model.merges[5]", "\"x zz\"", "lacks");
  f = byte_level_file();
  f["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "(unclosed"}}}, {"behavior", "Isolated"}};
  EXPECT_CLAW_ERROR(bad(f), "pre_tokenizer", "(unclosed", "does not compile");
  f["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "a"}}}, {"behavior", "Sideways"}};
  EXPECT_CLAW_ERROR(bad(f), "pre_tokenizer.behavior", "Sideways");
  f = byte_level_file();
  f["decoder"] = {{"type", "WordPiece"}};
  EXPECT_CLAW_ERROR(bad(f), "decoder.type", "WordPiece");
  f = byte_level_file();
  f["post_processor"] = {{"type", "TemplateProcessing"},
                         {"single", json::array({{{"SpecialToken", {{"id", "<x>"}}}}, {{"Sequence", {{"id", "A"}}}}})},
                         {"special_tokens", json::object()}};
  EXPECT_CLAW_ERROR(bad(f), "post_processor.single[0]", "<x>");
  f = byte_level_file();
  f["model"]["dropout"] = 0.1;
  EXPECT_CLAW_ERROR(bad(f), "model.dropout");
  EXPECT_CLAW_ERROR(HfTokenizer::parse(byte_level_file().dump(), src, "<nope>"), "<nope>", "not in the vocabulary");
  claw::testing::TempDir dir;
  EXPECT_CLAW_ERROR(HfTokenizer::load(dir.path() + "/tokenizer.json"), "tokenizer.json");
}

TEST(HfTokenizer, DirectoryConfigBringsTemplateBosAndEos) {
  claw::testing::TempDir dir;
  json f = byte_level_file();
  f["added_tokens"].push_back({{"id", 262}, {"content", "<|begin|>"}, {"special", true}});
  {
    std::ofstream(dir.path() + "/tokenizer.json") << f.dump();
    std::ofstream(dir.path() + "/tokenizer_config.json")
        << json{{"bos_token", "<|begin|>"}, {"eos_token", {{"content", "<|end|>"}}}, {"chat_template", "{{ x }}"}}
               .dump();
  }
  const HfTokenizer t = HfTokenizer::load(hf_tokenizer_json(dir.path()));
  EXPECT_EQ(t.bos(), 262);
  EXPECT_EQ(t.eod(), 261);
  EXPECT_EQ(t.chat_template(), "{{ x }}");
  std::ofstream(dir.path() + "/tokenizer_config.json") << "{\"bos_token\": \"<|nope|>\", \"eos_token\": \"<|end|>\"}";
  EXPECT_CLAW_ERROR(HfTokenizer::load(dir.path() + "/tokenizer.json"), "tokenizer_config.json", "<|nope|>");
}

}  // namespace
}  // namespace claw::data
