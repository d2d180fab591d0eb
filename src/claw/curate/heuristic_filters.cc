#include "claw/curate/heuristic_filters.h"

#include <algorithm>
#include <charconv>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "claw/core/error.h"
#include "claw/curate/text_stats.h"

namespace claw::curate {
namespace {

namespace tx = claw::curate::text;

// ---------------------------------------------------------------------------
// Keys

// A threshold datatrove tests for truth: off when false, or 0 (Python's
// `if self.x and ...`).
std::optional<double> truthy(StageKeys& keys, std::string_view key, double fallback) {
  double v = 0;
  if (!keys.optional_number(key, fallback, v) || v == 0) return std::nullopt;
  return v;
}

// A threshold datatrove always applies; false switches it off here.
std::optional<double> always(StageKeys& keys, std::string_view key, double fallback) {
  double v = 0;
  if (!keys.optional_number(key, fallback, v)) return std::nullopt;
  return v;
}

void require_english(StageKeys& keys) {
  const std::string language = keys.string("language", "en");
  if (language != "en")
    throw Error(fmt::format("{}: key 'language' is \"{}\"; only \"en\" is implemented (spaCy's English tokenizer)",
                            keys.where(), language));
}

struct NGramRule {
  int n;
  double frac;
};

// [[2, 0.2], ...] -> {2, 0.2}, ...
std::vector<NGramRule> ngram_rules(StageKeys& keys, std::string_view key,
                                   std::vector<std::pair<int64_t, double>> fallback) {
  std::vector<NGramRule> out;
  for (const auto& [n, frac] : keys.number_pairs(key, std::move(fallback))) {
    if (n < 1 || n > 1000)
      throw Error(fmt::format("{}: key '{}' has [{}, {}]; n must be in [1, 1000]", keys.where(), key, n, frac));
    out.push_back({static_cast<int>(n), frac});
  }
  return out;
}

// ---------------------------------------------------------------------------
// Hashing and duplicates

uint64_t mix(uint64_t h) {
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  return h;
}

uint64_t hash_bytes(std::string_view s) {
  uint64_t h = 0x9E3779B97F4A7C15ull ^ (s.size() * 0xC2B2AE3D27D4EB4Full);
  size_t i = 0;
  for (; i + 8 <= s.size(); i += 8) {
    uint64_t v;
    std::memcpy(&v, s.data() + i, 8);
    h = (h ^ v) * 0x9E3779B97F4A7C15ull;
    h ^= h >> 31;
  }
  uint64_t v = 0;
  std::memcpy(&v, s.data() + i, s.size() - i);
  return mix(h ^ v);
}

size_t table_size(size_t n) {
  size_t cap = 16;
  while (cap < 2 * n) cap *= 2;
  return cap;
}

constexpr uint32_t kEmpty = UINT32_MAX;

// gopher_repetition_filter.find_duplicates: the number of elements equal to
// an earlier one, and their length in code points.
struct Duplicates {
  size_t elements = 0, chars = 0;
};
Duplicates find_duplicates(const std::vector<std::string_view>& xs) {
  Duplicates d;
  const size_t cap = table_size(xs.size());
  std::vector<uint32_t> slots(cap, kEmpty);
  std::vector<uint64_t> hashes(xs.size());
  for (size_t i = 0; i < xs.size(); ++i) {
    const uint64_t h = hashes[i] = hash_bytes(xs[i]);
    for (size_t s = h & (cap - 1);; s = (s + 1) & (cap - 1)) {
      const uint32_t k = slots[s];
      if (k == kEmpty) {
        slots[s] = static_cast<uint32_t>(i);
        break;
      }
      if (hashes[k] == h && xs[k] == xs[i]) {
        ++d.elements;
        d.chars += tx::length(xs[i]);
        break;
      }
    }
  }
  return d;
}

// re.split(r"\n{min_run,}", s).
void split_newline_runs(std::string_view s, size_t min_run, std::vector<std::string_view>& out) {
  size_t start = 0;
  for (size_t i = s.find('\n'); i != std::string_view::npos;) {
    size_t j = i;
    while (j < s.size() && s[j] == '\n') ++j;
    if (j - i >= min_run) {
      out.push_back(s.substr(start, i - start));
      start = j;
    }
    i = s.find('\n', j);
  }
  out.push_back(s.substr(start));
}

double ratio(size_t a, size_t b) { return static_cast<double>(a) / static_cast<double>(b); }

// A filter: decide() returns the removal reason, which process() also counts.
class Filter : public Stage {
 public:
  std::string_view process(Document& doc, StageCounters& counters) const final {
    const std::string_view reason = decide(doc, counters);
    if (!reason.empty()) counters.add(reason);
    return reason;
  }

