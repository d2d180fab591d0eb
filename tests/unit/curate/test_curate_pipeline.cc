// `claw curate`: the cleaner, PII redaction, the TOML pipeline, resuming,
// bad input.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "claw/curate/cleaner.h"
#include "claw/curate/pii.h"
#include "claw/curate/pipeline.h"
#include "claw/data/file_io.h"
#include "claw/data/zstd_stream.h"
#include "expect_error.h"
#include "temp_dir.h"

namespace claw::curate {

using data::read_file;
using data::path_exists;
using data::ZstdEncoder;
namespace {

using claw::testing::TempDir;
using json = nlohmann::json;

std::string run_stage(Stage& stage, std::string text, std::string* reason = nullptr, StageCounters* counters = nullptr) {
  Document doc;
  doc.text = std::move(text);
  StageCounters local;
  const std::string_view why = stage.process(doc, counters ? *counters : local);
  if (reason) *reason = std::string(why);
  return doc.text;
}

std::unique_ptr<Stage> stage_from(std::string_view toml_text,
                                  std::unique_ptr<Stage> (*make)(StageKeys&)) {
  static std::vector<std::unique_ptr<toml::table>> keep;  // StageKeys refers to the table while it is read
  keep.push_back(std::make_unique<toml::table>(toml::parse(toml_text)));
  StageKeys keys(*keep.back(), "test.toml [[stage]] 1");
  return make(keys);
}

TEST(CurateCleaner, RepairsMojibake) {
  EXPECT_EQ(fix_mojibake("donâ€™t"), "don’t");
  EXPECT_EQ(fix_mojibake("cafÃ©"), "café");
  EXPECT_EQ(fix_mojibake("naÃ¯ve rÃ©sumÃ©"), "naïve résumé");
  EXPECT_EQ(fix_mojibake("â€œquotedâ€\xc2\x9d"), "“quoted”");  // 0x9D, a hole in Windows-1252, decodes to U+009D
  // Text that only looks like it: a lone accented capital stays.
  EXPECT_EQ(fix_mojibake("Ã la carte"), "Ã la carte");
  EXPECT_EQ(fix_mojibake("déjà vu — ok"), "déjà vu — ok");
}

TEST(CurateCleaner, ControlsWhitespaceAndNormalisation) {
  EXPECT_EQ(remove_control_chars("a\x01" "b\x7f\tc\n\xef\xbb\xbf" "d\xc2\x85"), "ab\tc\nd");
  EXPECT_EQ(normalize_whitespace("  a \t b  \r\nc   \n\n\n\nd\xc2\xa0\xc2\xa0" "e  "), "a b\nc\n\nd e");
  EXPECT_EQ(normalize_unicode("e\xcc\x81", "NFC"), "\xc3\xa9");              // e + combining acute -> é
  EXPECT_EQ(normalize_unicode("\xef\xac\x81" "x", "NFKC"), "fix");           // the ﬁ ligature
  EXPECT_EQ(normalize_unicode("\xef\xac\x81", "NFC"), "\xef\xac\x81");
}

TEST(CurateCleaner, StageCountsAndRemovesEmpty) {
  auto s = stage_from("normalization = \"NFKC\"", make_cleaner);
  StageCounters c;
  std::string reason;
  EXPECT_EQ(run_stage(*s, " cafÃ©\x01  ok ", &reason, &c), "café ok");
  EXPECT_EQ(reason, "");
  EXPECT_EQ(c.counts["mojibake_fixed"], 1);
  EXPECT_EQ(c.counts["control_removed"], 1);
  EXPECT_EQ(c.counts["whitespace_fixed"], 1);
  EXPECT_EQ(run_stage(*s, " \t\n ", &reason), "");
  EXPECT_EQ(reason, "empty_after_cleaning");
  EXPECT_CLAW_ERROR(stage_from("normalization = \"NFD\"", make_cleaner), "test.toml [[stage]] 1", "NFD", "NFKC");
  EXPECT_CLAW_ERROR(stage_from("normalise = true", make_cleaner), "unknown key 'normalise'", "normalization");
  EXPECT_CLAW_ERROR(stage_from("fix_mojibake = 1", make_cleaner), "fix_mojibake", "true or false");
}

TEST(CurateRedactor, EachKind) {
  auto s = stage_from("", make_pii_redactor);
  StageCounters c;
  EXPECT_EQ(run_stage(*s, "Mail jane.o'neil+x@mail.example.co.uk, or bob@x.io.", nullptr, &c),
            "Mail jane.o'<EMAIL_ADDRESS>, or <EMAIL_ADDRESS>.");
  EXPECT_EQ(run_stage(*s, "hosts 10.0.0.1 and 2001:db8::ff00:42:8329; not 999.1.1.1 or 1.2.3", nullptr, &c),
            "hosts <IP_ADDRESS> and <IP_ADDRESS>; not 999.1.1.1 or 1.2.3");
  EXPECT_EQ(run_stage(*s, "call +1 (555) 123-4567 or 555.123.4567, +44 20 7946 0958; in 1998-2001 we had 12,000,000",
                      nullptr, &c),
            "call <PHONE_NUMBER> or <PHONE_NUMBER>, <PHONE_NUMBER>; in 1998-2001 we had 12,000,000");
  EXPECT_EQ(run_stage(*s, "card 4111 1111 1111 1111, 5500-0000-0000-0004, 4012888888881881; not 4111 1111 1111 1112",
                      nullptr, &c),
            "card <CREDIT_CARD>, <CREDIT_CARD>, <CREDIT_CARD>; not 4111 1111 1111 1112");
  EXPECT_EQ(run_stage(*s, "at 10:30:45 on 2024-01-02, version 3.11"), "at 10:30:45 on 2024-01-02, version 3.11");
  EXPECT_EQ(c.counts["email"], 2);
  EXPECT_EQ(c.counts["ip"], 2);
  EXPECT_EQ(c.counts["phone"], 3);
  EXPECT_EQ(c.counts["credit_card"], 3);
  auto custom = stage_from("email_token = \"[email]\"\nphone = false", make_pii_redactor);
  EXPECT_EQ(run_stage(*custom, "a@b.com 555-123-4567"), "[email] 555-123-4567");
}

TEST(CurateRedactor, Luhn) {
  EXPECT_TRUE(luhn_valid("79927398713"));
  EXPECT_FALSE(luhn_valid("79927398710"));
  EXPECT_TRUE(luhn_valid("4111-1111-1111-1111"));
}

// ---- the pipeline ---------------------------------------------------------

void write(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

std::vector<json> read_jsonl(const std::string& path) {
  std::vector<json> out;
  std::istringstream in(read_file(path, "test output"));
  for (std::string line; std::getline(in, line);) out.push_back(json::parse(line));
  return out;
}

CurateConfig config(const TempDir& d, const std::string& stages, const std::string& input = "in.jsonl") {
  return parse_curate_config(fmt::format("[input]\npaths = [\"{}\"]\n[output]\ndir = \"{}\"\ncompression = \"none\"\n{}",
                                         d / input, d / "out", stages),
                             "p.toml");
}

TEST(CuratePipeline, KeepsRemovesAndRewrites) {
  TempDir d;
  write(d / "in.jsonl",
        "{\"id\": \"a\", \"text\": \"  Mail me: a@b.com \", \"meta\": 1}\n"
        "\n"
        "{\"id\": 7, \"text\": \"unchanged text\"}\n"
        "{\"text\": \"unchanged text\"}\n"
        "{\"id\": \"e\", \"text\": \" \\t \"}\n");
  const CurateConfig c = config(d, "[[stage]]\nkind = \"clean\"\n[[stage]]\nkind = \"pii\"\n[[stage]]\nkind = \"exact_dedup\"\n");
  CurateOptions o;
  o.threads = 2;
  o.chunk_bytes = 16;  // many chunks: order must not depend on the threads
  const CurateStats st = run_curate(c, o);
  EXPECT_EQ(st.docs_in, 4);
  EXPECT_EQ(st.blank_lines, 1);
  EXPECT_EQ(st.docs_out, 2);
  const auto kept = read_jsonl(d / "out/shard_00000.jsonl");
  ASSERT_EQ(kept.size(), 2u);
  EXPECT_EQ(kept[0]["text"], "Mail me: <EMAIL_ADDRESS>");
  EXPECT_EQ(kept[0]["meta"], 1);  // other fields kept
  EXPECT_EQ(kept[1]["id"], 7);
  const auto empty = read_jsonl(d / "out/removed/shard_00000.jsonl");
  ASSERT_EQ(empty.size(), 1u);
  EXPECT_EQ(empty[0]["curate"]["stage"], "clean");
  EXPECT_EQ(empty[0]["curate"]["reason"], "empty_after_cleaning");
  const auto dups = read_jsonl(d / "out/removed/segment_1_shard_00000.jsonl");
  ASSERT_EQ(dups.size(), 1u);
  EXPECT_EQ(dups[0]["curate"]["reason"], "duplicate");
  EXPECT_EQ(dups[0]["curate"]["duplicate_of"], "7");  // the first copy, by its id
  EXPECT_EQ(st.stages[1].counts.at("email"), 1);
}

TEST(CuratePipeline, ResumesAndMatchesAnUninterruptedRun) {
  TempDir d;
  std::filesystem::create_directories(d / "in");
  for (int f = 0; f < 3; ++f) {
    std::string lines;
    for (int i = 0; i < 50; ++i)
      lines += json{{"id", fmt::format("{}-{}", f, i)}, {"text", fmt::format("doc {} words {}", i % 7, f)}}.dump() + "\n";
    write(d / fmt::format("in/part{}.jsonl", f), lines);
  }
  const std::string stages = "[[stage]]\nkind = \"exact_dedup\"\n[[stage]]\nkind = \"pii\"\n";
  const CurateConfig c = config(d, stages, "in");
  CurateOptions o;
  run_curate(c, o);
  const std::string whole = read_file(d / "out/shard_00002.jsonl", "out");
  // Lose shard 2 and the deduplicator's result, as a run killed there would.
  std::filesystem::remove(d / "out/shard_00002.jsonl");
  std::filesystem::remove(d / "out/stats/segment_1_shard_00002.json");
  std::filesystem::remove(d / "out/stats/segment_0_shard_00002.json");
  std::filesystem::remove_all(d / "out/work/dedup_0.json");
  const CurateStats st = run_curate(c, o);
  EXPECT_EQ(st.shards_resumed, 2);
  EXPECT_EQ(read_file(d / "out/shard_00002.jsonl", "out"), whole);
  EXPECT_EQ(st.docs_out, 21);  // 7 distinct texts per file, files differ
}

TEST(CuratePipeline, ParagraphDedupDropsRepeatedLines) {
  TempDir d;
  std::filesystem::create_directories(d / "in");
  write(d / "in/a.jsonl",
        json{{"id", "a0"}, {"text", "Cookie notice.\nThe budget passed.\nSubscribe now!"}}.dump() + "\n" +
            json{{"id", "a1"}, {"text", "cookie   NOTICE.\nRain tomorrow.\n\n\nSubscribe now!"}}.dump() + "\n");
  write(d / "in/b.jsonl",
        json{{"id", "b0"}, {"text", "Subscribe now!\nCookie notice."}}.dump() + "\n" +
            json{{"id", "b1"}, {"text", "A story.\nok\nA story.\nok"}}.dump() + "\n");
  const std::string stages = "[[stage]]\nkind = \"paragraph_dedup\"\nmin_chars = 3\n[[stage]]\nkind = \"pii\"\n";
  const CurateConfig c = config(d, stages, "in");
  CurateOptions o;
  o.threads = 2;
  o.chunk_bytes = 16;
  const CurateStats st = run_curate(c, o);
  const auto a = read_jsonl(d / "out/shard_00000.jsonl"), b = read_jsonl(d / "out/shard_00001.jsonl");
  ASSERT_EQ(a.size(), 2u);
  EXPECT_EQ(a[0]["text"], "Cookie notice.\nThe budget passed.\nSubscribe now!");  // first occurrences stay
  EXPECT_EQ(a[1]["text"], "Rain tomorrow.\n\n");  // normalised repeat gone; blank lines never count
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(b[0]["text"], "A story.\nok\nok");  // a repeat inside one document; "ok" is under min_chars
  const auto removed = read_jsonl(d / "out/removed/segment_1_shard_00001.jsonl");
  ASSERT_EQ(removed.size(), 1u);
  EXPECT_EQ(removed[0]["id"], "b0");
  EXPECT_EQ(removed[0]["curate"]["reason"], "duplicate_paragraphs");
  EXPECT_EQ(st.docs_out, 3);
  EXPECT_EQ(st.stages[0].docs_in, 4);
  EXPECT_EQ(st.stages[0].docs_out, 3);
  EXPECT_EQ(st.stages[0].counts.at("paragraphs_removed"), 5);
  EXPECT_EQ(st.stages[0].counts.at("docs_edited"), 3);

  // One thread, and two array tasks and a merge run, give the same bytes;
  // so does a resumed run that lost the deduplicator's result.
  auto outputs = [&](const std::string& dir) {
    return read_file(dir + "/shard_00000.jsonl", "out") + read_file(dir + "/shard_00001.jsonl", "out") +
           read_file(dir + "/removed/segment_1_shard_00001.jsonl", "out");
  };
  const std::string want = outputs(d / "out");
  std::filesystem::remove_all(d / "out");
  o.threads = 1;
  run_curate(c, o);
  EXPECT_EQ(outputs(d / "out"), want);
  std::filesystem::remove_all(d / "out");
  for (int t = 0; t < 2; ++t) {
    CurateOptions task = o;
    task.num_tasks = 2, task.task_id = t;
    run_curate(c, task);
  }
  run_curate(c, o);
  EXPECT_EQ(outputs(d / "out"), want);
  std::filesystem::remove(d / "out/shard_00001.jsonl");
  std::filesystem::remove(d / "out/stats/segment_1_shard_00001.json");
  std::filesystem::remove(d / "out/work/dedup_0.json");
  run_curate(c, o);
  EXPECT_EQ(outputs(d / "out"), want);
}

TEST(CuratePipeline, BadInputNamesFileAndLine) {
  TempDir d;
  const CurateConfig c = config(d, "");
  CurateOptions o;
  write(d / "in.jsonl", "{\"text\": \"ok\"}\n{\"text\": \"bad \xff\"}\n");
  EXPECT_CLAW_ERROR(run_curate(c, o), "in.jsonl:2", "UTF-8", "--skip-bad-lines");
  write(d / "in.jsonl", "{\"text\": \"ok\"}\n{\"text\": \"x\"\n");
  EXPECT_CLAW_ERROR(run_curate(c, o), "in.jsonl:2", "malformed JSON");
  write(d / "in.jsonl", "{\"body\": \"ok\"}\n");
  EXPECT_CLAW_ERROR(run_curate(c, o), "in.jsonl:1", "no key \"text\"", "text_key");
  write(d / "in.jsonl", "");
  EXPECT_CLAW_ERROR(run_curate(c, o), "in.jsonl", "empty");
  EXPECT_FALSE(path_exists(d / "out/shard_00000.jsonl"));  // nothing half-written

  write(d / "in.jsonl", "{\"text\": \"ok\"}\n{\"text\": 5}\nnot json\n{\"text\": \"fine\"}\n");
  o.skip_bad_lines = true;
  const CurateStats st = run_curate(c, o);
  EXPECT_EQ(st.bad_lines, 2);
  EXPECT_EQ(st.docs_out, 2);
}

TEST(CuratePipeline, ConfigErrorsNameTheKey) {
  EXPECT_CLAW_ERROR(parse_curate_config("[input]\npaths=[\"x\"]\n[output]\ndir=\"o\"\n[[stage]]\nkind=\"gopher\"\n", "p.toml"),
                    "p.toml", "[[stage]] 1", "unknown kind \"gopher\"", "clean");
  EXPECT_CLAW_ERROR(parse_curate_config("[input]\npaths=[\"x\"]\n[output]\ndir=\"o\"\n[[stage]]\nkind=\"pii\"\nmail=true\n", "p.toml"),
                    "p.toml [[stage]] 1 (pii)", "unknown key 'mail'", "email");
  EXPECT_CLAW_ERROR(parse_curate_config("[input]\npaths=[\"x\"]\nformat=\"csv\"\n[output]\ndir=\"o\"\n", "p.toml"),
                    "p.toml [input]", "csv");
  EXPECT_CLAW_ERROR(parse_curate_config("[input]\npaths=[\"x\"]\n[outptu]\n", "p.toml"), "unknown key 'outptu'");
  EXPECT_CLAW_ERROR(parse_curate_config("[input\n", "p.toml"), "p.toml:1");
  EXPECT_CLAW_ERROR(run_curate(parse_curate_config("[input]\npaths=[\"/nonexistent/*.jsonl\"]\n[output]\ndir=\"/tmp/o\"\n",
                                                   "p.toml"),
                               CurateOptions{}),
                    "p.toml [input] paths", "/nonexistent/*.jsonl", "matches no file");
}

TEST(CuratePipeline, ReadsZstdInput) {
  TempDir d;
  std::string lines, compressed;
  for (int i = 0; i < 300; ++i) lines += json{{"id", i}, {"text", fmt::format("document {} of 300", i)}}.dump() + "\n";
  ZstdEncoder enc("in.jsonl.zst");
  enc.compress(lines, compressed);
  enc.finish(compressed);
  write(d / "in.jsonl.zst", compressed);
  const CurateStats st = run_curate(config(d, "", "in.jsonl.zst"), CurateOptions{});
  EXPECT_EQ(st.docs_in, 300);
  EXPECT_EQ(read_file(d / "out/shard_00000.jsonl", "out"), lines);  // unchanged records pass through byte for byte
}

TEST(CuratePipeline, TextDirectoriesAndZstdOutput) {
  TempDir d;
  std::filesystem::create_directories(d / "txt/sub");
  write(d / "txt/a.txt", "first document");
  write(d / "txt/sub/b.txt", "second document");
  write(d / "txt/skip.md", "not a .txt");
  const CurateConfig c = parse_curate_config(
      fmt::format("[input]\npaths=[\"{}\"]\nformat=\"text\"\n[output]\ndir=\"{}\"\n", d / "txt", d / "out"), "p.toml");
  const CurateStats st = run_curate(c, CurateOptions{});
  EXPECT_EQ(st.docs_out, 2);
  EXPECT_TRUE(path_exists(d / "out/shard_00000.jsonl.zst"));
}

}  // namespace
}  // namespace claw::curate
