// The heuristic filters of `claw curate` (curate/heuristic_filters.h) and
// their text primitives (curate/text_stats.h): each rule of each filter on
// hand-made documents on both sides of its threshold, with datatrove
// 0.10.1's semantics (Python str lengths and classes, spaCy's English
// tokenizer); keys read and checked. tests/e2e/curate/curate_vs_datatrove.py
// compares the filters with datatrove itself on a few thousand documents.
#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include <toml++/toml.h>

#include "claw/curate/heuristic_filters.h"
#include "claw/curate/text_stats.h"
#include "expect_error.h"

namespace claw::curate {
namespace {

namespace tx = claw::curate::text;

// ---------------------------------------------------------------------------
// Helpers

std::unique_ptr<Stage> make(std::string_view kind, std::string_view toml_text = "") {
  const toml::table table = toml::parse(toml_text);
  StageKeys keys(table, std::string("test [[stage]] (") + std::string(kind) + ")");
  if (kind == "gopher_quality") return make_gopher_quality(keys);
  if (kind == "gopher_repetition") return make_gopher_repetition(keys);
  if (kind == "c4_quality") return make_c4_quality(keys);
  return make_fineweb_quality(keys);
}

// "keep" or the reason.
std::string run(const Stage& stage, std::string text, std::string* kept_text = nullptr) {
  Document doc;
  doc.text = std::move(text);
  StageCounters counters;
  const std::string_view reason = stage.process(doc, counters);
  if (kept_text) *kept_text = doc.text;
  return reason.empty() ? "keep" : std::string(reason);
}

// Distinct lowercase words of 5 letters: word(0) = "aaaaa", word(1) = "baaaa".
std::string word(int i) {
  std::string w(5, 'a');
  for (int k = 0; k < 5; ++k, i /= 26) w[k] = static_cast<char>('a' + i % 26);
  return w;
}
// n distinct words from `first`, joined by `sep`.
std::string words(int n, int first = 100, std::string_view sep = " ") {
  std::string out;
  for (int i = 0; i < n; ++i) {
    if (i) out += sep;
    out += word(first + i);
  }
  return out;
}

std::vector<std::string> to_strings(const std::vector<std::string_view>& v) { return {v.begin(), v.end()}; }
std::vector<std::string> tokens(std::string_view text) {
  std::vector<std::string_view> out;
  tx::split_into_words(text, out);
  return to_strings(out);
}
using Strings = std::vector<std::string>;

// ---------------------------------------------------------------------------
// text_stats: Python str semantics

TEST(CurateText, SplitLinesIsPythonSplitlines) {
  std::vector<std::string_view> out;
  // "a\r\nb\rc\x0bd\x1ce\u2028f\x85g\n".splitlines() == ['a','b','c','d','e','f','g']
  tx::split_lines("a\r\nb\rc\x0b" "d\x1c" "e\u2028" "f\u0085g\n", out);
  EXPECT_EQ(to_strings(out), (Strings{"a", "b", "c", "d", "e", "f", "g"}));
  out.clear();
  tx::split_lines("\n\nx", out);  // ['', '', 'x']
  EXPECT_EQ(to_strings(out), (Strings{"", "", "x"}));
  out.clear();
  tx::split_lines("", out);
  EXPECT_TRUE(out.empty());
}

TEST(CurateText, StripSplitAndLengthPerCodePoint) {
  EXPECT_EQ(tx::strip("\u3000\u00a0 x y\t\u2009\n"), "x y");
  EXPECT_EQ(tx::strip("\u200bx\u200b"), "\u200bx\u200b");  // U+200B is not str.isspace
  std::vector<std::string_view> out;
  tx::split_whitespace(" a\u00a0b\u2003c  ", out);
  EXPECT_EQ(to_strings(out), (Strings{"a", "b", "c"}));
  EXPECT_EQ(tx::length("h\u00e9llo \u4e2d\U0001F600"), 8u);
  EXPECT_EQ(tx::count("a.....b...", "..."), 2u);  // non-overlapping, like str.count
  EXPECT_EQ(tx::count("\u2026\u2026", "\u2026"), 2u);
  EXPECT_TRUE(tx::py_isalpha(U'\u00e9'));
  EXPECT_TRUE(tx::py_isalpha(U'\u4e2d'));
  EXPECT_FALSE(tx::py_isalpha(U'1'));
  EXPECT_FALSE(tx::py_isalpha(U'\u0301'));  // a combining mark is Mn, not a letter
  EXPECT_TRUE(tx::is_datatrove_punctuation(U'\u2014'));
  EXPECT_TRUE(tx::is_datatrove_punctuation(U'\x7f'));
  EXPECT_FALSE(tx::is_datatrove_punctuation(U'a'));
  EXPECT_TRUE(tx::is_terminal_punctuation(U'\u3002'));
}

// ---------------------------------------------------------------------------
// text_stats: spaCy's English tokenizer and sentencizer (expected tokens are
// spacy.blank("en") 3.8's)

TEST(CurateText, WordsAreSpacyEnglishTokens) {
  EXPECT_EQ(tokens("I'm sure they don't, can't and won't."),
            (Strings{"I", "'m", "sure", "they", "do", "n't", ",", "ca", "n't", "and", "wo", "n't", "."}));
  EXPECT_EQ(tokens("Mr. Smith met U.S. officials (e.g. Dr. Lee) at 10a.m. today."),
            (Strings{"Mr.", "Smith", "met", "U.S.", "officials", "(", "e.g.", "Dr.", "Lee", ")", "at", "10", "a.m.",
                     "today", "."}));
  EXPECT_EQ(tokens("\"Hello,\" she said... It's 5km, US$20 or 3.5%!"),
            (Strings{"\"", "Hello", ",", "\"", "she", "said", "...", "It", "'s", "5", "km", ",", "US$", "20", "or",
                     "3.5", "%", "!"}));
  EXPECT_EQ(tokens("well-known 3-4 hello--world a.B see:this"),
            (Strings{"well", "-", "known", "3", "-", "4", "hello", "--", "world", "a.", "B", "see", ":", "this"}));
  EXPECT_EQ(tokens("Visit https://example.com/a-b?x=1, or www.site.org. Mail me@host.com :) <3"),
            (Strings{"Visit", "https://example.com/a-b?x=1", ",", "or", "www.site.org", ".", "Mail", "me@host.com",
                     ":)", "<3"}));
  EXPECT_EQ(tokens("  gonna\n\ncannot\u00a0dont  "), (Strings{"gon", "na", "can", "not", "do", "nt"}));
}

TEST(CurateText, SpacyWhitespaceTokens) {
  std::vector<tx::Token> out;
  tx::spacy_tokenize("  a  b\n c ", out);
  // spaCy: ['  ', 'a', ' ', 'b', '\n ', 'c']: a single ' ' after a token is
  // its trailing space, other whitespace runs are tokens.
  ASSERT_EQ(out.size(), 6u);
  EXPECT_EQ(out[0].text, "  ");
  EXPECT_TRUE(out[0].space);
  EXPECT_EQ(out[2].text, " ");
  EXPECT_EQ(out[4].text, "\n ");
  EXPECT_EQ(out[5].text, "c");
  EXPECT_FALSE(out[5].space);
}

TEST(CurateText, SentencesAreSpacySentencizer) {
  EXPECT_EQ(tx::count_sentences(""), 1u);  // datatrove's split_into_parts returns [text]
  EXPECT_EQ(tx::count_sentences("No end punctuation"), 1u);
  EXPECT_EQ(tx::count_sentences("One. Two! Three? Four"), 4u);
  EXPECT_EQ(tx::count_sentences("Wait... what?! Mr. Smith left."), 2u);  // "..." is not a punct char; "Mr." one token
  EXPECT_EQ(tx::count_sentences("ab. \n! cd"), 3u);  // the "\n" token after "." starts a sentence
  EXPECT_EQ(tx::count_sentences("b. \n! cd"), 2u);   // "b." is one token (a special case)
  std::vector<std::string_view> out;
  tx::split_into_sentences("First one.  Second one! Third", out);
  EXPECT_EQ(to_strings(out), (Strings{"First one.", "  Second one!", " Third"}));
}

TEST(CurateText, IllFormedUtf8NeverFails) {
  // Each ill-formed sequence is one U+FFFD for the classes; the tokens still
  // cover every byte that is not whitespace.
  const std::string bad = "ok \xff\xfe word\xc3 \xe2\x80(end).\n\xf0\x9f";
  std::string joined, expected;
  for (const std::string& t : tokens(bad)) joined += t;
  for (char c : bad)
    if (c != ' ' && c != '\n') expected += c;
  EXPECT_EQ(joined, expected);
  for (std::string_view kind : {"gopher_quality", "gopher_repetition", "c4_quality", "fineweb_quality"})
    EXPECT_NE(run(*make(kind), bad + "\n" + bad), "") << kind;
}

// ---------------------------------------------------------------------------
// gopher_quality

// "the and" + n - 2 distinct 5-letter words: n words, average 4.92 for 50.
std::string gopher_doc(int n) { return "the and " + words(n - 2); }

TEST(CurateGopherQuality, DefaultsKeepPlainProse) {
  const auto f = make("gopher_quality");
  EXPECT_EQ(f->kind(), "gopher_quality");
  EXPECT_EQ(run(*f, gopher_doc(50)), "keep");
}

TEST(CurateGopherQuality, WordCountBoundsCountOnlyNonSymbolWords) {
  const auto f = make("gopher_quality");
  EXPECT_EQ(run(*f, gopher_doc(49)), "gopher_short_doc");
  EXPECT_EQ(run(*f, gopher_doc(49) + " - , ... !"), "gopher_short_doc");  // punctuation tokens do not count
  const auto g = make("gopher_quality", "max_doc_words = 60");
  EXPECT_EQ(run(*g, gopher_doc(60)), "keep");
  EXPECT_EQ(run(*g, gopher_doc(61)), "gopher_long_doc");
  const auto off = make("gopher_quality", "min_doc_words = false\nmin_stop_words = 0");
  EXPECT_EQ(run(*off, "the and cat"), "keep");
  EXPECT_EQ(run(*off, ""), "gopher_short_doc");  // datatrove raises ZeroDivisionError here
}

TEST(CurateGopherQuality, AverageWordLengthInCodePoints) {
  const auto f = make("gopher_quality");
  // "the" "and" + 48 words of 3 letters: average exactly 3 (not below).
  std::string three = "the and";
  for (int i = 0; i < 48; ++i) three += " " + word(i).substr(0, 3);
  EXPECT_EQ(run(*f, three), "keep");
  EXPECT_EQ(run(*f, "the of" + three.substr(7)), "gopher_below_avg_threshold");  // "of": 2.98
  // 6 + 46 * 10 + 2 * 17 = 500 characters in 50 words: exactly 10.
  std::string ten = "the and";
  for (int i = 0; i < 46; ++i) ten += " " + word(i) + word(i + 1);
  ten += " " + std::string(17, 'x') + " " + std::string(17, 'y');
  EXPECT_EQ(run(*f, ten), "keep");
  EXPECT_EQ(run(*f, ten + "z"), "gopher_above_avg_threshold");
  // Five code points, ten bytes each word: average 5, not 10.
  const auto g = make("gopher_quality", "max_avg_word_length = 5");
  std::string accented = "the and";
  for (int i = 0; i < 48; ++i)
    accented += " \u00e9\u00e9\u00e9\u00e9" + std::string(1, static_cast<char>('a' + i % 26));
  EXPECT_EQ(run(*g, accented), "keep");
}

TEST(CurateGopherQuality, HashAndEllipsisPerWord) {
  const auto f = make("gopher_quality");
  // k hashtags "#word" (two tokens each) on 8k words: k / (8k + 2k) = 0.1 is not above.
  auto doc = [](int k, int plain) {
    std::string d = gopher_doc(plain);
    for (int i = 0; i < k; ++i) d += " #" + word(500 + i);
    return d;
  };
  EXPECT_EQ(run(*f, doc(7, 56)), "keep");  // 7 / 70
  EXPECT_EQ(run(*f, doc(8, 56)), "gopher_too_many_hashes");  // 8 / 72
  // "..." and "…" both count; each is a token of its own here.
  std::string e;
  for (int i = 0; i < 4; ++i) e += "so... and\u2026 ";  // 4 words each
  e += gopher_doc(64);
  EXPECT_EQ(run(*f, e), "keep");  // 8 / 80
  EXPECT_EQ(run(*f, "yes\u2026 " + e), "gopher_too_many_ellipsis");  // 9 / 82
}

TEST(CurateGopherQuality, BulletAndEllipsisLines) {
  const auto f = make("gopher_quality");
  auto lines = [](int bullets, int ellipses) {
    std::string d;
    for (int i = 0; i < 10; ++i) {
      if (i) d += "\n";
      if (i < bullets) d += (i % 2 ? "  \u2022 " : "- ");
      d += "the and " + words(10, 10 * i);
      d += i >= 10 - ellipses ? (i % 2 ? "\u2026" : "... ") : ".";
    }
    return d;
  };
  EXPECT_EQ(run(*f, lines(9, 0)), "keep");  // 0.9 is not above
  EXPECT_EQ(run(*f, lines(10, 0)), "gopher_too_many_bullets");
  EXPECT_EQ(run(*f, lines(0, 3)), "keep");  // 0.3
  EXPECT_EQ(run(*f, lines(0, 4)), "gopher_too_many_end_ellipsis");  // rstrip()ed lines end with them
}

TEST(CurateGopherQuality, AlphaWordsAndStopWords) {
  const auto f = make("gopher_quality");
  // 40 words with a letter and 10 numbers (not symbols: they count as
  // words): 0.8 is not below.
  std::string d = gopher_doc(40);
  for (int i = 0; i < 10; ++i) d += " " + std::to_string(1000 + i);
  EXPECT_EQ(run(*f, d), "keep");
  EXPECT_EQ(run(*f, d + " 12345"), "gopher_below_alpha_threshold");  // 40 / 51
  EXPECT_EQ(run(*f, d + " x1234"), "keep");  // one letter is enough: 41 / 51
  // Distinct stop words, case-sensitive: "the" twice and "The" are one.
  EXPECT_EQ(run(*f, "the the The " + words(47)), "gopher_enough_stop_words");
  EXPECT_EQ(run(*f, "the of " + words(48)), "keep");
  const auto g = make("gopher_quality", "stop_words = [\"baaaa\"]\nmin_stop_words = 1");
  EXPECT_EQ(run(*g, words(50, 1)), "keep");  // word(1) is "baaaa"
  EXPECT_EQ(run(*g, words(50, 2)), "gopher_enough_stop_words");
}

// ---------------------------------------------------------------------------
// gopher_repetition

TEST(CurateGopherRepetition, EmptyAndUnique) {
  const auto f = make("gopher_repetition");
  EXPECT_EQ(f->kind(), "gopher_repetition");
  EXPECT_EQ(run(*f, ""), "empty");
  EXPECT_EQ(run(*f, words(200)), "keep");
}

TEST(CurateGopherRepetition, DuplicateParagraphsAndLines) {
  const auto f = make("gopher_repetition");
  // 10 paragraphs, k of them a repeat of a short one.
  auto paragraphs = [](int dups, std::string_view sep) {
    std::string d = "Short one.";
    for (int i = 0; i < 10 - 1 - dups; ++i) d += std::string(sep) + words(30, 100 + 30 * i);
    for (int i = 0; i < dups; ++i) d += std::string(sep) + "Short one.";
    return d;
  };
  EXPECT_EQ(run(*f, paragraphs(3, "\n\n")), "keep");  // 3 / 10 is not above
  EXPECT_EQ(run(*f, paragraphs(4, "\n\n")), "dup_para_frac");
  EXPECT_EQ(run(*f, paragraphs(3, "\n")), "keep");
  EXPECT_EQ(run(*f, paragraphs(4, "\n")), "dup_line_frac");
  // re.split("\n+") of the unstripped text: leading and trailing newlines
  // make empty lines, and two of them are a duplicate.
  EXPECT_EQ(run(*f, "\n" + paragraphs(2, "\n") + "\n"), "keep");  // 3 / 11
  EXPECT_EQ(run(*f, "\n" + paragraphs(3, "\n") + "\n"), "dup_line_frac");  // 4 / 11
  // By characters: one long paragraph repeated once is 1 / 3 of the
  // paragraphs but most of the characters.
  const std::string big = words(100);
  EXPECT_EQ(run(*make("gopher_repetition", "dup_para_frac = false"), big + "\n\n" + big + "\n\nTail here."),
            "dup_para_char_frac");
  EXPECT_EQ(run(*make("gopher_repetition", "dup_line_frac = false"), big + "\n" + big + "\nTail here."),
            "dup_line_char_frac");
}

TEST(CurateGopherRepetition, TopNGramFirstSeenWinsTies) {
  // Top-n only, 2-grams: "aa bb" and "cccc dddd" both occur twice; Counter
  // order makes the first seen the top one: 5 * 2 = 10 characters.
  const std::string text = "aa bb x cccc dddd y aa bb z cccc dddd";  // 37 characters
  const auto f = make("gopher_repetition",
                      "top_n_grams = [[2, 0.28]]\ndup_n_grams = []\ndup_line_frac = false\ndup_para_frac = false");
  EXPECT_EQ(run(*f, text), "keep");  // 10 / 37 = 0.270 (18 / 37 if the longer one won)
  const auto g = make("gopher_repetition", "top_n_grams = [[2, 0.26]]\ndup_n_grams = []");
  EXPECT_EQ(run(*g, text), "top_2_gram");
  // Defaults: a bigram repeated through the text.
  std::string rep;
  for (int i = 0; i < 30; ++i) rep += "good times " + word(i) + " ";
  EXPECT_EQ(run(*make("gopher_repetition"), rep), "top_2_gram");
}

TEST(CurateGopherRepetition, DuplicatedNGramsJoinWithoutSpaces) {
  // find_all_duplicate joins with "": "ab"+"c" equals "a"+"bc".
  const auto f = make("gopher_repetition", "top_n_grams = []\ndup_n_grams = [[2, 0.3]]");
  EXPECT_EQ(run(*f, "ab c a bc"), "duplicated_2_n_grams");  // 3 / 9
  EXPECT_EQ(run(*f, "ab c a bd"), "keep");
  // A run of a repeated 5-gram, after the repeat the scan skips n words.
  const auto g = make("gopher_repetition", "top_n_grams = []");
  std::string d = words(60) + " ";
  for (int i = 0; i < 3; ++i) d += "one two three four five ";
  EXPECT_EQ(run(*g, d), "keep");  // 2 repeats * 19 / 432 = 0.088
  for (int i = 0; i < 2; ++i) d += "one two three four five ";
  EXPECT_EQ(run(*g, d), "duplicated_5_n_grams");  // 4 * 19 / 480 = 0.158
}

TEST(CurateGopherRepetition, NGramKeysAreChecked) {
  EXPECT_CLAW_ERROR(make("gopher_repetition", "top_n_grams = [[2, \"x\"]]"), "top_n_grams", "[integer, number]");
  EXPECT_CLAW_ERROR(make("gopher_repetition", "dup_n_grams = [[0, 0.1]]"), "dup_n_grams", "[1, 1000]");
  EXPECT_CLAW_ERROR(make("gopher_repetition", "top_n_grams = [\"2:0.2\"]"), "top_n_grams", "[[2, 0.2], [3, 0.18]]");
}

// ---------------------------------------------------------------------------
// c4_quality

// A line of `n` sentences of four words.
std::string c4_line(int n, int first = 0) {
  std::string out;
  for (int i = 0; i < n; ++i) out += (i ? " " : "") + words(3, first + 3 * i) + " end.";
  return out;
}

TEST(CurateC4Quality, SentenceCountAndRewrite) {
  const auto f = make("c4_quality");
  EXPECT_EQ(f->kind(), "c4_quality");
  EXPECT_EQ(run(*f, c4_line(4)), "too_few_sentences");
  std::string kept;
  EXPECT_EQ(run(*f, "  " + c4_line(2) + "  \nMenu\n" + c4_line(3, 50) + "\n", &kept), "keep");
  EXPECT_EQ(kept, c4_line(2) + "\n" + c4_line(3, 50));  // lines stripped, the menu line dropped
  EXPECT_EQ(run(*make("c4_quality", "min_num_sentences = -1"), "Hi."), "keep");
}

TEST(CurateC4Quality, LineRules) {
  const auto f = make("c4_quality");
  const std::string five = c4_line(5);
  auto kept_of = [&](const std::string& extra) {
    std::string kept;
    EXPECT_EQ(run(*f, five + "\n" + extra, &kept), "keep") << extra;
    return kept;
  };
  EXPECT_EQ(kept_of("No terminal punctuation here"), five);
  EXPECT_EQ(kept_of("It trails off..."), five);
  EXPECT_EQ(kept_of("Two words."), five);
  EXPECT_EQ(kept_of("Quoted words here\""), five + "\nQuoted words here\"");
  EXPECT_EQ(kept_of("Please enable JavaScript now."), five);
  EXPECT_EQ(kept_of("Read our Privacy Policy today."), five);
  EXPECT_EQ(kept_of("This site uses coo\u212aies today."), five);  // KELVIN SIGN lowers to 'k'
  EXPECT_EQ(kept_of("A " + std::string(1000, 'x') + " word."), five + "\nA " + std::string(1000, 'x') + " word.");
  EXPECT_EQ(kept_of("A " + std::string(1001, 'x') + " word."), five);
  EXPECT_EQ(kept_of("A " + std::string(1000, 'x') + "\u00e9 word."), five);  // 1001 code points
  // Citations go before the punctuation test, and the line is not re-stripped.
  EXPECT_EQ(kept_of("Cited words here.[1][edit][citation needed]"), five + "\nCited words here.");
  EXPECT_EQ(kept_of("Cited words here. [12]"), five);
  EXPECT_EQ(kept_of("Odd [x] words here.[]"), five + "\nOdd [x] words here.");
  EXPECT_EQ(run(*f, five + "\nWe said lorem IPSUM once."), "lorem_ipsum");
  EXPECT_EQ(run(*f, five + "\nThe set {a} is small."), "curly_bracket");
  // A dropped line is not looked at: no curly_bracket for a line without punctuation.
  EXPECT_EQ(run(*f, five + "\nfunction f() { return 1; }"), "keep");
  Document doc;
  doc.text = five + "\nMenu\nPlease enable JavaScript now.";
  StageCounters counters;
  EXPECT_EQ(f->process(doc, counters), "");
  EXPECT_EQ(counters.counts["line-total"], 3);
  EXPECT_EQ(counters.counts["line-kept"], 1);
  EXPECT_EQ(counters.counts["line-filter-no_terminal_punc"], 1);
  EXPECT_EQ(counters.counts["line-filter-javascript"], 1);
  doc.text = "Too short.";
  EXPECT_EQ(f->process(doc, counters), "too_few_sentences");
  EXPECT_EQ(counters.counts["too_few_sentences"], 1);  // the reason is counted
}

TEST(CurateC4Quality, SentenceMode) {
  // split_paragraph = false: the units are spaCy sentences, joined by " ".
  const auto f = make("c4_quality", "split_paragraph = false");
  std::string kept;
  EXPECT_EQ(run(*f, c4_line(4) + " Tiny. " + c4_line(1, 40), &kept), "keep");
  EXPECT_EQ(kept, c4_line(4) + " " + c4_line(1, 40));
  EXPECT_EQ(run(*f, c4_line(4) + " Tiny."), "too_few_sentences");
}

// ---------------------------------------------------------------------------
// fineweb_quality

TEST(CurateFineWebQuality, PunctuatedLines) {
  const auto f = make("fineweb_quality");
  EXPECT_EQ(f->kind(), "fineweb_quality");
  EXPECT_EQ(run(*f, " \n\t\n"), "empty");
  // 100 lines of over 30 characters, k ending with a stop char.
  auto doc = [](int k, std::string_view end) {
    std::string d;
    for (int i = 0; i < 100; ++i) d += words(6, 6 * i) + (i < k ? std::string(end) : std::string()) + "\n";
    return d;
  };
  EXPECT_EQ(run(*f, doc(12, ".")), "keep");  // 0.12 is not below
  EXPECT_EQ(run(*f, doc(11, "\u3002")), "line_punct_ratio");
  EXPECT_EQ(run(*f, doc(12, ". ")), "line_punct_ratio");  // the line is not stripped
  EXPECT_EQ(run(*make("fineweb_quality", "line_punct_exclude_zero = true"), doc(0, ".")), "keep");
  EXPECT_EQ(run(*make("fineweb_quality", "stop_chars = [\"!!\", \";\"]"), doc(12, "!!")), "keep");
  EXPECT_EQ(run(*make("fineweb_quality", "stop_chars = [\"!!\", \";\"]"), doc(12, "!")), "line_punct_ratio");
}

TEST(CurateFineWebQuality, ShortLinesDuplicatesAndLists) {
  const auto f = make("fineweb_quality");
  // 3 lines: 2 short of exactly 30 characters (0.667 is not above 0.67) ...
  auto thirty = [](int first) { return words(4, first) + " \u00e9\u00e9\u00e9\u00e9\u00e9."; };  // 23 + 7
  ASSERT_EQ(tx::length(thirty(0)), 30u);
  const std::string long_line = words(10, 50) + ".";
  EXPECT_EQ(run(*f, thirty(0) + "\n" + thirty(10) + "\n" + long_line), "keep");
  // ... 3 of 4 lines short.
  EXPECT_EQ(run(*f, thirty(0) + "\n" + thirty(10) + "\n" + thirty(20) + "\n" + long_line), "short_line_ratio");
  EXPECT_EQ(run(*f, thirty(0) + "x\n" + thirty(10) + "x\n" + thirty(20) + "\n" + long_line), "keep");
  // Duplicated line characters over all but newlines: above 0.01.
  std::string d;
  for (int i = 0; i < 50; ++i) d += words(10, 10 * i) + ".\n";
  EXPECT_EQ(run(*f, d), "keep");
  EXPECT_EQ(run(*f, d + words(10, 0) + "."), "char_dup_ratio");
  // Newlines per word above 0.3: lines of three long words separated by blank lines.
  std::string list;
  for (int i = 0; i < 20; ++i)
    list += word(i) + word(100 + i) + " " + word(200 + i) + word(300 + i) + " " + word(400 + i) + word(500 + i) +
            ".\n\n";
  EXPECT_EQ(run(*f, list), "list_ratio");  // 40 newlines, 80 words (with the dots): 0.5
  EXPECT_EQ(run(*make("fineweb_quality", "new_line_ratio = 0.5"), list), "keep");
}

// ---------------------------------------------------------------------------
// Keys, language, threads

TEST(CurateFilters, KeysAreChecked) {
  EXPECT_CLAW_ERROR(make("gopher_quality", "min_doc_word = 5"), "test [[stage]] (gopher_quality)", "min_doc_word",
                    "min_doc_words");
  EXPECT_CLAW_ERROR(make("fineweb_quality", "short_line_length = 3.5"), "short_line_length", "integer");
  EXPECT_CLAW_ERROR(make("c4_quality", "filter_policy = 1"), "filter_policy", "true or false");
  EXPECT_CLAW_ERROR(make("gopher_repetition", "language = \"fr\""), "language", "fr", "\"en\"");
  EXPECT_CLAW_ERROR(make("gopher_quality", "max_doc_words = true"), "max_doc_words", "false");
}

TEST(CurateFilters, ProcessIsThreadSafe) {
  const auto f = make("gopher_repetition");
  std::vector<std::string> docs;
  std::vector<std::string> expected;
  for (int i = 0; i < 40; ++i) {
    docs.push_back(i % 2 ? words(100 + i, i) : words(20, i) + "\n" + words(20, i) + "\n" + words(20, i));
    expected.push_back(run(*f, docs.back()));
  }
  std::vector<std::thread> threads;
  std::vector<int> wrong(4, 0);
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int rep = 0; rep < 20; ++rep)
        for (size_t i = 0; i < docs.size(); ++i) wrong[t] += run(*f, docs[i]) != expected[i];
    });
  for (auto& th : threads) th.join();
  for (int w : wrong) EXPECT_EQ(w, 0);
  EXPECT_EQ(expected[0], "dup_line_frac");
  EXPECT_EQ(expected[1], "keep");
}

}  // namespace
}  // namespace claw::curate