 private:
  virtual std::string_view decide(Document& doc, StageCounters& counters) const = 0;
};

// ---------------------------------------------------------------------------
// gopher_quality

class GopherQuality final : public Filter {
 public:
  explicit GopherQuality(StageKeys& keys)
      : min_doc_words_(truthy(keys, "min_doc_words", 50)),
        max_doc_words_(truthy(keys, "max_doc_words", 100000)),
        min_avg_word_length_(truthy(keys, "min_avg_word_length", 3)),
        max_avg_word_length_(truthy(keys, "max_avg_word_length", 10)),
        max_symbol_word_ratio_(truthy(keys, "max_symbol_word_ratio", 0.1)),
        max_bullet_lines_ratio_(truthy(keys, "max_bullet_lines_ratio", 0.9)),
        max_ellipsis_lines_ratio_(truthy(keys, "max_ellipsis_lines_ratio", 0.3)),
        max_non_alpha_words_ratio_(truthy(keys, "max_non_alpha_words_ratio", 0.8)),
        min_stop_words_(truthy(keys, "min_stop_words", 2)),
        stop_words_(keys.strings("stop_words", {"the", "be", "to", "of", "and", "that", "have", "with"})) {
    require_english(keys);
    keys.check_all_read();
    std::sort(stop_words_.begin(), stop_words_.end());
    stop_words_.erase(std::unique(stop_words_.begin(), stop_words_.end()), stop_words_.end());
    for (const std::string& w : stop_words_) stop_lengths_ |= w.size() < 64 ? uint64_t{1} << w.size() : 0;
  }
  std::string_view kind() const override { return "gopher_quality"; }

  std::string_view decide(Document& doc, StageCounters&) const override {
    const std::string_view text = doc.text;
    std::vector<std::string_view> words;
    words.reserve(text.size() / 5 + 8);
    tx::split_into_words(text, words);
    const size_t n_words = words.size();

    size_t n_non_symbol = 0, non_symbol_chars = 0, n_alpha = 0;
    std::vector<char> stop_seen(stop_words_.size(), 0);
    for (std::string_view w : words) {
      bool non_symbol = false, alpha = false;
      size_t len = 0;
      for (size_t i = 0; i < w.size(); ++len) {
        const char32_t c = tx::next_code_point(w, i);
        non_symbol = non_symbol || !tx::is_datatrove_punctuation(c);
        alpha = alpha || tx::py_isalpha(c);
      }
      if (non_symbol) ++n_non_symbol, non_symbol_chars += len;
      n_alpha += alpha;
      if (w.size() < 64 && (stop_lengths_ >> w.size() & 1)) {
        auto it = std::lower_bound(stop_words_.begin(), stop_words_.end(), w);
        if (it != stop_words_.end() && *it == w) stop_seen[it - stop_words_.begin()] = 1;
      }
    }

    if (min_doc_words_ && static_cast<double>(n_non_symbol) < *min_doc_words_) return "gopher_short_doc";
    if (max_doc_words_ && static_cast<double>(n_non_symbol) > *max_doc_words_) return "gopher_long_doc";
    // np.mean of no words is nan, which passes both comparisons.
    if (n_non_symbol > 0) {
      const double avg = ratio(non_symbol_chars, n_non_symbol);
      if (min_avg_word_length_ && avg < *min_avg_word_length_) return "gopher_below_avg_threshold";
      if (max_avg_word_length_ && avg > *max_avg_word_length_) return "gopher_above_avg_threshold";
    }
    // datatrove divides by the word count below and raises on zero.
    if (n_words == 0) return "gopher_short_doc";
    if (max_symbol_word_ratio_ && ratio(tx::count(text, "#"), n_words) > *max_symbol_word_ratio_)
      return "gopher_too_many_hashes";
    if (max_symbol_word_ratio_ &&
        ratio(tx::count(text, "...") + tx::count(text, "\u2026"), n_words) > *max_symbol_word_ratio_)
      return "gopher_too_many_ellipsis";

    if (max_bullet_lines_ratio_ || max_ellipsis_lines_ratio_) {
      std::vector<std::string_view> lines;
      tx::split_lines(text, lines);
      size_t bullets = 0, ellipsis = 0;
      for (std::string_view line : lines) {
        const std::string_view l = tx::lstrip(line);
        bullets += l.starts_with("\u2022") || l.starts_with("-");
        const std::string_view r = tx::rstrip(line);
        ellipsis += r.ends_with("...") || r.ends_with("\u2026");
      }
      // A text with words has a line.
      if (max_bullet_lines_ratio_ && ratio(bullets, lines.size()) > *max_bullet_lines_ratio_)
        return "gopher_too_many_bullets";
      if (max_ellipsis_lines_ratio_ && ratio(ellipsis, lines.size()) > *max_ellipsis_lines_ratio_)
        return "gopher_too_many_end_ellipsis";
    }
    if (max_non_alpha_words_ratio_ && ratio(n_alpha, n_words) < *max_non_alpha_words_ratio_)
      return "gopher_below_alpha_threshold";
    if (min_stop_words_) {
      const auto found = static_cast<double>(std::count(stop_seen.begin(), stop_seen.end(), 1));
      if (found < *min_stop_words_) return "gopher_enough_stop_words";
    }
    return {};
  }

 private:
  std::optional<double> min_doc_words_, max_doc_words_, min_avg_word_length_, max_avg_word_length_,
      max_symbol_word_ratio_, max_bullet_lines_ratio_, max_ellipsis_lines_ratio_, max_non_alpha_words_ratio_,
      min_stop_words_;
  std::vector<std::string> stop_words_;  // sorted, unique
  uint64_t stop_lengths_ = 0;            // bit k: a stop word has k bytes
};

// ---------------------------------------------------------------------------
// gopher_repetition

// The words of a document with what the n-gram rules need: an id per
// distinct word, its length in code points, and its bytes' polynomial hash
// for n-grams compared as "".join(words) (so "ab"+"c" equals "a"+"bc").
struct WordTable {
  std::vector<uint32_t> id, chars;
  std::vector<uint64_t> poly, power;  // poly(word), kBase^bytes(word)
  std::vector<size_t> chars_before;   // prefix sums of chars
  std::string joined;                 // "".join(words)
  std::vector<size_t> offset;         // of each word in joined, and its end

  static constexpr uint64_t kBase = 0x100000001b3ull;

  explicit WordTable(const std::vector<std::string_view>& words) {
    const size_t n = words.size();
    id.resize(n), chars.resize(n), poly.resize(n), power.resize(n), chars_before.resize(n + 1), offset.resize(n + 1);
    size_t total = 0;
    for (std::string_view w : words) total += w.size();
    joined.reserve(total);
    const size_t cap = table_size(n);
    std::vector<uint32_t> slots(cap, kEmpty);
    std::vector<uint64_t> hashes(n);
    uint32_t next_id = 0;
    for (size_t i = 0; i < n; ++i) {
      const std::string_view w = words[i];
      uint64_t p = 0, pw = 1;
      for (unsigned char c : w) p = p * kBase + c + 1, pw *= kBase;
      poly[i] = p, power[i] = pw;
      chars[i] = static_cast<uint32_t>(tx::length(w));
      chars_before[i + 1] = chars_before[i] + chars[i];
      offset[i] = joined.size();
      joined.append(w);
      const uint64_t h = hashes[i] = mix(p ^ w.size());
      for (size_t s = h & (cap - 1);; s = (s + 1) & (cap - 1)) {
        const uint32_t k = slots[s];
        if (k == kEmpty) {
          slots[s] = static_cast<uint32_t>(i);
          id[i] = next_id++;
          break;
        }
        if (hashes[k] == h && words[k] == w) {
          id[i] = id[k];
          break;
        }
      }
    }
    offset[n] = joined.size();
  }
  size_t size() const { return id.size(); }
};

// find_top_duplicate(get_n_grams(words, n)): len(" ".join(g)) * count(g) for
// the most frequent n-gram g, the first seen among equals (Counter order).
size_t top_duplicate(const WordTable& wt, size_t n) {
  const size_t grams = wt.size() - n + 1;
  const size_t cap = table_size(grams);
  struct Entry {
    uint64_t hash;
    uint32_t first, count;
  };
  std::vector<uint32_t> slots(cap, kEmpty);
  std::vector<Entry> entries;
  entries.reserve(grams);
  for (size_t i = 0; i < grams; ++i) {
    uint64_t h = n;
    for (size_t t = i; t < i + n; ++t) h = mix(h * 0x9E3779B97F4A7C15ull + wt.id[t]);
    for (size_t s = h & (cap - 1);; s = (s + 1) & (cap - 1)) {
      const uint32_t k = slots[s];
      if (k == kEmpty) {
        slots[s] = static_cast<uint32_t>(entries.size());
        entries.push_back({h, static_cast<uint32_t>(i), 1});
        break;
      }
      Entry& e = entries[k];
      if (e.hash == h && std::equal(wt.id.begin() + e.first, wt.id.begin() + e.first + n, wt.id.begin() + i)) {
        ++e.count;
        break;
      }
    }
  }
  const Entry* best = &entries[0];
  for (const Entry& e : entries)
    if (e.count > best->count) best = &e;
  const size_t len = wt.chars_before[best->first + n] - wt.chars_before[best->first] + (n - 1);
  return len * best->count;
}

// find_all_duplicate(words, n): code points of the n-grams ("".join) seen
// before, skipping the n words of each repeat.
size_t all_duplicates(const WordTable& wt, size_t n) {
  const size_t words = wt.size();
  if (words < n) return 0;
  const size_t cap = table_size(words - n + 1);
  std::vector<uint32_t> slots(cap, kEmpty);
  std::vector<uint64_t> hashes(words, 0);
  size_t repeated = 0;
  for (size_t idx = 0; idx + n <= words;) {
    uint64_t p = 0;
    for (size_t t = idx; t < idx + n; ++t) p = p * wt.power[t] + wt.poly[t];
    const size_t bytes = wt.offset[idx + n] - wt.offset[idx];
    const uint64_t h = hashes[idx] = mix(p ^ bytes);
    bool seen = false;
    size_t s = h & (cap - 1);
    for (;; s = (s + 1) & (cap - 1)) {
      const uint32_t k = slots[s];
      if (k == kEmpty) break;
      if (hashes[k] == h && wt.offset[k + n] - wt.offset[k] == bytes &&
          std::memcmp(wt.joined.data() + wt.offset[k], wt.joined.data() + wt.offset[idx], bytes) == 0) {
        seen = true;
        break;
      }
    }
    if (seen) {
      repeated += wt.chars_before[idx + n] - wt.chars_before[idx];
      idx += n;
    } else {
      slots[s] = static_cast<uint32_t>(idx);
      idx += 1;
    }
  }
  return repeated;
}

class GopherRepetition final : public Filter {
 public:
  explicit GopherRepetition(StageKeys& keys)
      : dup_line_frac_(truthy(keys, "dup_line_frac", 0.3)),
        dup_para_frac_(truthy(keys, "dup_para_frac", 0.3)),
        dup_line_char_frac_(truthy(keys, "dup_line_char_frac", 0.2)),
        dup_para_char_frac_(truthy(keys, "dup_para_char_frac", 0.2)),
        top_n_grams_(ngram_rules(keys, "top_n_grams", {{2, 0.2}, {3, 0.18}, {4, 0.16}})),
        dup_n_grams_(ngram_rules(keys, "dup_n_grams", {{5, 0.15}, {6, 0.14}, {7, 0.13}, {8, 0.12}, {9, 0.11}, {10, 0.1}})) {
    require_english(keys);
    keys.check_all_read();
    for (const NGramRule& r : top_n_grams_) top_reasons_.push_back(fmt::format("top_{}_gram", r.n));
    for (const NGramRule& r : dup_n_grams_) dup_reasons_.push_back(fmt::format("duplicated_{}_n_grams", r.n));
  }
  std::string_view kind() const override { return "gopher_repetition"; }

  std::string_view decide(Document& doc, StageCounters&) const override {
    const std::string_view text = doc.text;
    if (text.empty()) return "empty";
    const size_t text_len = tx::length(text);

    std::vector<std::string_view> parts;
    split_newline_runs(tx::strip(text), 2, parts);
    const Duplicates para = find_duplicates(parts);
    if (dup_para_frac_ && ratio(para.elements, parts.size()) > *dup_para_frac_) return "dup_para_frac";
    if (dup_para_char_frac_ && ratio(para.chars, text_len) > *dup_para_char_frac_) return "dup_para_char_frac";

    parts.clear();
    split_newline_runs(text, 1, parts);
    const Duplicates line = find_duplicates(parts);
    if (dup_line_frac_ && ratio(line.elements, parts.size()) > *dup_line_frac_) return "dup_line_frac";
    if (dup_line_char_frac_ && ratio(line.chars, text_len) > *dup_line_char_frac_) return "dup_line_char_frac";

    std::vector<std::string_view> words;
    words.reserve(text.size() / 5 + 8);
    tx::split_into_words(text, words);
    const WordTable wt(words);
    for (size_t r = 0; r < top_n_grams_.size(); ++r) {
      const size_t n = static_cast<size_t>(top_n_grams_[r].n);
      if (wt.size() < n) continue;  // no n-grams
      if (ratio(top_duplicate(wt, n), text_len) > top_n_grams_[r].frac) return top_reasons_[r];
    }
    for (size_t r = 0; r < dup_n_grams_.size(); ++r) {
      const size_t n = static_cast<size_t>(dup_n_grams_[r].n);
      if (ratio(all_duplicates(wt, n), text_len) > dup_n_grams_[r].frac) return dup_reasons_[r];
    }
    return {};
  }

 private:
  std::optional<double> dup_line_frac_, dup_para_frac_, dup_line_char_frac_, dup_para_char_frac_;
  std::vector<NGramRule> top_n_grams_, dup_n_grams_;
  std::vector<std::string> top_reasons_, dup_reasons_;
};

// ---------------------------------------------------------------------------
// c4_quality

// Python's `needle in line.lower()` for an ASCII needle: ASCII letters fold;
// of the other characters only the Kelvin sign (U+212A) lowers to ASCII
// ('k'; U+0130 lowers to "i\u0307", which no needle can match).
void lower_for_search(std::string_view s, std::string& out) {
  out.clear();
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (c >= 'A' && c <= 'Z') {
      out.push_back(static_cast<char>(c + 32));
    } else if (c == '\xE2' && i + 2 < s.size() && s[i + 1] == '\x84' && s[i + 2] == '\xAA') {
      out.push_back('k');
      i += 2;
    } else {
      out.push_back(c);
    }
  }
}

// CITATION_REGEX.sub("", s) for r"\[\d*]|\[edit]|\[citation needed]"; \d is
// a Unicode decimal digit. Returns false (out untouched) when s has no '['.
bool remove_citations(std::string_view s, std::string& out) {
  if (s.find('[') == std::string_view::npos) return false;
  out.clear();
  size_t i = 0;
  while (i < s.size()) {
    const size_t open = s.find('[', i);
    if (open == std::string_view::npos) break;
    out.append(s.substr(i, open - i));
    size_t j = open + 1;
    while (j < s.size()) {
      size_t k = j;
      const char32_t c = tx::next_code_point(s, k);
      if (!(c < 0x80 ? (c >= '0' && c <= '9') : tx::is_decimal(c))) break;
      j = k;
    }
    size_t match = 0;
    if (j < s.size() && s[j] == ']')
      match = j + 1 - open;
    else if (s.substr(open).starts_with("[edit]"))
      match = 6;
    else if (s.substr(open).starts_with("[citation needed]"))
      match = 17;
    if (match) {
      i = open + match;
    } else {
      out.push_back('[');
      i = open + 1;
    }
  }
  out.append(s.substr(i));
  return true;
}

constexpr std::string_view kPolicySubstrings[] = {"terms of use", "privacy policy", "cookie policy",
                                                  "uses cookies", "use of cookies", "use cookies"};

class C4Quality final : public Filter {
 public:
  explicit C4Quality(StageKeys& keys)
      : split_paragraph_(keys.boolean("split_paragraph", true)),
        remove_citations_(keys.boolean("remove_citations", true)),
        filter_no_terminal_punct_(keys.boolean("filter_no_terminal_punct", true)),
        min_num_sentences_(keys.integer("min_num_sentences", 5)),
        min_words_per_line_(keys.integer("min_words_per_line", 3)),
        max_word_length_(keys.integer("max_word_length", 1000)),
        filter_lorem_ipsum_(keys.boolean("filter_lorem_ipsum", true)),
        filter_javascript_(keys.boolean("filter_javascript", true)),
        filter_curly_bracket_(keys.boolean("filter_curly_bracket", true)),
        filter_policy_(keys.boolean("filter_policy", true)) {
    require_english(keys);
    keys.check_all_read();
  }
  std::string_view kind() const override { return "c4_quality"; }

  std::string_view decide(Document& doc, StageCounters& counters) const override {
    std::vector<std::string_view> lines;
    if (split_paragraph_)
      tx::split_lines(doc.text, lines);
    else
      tx::split_into_sentences(doc.text, lines);

    int64_t num_sentences = 0;
    std::string kept;  // "\n".join(kept_lines) (" " without split_paragraph)
    std::string cited, lowered;
    std::vector<std::string_view> words;
    int64_t total = 0, too_long = 0, no_punct = 0, few_words = 0, javascript = 0, policy = 0, n_kept = 0;
    auto report = [&] {
      const std::pair<std::string_view, int64_t> figures[] = {
          {"line-total", total},        {"line-filter-too_long_word", too_long},
          {"line-filter-no_terminal_punc", no_punct}, {"line-filter-too_few_words", few_words},
          {"line-filter-javascript", javascript},     {"line-filter-policy", policy},
          {"line-kept", n_kept}};
      for (const auto& [name, n] : figures)
        if (n) counters.add(name, n);
    };

    for (std::string_view raw : lines) {
      std::string_view line = tx::strip(raw);
      ++total;
      words.clear();
      tx::split_whitespace(line, words);
      if (max_word_length_ != -1) {
        bool long_word = false;
        for (std::string_view w : words)
          long_word = long_word || (static_cast<int64_t>(w.size()) > max_word_length_ &&
                                    static_cast<int64_t>(tx::length(w)) > max_word_length_);
        if (long_word) {
          ++too_long;
          continue;
        }
      }
      if (remove_citations_ && remove_citations(line, cited)) line = cited;
      if (filter_no_terminal_punct_) {
        const bool terminal = !line.empty() && std::string_view(".?!\"'").find(line.back()) != std::string_view::npos;
        if (!terminal || line.ends_with("...")) {
          ++no_punct;
          continue;
        }
      }
      if (static_cast<int64_t>(words.size()) < min_words_per_line_) {
        ++few_words;
        continue;
      }
      lower_for_search(line, lowered);
      if (filter_lorem_ipsum_ && lowered.find("lorem ipsum") != std::string::npos) {
        report();
        return "lorem_ipsum";
      }
      if (filter_javascript_ && lowered.find("javascript") != std::string::npos) {
        ++javascript;
        continue;
      }
      if (filter_curly_bracket_ && line.find('{') != std::string_view::npos) {
        report();
        return "curly_bracket";
      }
      if (filter_policy_ && std::any_of(std::begin(kPolicySubstrings), std::end(kPolicySubstrings),
                                        [&](std::string_view p) { return lowered.find(p) != std::string::npos; })) {
        ++policy;
        continue;
      }
      if (min_num_sentences_ != -1)
        num_sentences += split_paragraph_ ? static_cast<int64_t>(tx::count_sentences(line)) : 1;
      if (n_kept++) kept.push_back(split_paragraph_ ? '\n' : ' ');
      kept.append(line);
    }
    report();
    if (num_sentences < min_num_sentences_) return "too_few_sentences";
    const std::string_view stripped = tx::strip(kept);
    doc.text = std::string(stripped);
    return {};
  }

 private:
  bool split_paragraph_, remove_citations_, filter_no_terminal_punct_;
  int64_t min_num_sentences_, min_words_per_line_, max_word_length_;
  bool filter_lorem_ipsum_, filter_javascript_, filter_curly_bracket_, filter_policy_;
};

// ---------------------------------------------------------------------------
// fineweb_quality

class FineWebQuality final : public Filter {
 public:
  explicit FineWebQuality(StageKeys& keys)
      : line_punct_thr_(always(keys, "line_punct_thr", 0.12)),
        line_punct_exclude_zero_(keys.boolean("line_punct_exclude_zero", false)),
        stop_chars_(keys.strings("stop_chars", tx::terminal_punctuation())),
        short_line_thr_(always(keys, "short_line_thr", 0.67)),
        short_line_length_(keys.integer("short_line_length", 30)),
        char_duplicates_ratio_(always(keys, "char_duplicates_ratio", 0.01)),
        new_line_ratio_(always(keys, "new_line_ratio", 0.3)) {
    require_english(keys);
    keys.check_all_read();
    single_code_points_ = true;
    for (const std::string& s : stop_chars_) {
      size_t i = 0;
      if (s.empty()) {
        single_code_points_ = false;
        break;
      }
      const char32_t c = tx::next_code_point(s, i);
      if (i != s.size()) single_code_points_ = false;
      stop_code_points_.push_back(c);
    }
    std::sort(stop_code_points_.begin(), stop_code_points_.end());
  }
  std::string_view kind() const override { return "fineweb_quality"; }

  std::string_view decide(Document& doc, StageCounters&) const override {
    const std::string_view text = doc.text;
    std::vector<std::string_view> lines;
    size_t newlines = 0, start = 0;
    for (size_t i = text.find('\n');; i = text.find('\n', start)) {
      const std::string_view line = text.substr(start, i == std::string_view::npos ? i : i - start);
      if (!tx::strip(line).empty()) lines.push_back(line);
      if (i == std::string_view::npos) break;
      ++newlines;
      start = i + 1;
    }
    if (lines.empty()) return "empty";

    if (line_punct_thr_) {
      size_t ending = 0;
      for (std::string_view line : lines) ending += ends_with_stop_char(line);
      const double r = ratio(ending, lines.size());
      if (r < *line_punct_thr_ && !(r == 0 && line_punct_exclude_zero_)) return "line_punct_ratio";
    }
    if (short_line_thr_) {
      size_t short_lines = 0;
      for (std::string_view line : lines)
        short_lines += static_cast<int64_t>(line.size()) <= short_line_length_ ||
                       static_cast<int64_t>(tx::length(line)) <= short_line_length_;
      if (ratio(short_lines, lines.size()) > *short_line_thr_) return "short_line_ratio";
    }
    if (char_duplicates_ratio_ &&
        ratio(find_duplicates(lines).chars, tx::length(text) - newlines) > *char_duplicates_ratio_)
      return "char_dup_ratio";
    if (new_line_ratio_) {
      std::vector<std::string_view> words;
      words.reserve(text.size() / 5 + 8);
      tx::split_into_words(text, words);  // not empty: some line has a non-space character
      if (ratio(newlines, words.size()) > *new_line_ratio_) return "list_ratio";
    }
    return {};
  }

 private:
  bool ends_with_stop_char(std::string_view line) const {
    if (single_code_points_)
      return std::binary_search(stop_code_points_.begin(), stop_code_points_.end(), tx::last_code_point(line));
    for (const std::string& s : stop_chars_)
      if (line.ends_with(s)) return true;
    return false;
  }

  std::optional<double> line_punct_thr_;
  bool line_punct_exclude_zero_;
  std::vector<std::string> stop_chars_;
  std::optional<double> short_line_thr_;
  int64_t short_line_length_;
  std::optional<double> char_duplicates_ratio_, new_line_ratio_;
  bool single_code_points_ = true;
  std::vector<char32_t> stop_code_points_;  // sorted, when every stop char is one code point
};

}  // namespace

std::unique_ptr<Stage> make_gopher_quality(StageKeys& keys) { return std::make_unique<GopherQuality>(keys); }
std::unique_ptr<Stage> make_gopher_repetition(StageKeys& keys) { return std::make_unique<GopherRepetition>(keys); }
std::unique_ptr<Stage> make_c4_quality(StageKeys& keys) { return std::make_unique<C4Quality>(keys); }
std::unique_ptr<Stage> make_fineweb_quality(StageKeys& keys) { return std::make_unique<FineWebQuality>(keys); }

}  // namespace claw::curate
