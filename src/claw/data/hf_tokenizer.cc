#include "claw/data/hf_tokenizer.h"

#include <unicode/locid.h>
#include <unicode/normalizer2.h>
#include <unicode/regex.h>
#include <unicode/unistr.h>
#include <unicode/utext.h>

#include <algorithm>
#include <cctype>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "claw/core/error.h"
#include "claw/core/json_depth.h"
#include "claw/data/bpe_piece_cache.h"
#include "claw/data/file_io.h"
#include "claw/data/gpt2_bpe.h"
#include "claw/data/hf_tokenizer_spec.h"
#include "claw/data/jsonl_record.h"
#include "claw/data/pretokenizer_unicode.h"

namespace claw::data {
namespace hf {
namespace {

// Per thread: the piece cache, the core's scratch and one ICU matcher per
// regex, for the pipeline whose tag is `tag`.
struct State {
  uint64_t tag = 0;
  BpePieceCache cache;
  BpeEncoder::Scratch scratch;
  std::vector<std::unique_ptr<icu::RegexMatcher>> matchers;
  std::vector<int32_t> ids;
};

State& thread_state(const Pipeline& p) {
  thread_local State s;
  if (s.tag != p.tag) {
    s.cache = BpePieceCache();
    s.matchers.clear();
    s.matchers.resize(p.regexes.size());
    s.tag = p.tag;
  }
  return s;
}

using Range = std::pair<size_t, size_t>;

// Non-empty matches of `r` in `text` as byte ranges.
void regex_matches(const Regex& r, std::string_view text, State& s, std::vector<Range>& out) {
  out.clear();
  UErrorCode status = U_ZERO_ERROR;
  std::unique_ptr<icu::RegexMatcher>& m = s.matchers[static_cast<size_t>(r.index)];
  if (!m) {
    m.reset(r.pattern->matcher(status));
    CLAW_CHECK(U_SUCCESS(status), "regex matcher: {}", u_errorName(status));
  }
  UText* ut = utext_openUTF8(nullptr, text.data(), static_cast<int64_t>(text.size()), &status);
  CLAW_CHECK(U_SUCCESS(status), "utext_openUTF8: {}", u_errorName(status));
  m->reset(ut);
  while (m->find(status) && U_SUCCESS(status)) {
    const int64_t b = m->start64(status), e = m->end64(status);
    if (e > b) out.emplace_back(static_cast<size_t>(b), static_cast<size_t>(e));
  }
  m->reset(icu::UnicodeString());
  utext_close(ut);
  CLAW_CHECK(U_SUCCESS(status), "regex search: {}", u_errorName(status));
}

void literal_matches(std::string_view literal, std::string_view text, std::vector<Range>& out) {
  out.clear();
  for (size_t at = text.find(literal); at != std::string_view::npos; at = text.find(literal, at + literal.size()))
    out.emplace_back(at, at + literal.size());
}

std::string icu_transform(std::string_view text, NormalizerStep::Kind kind) {
  if (find_invalid_utf8(text) != std::string_view::npos) return std::string(text);  // bytes stay bytes
  const icu::UnicodeString u =
      icu::UnicodeString::fromUTF8(icu::StringPiece(text.data(), static_cast<int32_t>(text.size())));
  icu::UnicodeString result;
  UErrorCode status = U_ZERO_ERROR;
  if (kind == NormalizerStep::lowercase) {
    result = u;
    result.toLower(icu::Locale::getRoot());
  } else {
    const icu::Normalizer2* n = kind == NormalizerStep::nfc    ? icu::Normalizer2::getNFCInstance(status)
                                : kind == NormalizerStep::nfd  ? icu::Normalizer2::getNFDInstance(status)
                                : kind == NormalizerStep::nfkc ? icu::Normalizer2::getNFKCInstance(status)
                                                               : icu::Normalizer2::getNFKDInstance(status);
    CLAW_CHECK(U_SUCCESS(status), "ICU normalizer: {}", u_errorName(status));
    result = n->normalize(u, status);
    CLAW_CHECK(U_SUCCESS(status), "ICU normalize: {}", u_errorName(status));
  }
  std::string out;
  result.toUTF8String(out);
  return out;
}

bool is_ascii(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; });
}

std::string splice(std::string_view text, const std::vector<Range>& matches, std::string_view content) {
  std::string out;
  size_t prev = 0;
  for (const auto& [b, e] : matches) {
    out.append(text.substr(prev, b - prev));
    out.append(content);
    prev = e;
  }
  out.append(text.substr(prev));
  return out;
}

// Whether the character starting at byte i is White_Space / a letter or number.
bool space_at(std::string_view s, size_t i) { return (unicode::next_char(s, i).flags & unicode::kSpace) != 0; }
bool word_at(std::string_view s, size_t i) {
  return (unicode::next_char(s, i).flags & (unicode::kLetter | unicode::kNumber)) != 0;
}
// Start of the character that ends at byte i > 0.
size_t char_before(std::string_view s, size_t i) {
  size_t j = i - 1;
  while (j > 0 && i - j < 4 && (static_cast<unsigned char>(s[j]) & 0xC0) == 0x80) --j;
  return j;
}

}  // namespace

std::string normalize(const Pipeline& p, std::string text) {
  State* state = nullptr;
  std::vector<Range> matches;
  for (const NormalizerStep& s : p.normalizer) {
    switch (s.kind) {
      case NormalizerStep::nfc:
      case NormalizerStep::nfd:
      case NormalizerStep::nfkc:
      case NormalizerStep::nfkd:
        if (!is_ascii(text)) text = icu_transform(text, s.kind);
        break;
      case NormalizerStep::lowercase:
        if (is_ascii(text))
          for (char& c : text) c = c >= 'A' && c <= 'Z' ? static_cast<char>(c + 32) : c;
        else
          text = icu_transform(text, s.kind);
        break;
      case NormalizerStep::prepend:
        if (!text.empty()) text.insert(0, s.text);
        break;
      case NormalizerStep::replace:
        if (s.regex) {
          if (state == nullptr) state = &thread_state(p);
          regex_matches(*s.regex, text, *state, matches);
        } else {
          literal_matches(s.text, text, matches);
        }
        if (!matches.empty()) text = splice(text, matches, s.content);
        break;
      case NormalizerStep::strip: {
        size_t b = 0, e = text.size();
        if (s.left)
          while (b < e && space_at(text, b)) b = unicode::next_char(text, b).end;
        if (s.right)
          while (e > b && space_at(text, char_before(text, e))) e = char_before(text, e);
        text = text.substr(b, e - b);
        break;
      }
    }
  }
  return text;
}

namespace {

struct Piece {
  std::string text;
  bool at_start;  // begins where the whole input begins (Metaspace's "first")
};

// Pieces of `text` after a split with the given matches (tokenizers'
// SplitDelimiterBehavior, invert included).
void split_pieces(const Piece& piece, const std::vector<Range>& matches, SplitBehavior behavior, bool invert,
                  std::vector<Piece>& out) {
  struct Part {
    size_t b, e;
    bool match;
  };
  std::vector<Part> parts;
  size_t prev = 0;
  for (const auto& [b, e] : matches) {
    if (b > prev) parts.push_back({prev, b, invert});
    parts.push_back({b, e, !invert});
    prev = e;
  }
  if (prev < piece.text.size()) parts.push_back({prev, piece.text.size(), invert});
  std::vector<Part> merged;
  switch (behavior) {
    case SplitBehavior::removed:
      for (const Part& p : parts)
        if (!p.match) merged.push_back(p);
      break;
    case SplitBehavior::isolated: merged = parts; break;
    case SplitBehavior::merged_with_previous: {
      bool previous_match = false;
      for (const Part& p : parts) {
        if (p.match && !previous_match && !merged.empty()) merged.back().e = p.e;
        else merged.push_back(p);
        previous_match = p.match;
      }
      break;
    }
    case SplitBehavior::merged_with_next: {
      bool previous_match = false;
      for (auto it = parts.rbegin(); it != parts.rend(); ++it) {
        if (it->match && !previous_match && !merged.empty()) merged.back().b = it->b;
        else merged.push_back(*it);
        previous_match = it->match;
      }
      std::reverse(merged.begin(), merged.end());
      break;
    }
    case SplitBehavior::contiguous: {
      bool previous_match = false;
      for (const Part& p : parts) {
        if (p.match == previous_match && !merged.empty()) merged.back().e = p.e;
        else merged.push_back(p);
        previous_match = p.match;
      }
      break;
    }
  }
  for (const Part& p : merged)
    if (p.e > p.b) out.push_back(Piece{piece.text.substr(p.b, p.e - p.b), piece.at_start && p.b == 0});
}

void scanner_matches(Pretokenizer kind, std::string_view text, std::vector<Range>& out) {
  out.clear();
  const PretokenEnd end_of = pretoken_end_function(kind);
  for (size_t b = 0; b < text.size();) {
    const size_t e = end_of(text, b);
    out.emplace_back(b, e);
    b = e;
  }
}

void number_matches(std::string_view text, bool individual, std::vector<Range>& out) {
  out.clear();
  for (size_t i = 0; i < text.size();) {
    const unicode::Char c = unicode::next_char(text, i);
    if (c.flags & unicode::kNumber) {
      if (!individual && !out.empty() && out.back().second == i) out.back().second = c.end;
      else out.emplace_back(i, c.end);
    }
    i = c.end;
  }
}

std::string replace_all(std::string_view text, std::string_view from, std::string_view to) {
  std::vector<Range> m;
  literal_matches(from, text, m);
  return m.empty() ? std::string(text) : splice(text, m, to);
}

void pre_tokenize(const Pipeline& p, std::vector<Piece>& pieces, State& s) {
  std::vector<Piece> next;
  std::vector<Range> matches;
  for (const PreStep& step : p.pre) {
    next.clear();
    for (Piece& piece : pieces) {
      switch (step.kind) {
        case PreStep::split:
          if (step.scanner) scanner_matches(step.scanner_kind, piece.text, matches);
          else if (step.regex) regex_matches(*step.regex, piece.text, s, matches);
          else literal_matches(step.literal, piece.text, matches);
          split_pieces(piece, matches, step.behavior, step.invert, next);
          break;
        case PreStep::byte_level:
          if (step.add_prefix_space && piece.text[0] != ' ') piece.text.insert(0, " ");
          if (step.use_regex) {
            scanner_matches(Pretokenizer::gpt2, piece.text, matches);
            split_pieces(piece, matches, SplitBehavior::isolated, false, next);
          } else {
            next.push_back(std::move(piece));
          }
          break;
        case PreStep::metaspace: {
          piece.text = replace_all(piece.text, " ", step.replacement);
          const bool prepend = step.prepend == PreStep::always || (step.prepend == PreStep::first && piece.at_start);
          if (prepend && !piece.text.starts_with(step.replacement)) piece.text.insert(0, step.replacement);
          if (step.split_on_replacement) {
            literal_matches(step.replacement, piece.text, matches);
            split_pieces(piece, matches, SplitBehavior::merged_with_next, false, next);
          } else {
            next.push_back(std::move(piece));
          }
          break;
        }
        case PreStep::digits:
          number_matches(piece.text, step.individual_digits, matches);
          split_pieces(piece, matches, step.individual_digits ? SplitBehavior::isolated : SplitBehavior::contiguous,
                       false, next);
          break;
      }
    }
    pieces.swap(next);
  }
}

// The model on one piece.
// The model on one piece: the core's ids, each id past the vocabulary (a
// byte or partial character it lacks) replaced by its fallback ids.
void encode_piece(const Pipeline& p, std::string_view piece, State& s, std::vector<int32_t>& out) {
  encode_cached(s.cache, piece, out, [&](std::string_view text, std::vector<int32_t>& ids) {
    const size_t first = ids.size();
    p.encoder->encode_piece(text, s.scratch, ids);
    if (p.fallback.empty() ||
        std::none_of(ids.begin() + static_cast<std::ptrdiff_t>(first), ids.end(),
                     [&](int32_t id) { return id >= p.vocab_size; }))
      return;
    const std::vector<int32_t> core(ids.begin() + static_cast<std::ptrdiff_t>(first), ids.end());
    ids.resize(first);
    for (int32_t id : core) {
      if (id < p.vocab_size) {
        ids.push_back(id);
        continue;
      }
      for (int32_t f : p.fallback[static_cast<size_t>(id - p.vocab_size)])
        if (!(p.fuse_unk && f == p.unk && ids.size() > first && ids.back() == p.unk)) ids.push_back(f);
    }
  });
  // A piece made only of unknown characters without unk_token gives no ids
  // and is not cached: it is encoded anew.
}

struct Segment {
  std::string_view text;  // when id < 0
  int32_t id;
};

// Splits `text` at the added tokens of `set` (their text: `contents`, by
// index into p.added): leftmost first, longest at one position; with
// SpecialTokens::as_text the special ones are not matched.
void split_added(const Pipeline& p, std::string_view text, const Pipeline::AddedSet& set,
                 const std::vector<std::string>& contents, SpecialTokens special, std::vector<Segment>& out) {
  size_t pos = 0;  // start of the text not yet emitted
  for (size_t at = 0; at < text.size(); ++at) {
    const std::vector<int32_t>& candidates = set.by_first_byte[static_cast<unsigned char>(text[at])];
    if (candidates.empty()) continue;
    for (int32_t c : candidates) {
      const HfAddedToken& t = p.added[static_cast<size_t>(c)];
      const std::string& content = contents[static_cast<size_t>(c)];
      if (special == SpecialTokens::as_text && t.special) continue;
      if (text.compare(at, content.size(), content) != 0) continue;
      size_t b = at, e = at + content.size();
      if (t.single_word && ((b > 0 && word_at(text, char_before(text, b))) || (e < text.size() && word_at(text, e))))
        continue;  // inside a word
      if (t.lstrip)
        while (b > pos && space_at(text, char_before(text, b))) b = char_before(text, b);
      if (t.rstrip)
        while (e < text.size() && space_at(text, e)) e = unicode::next_char(text, e).end;
      if (b > pos) out.push_back(Segment{text.substr(pos, b - pos), -1});
      out.push_back(Segment{{}, t.id});
      pos = e;
      at = e - 1;
      break;
    }
  }
  if (pos < text.size()) out.push_back(Segment{text.substr(pos), -1});
}

void encode_text(const Pipeline& p, std::string_view text, SpecialTokens special, State& s,
                 std::vector<int32_t>& out) {
  std::vector<Segment> raw, normalized_parts;
  split_added(p, text, p.raw_matches, p.normalized_content, special, raw);
  std::vector<Piece> pieces;
  std::string normalized;
  for (const Segment& seg : raw) {
    if (seg.id >= 0) {
      out.push_back(seg.id);
      continue;
    }
    const bool at_start = seg.text.data() == text.data();
    std::string_view norm = seg.text;
    if (!p.normalizer.empty()) {
      normalized = normalize(p, std::string(seg.text));
      norm = normalized;
    }
    normalized_parts.clear();
    if (p.normalized_matches.empty())
      normalized_parts.push_back(Segment{norm, -1});
    else
      split_added(p, norm, p.normalized_matches, p.normalized_content, special, normalized_parts);
    for (const Segment& part : normalized_parts) {
      if (part.id >= 0) {
        out.push_back(part.id);
        continue;
      }
      if (p.fast_scanner != nullptr) {
        for (size_t b = 0; b < part.text.size();) {
          const size_t e = p.fast_scanner(part.text, b);
          encode_piece(p, part.text.substr(b, e - b), s, out);
          b = e;
        }
        continue;
      }
      pieces.clear();
      pieces.push_back(Piece{std::string(part.text), at_start && part.text.data() == norm.data()});
      pre_tokenize(p, pieces, s);
      for (const Piece& piece : pieces) {
        const std::string_view t = piece.text;
        if (p.word_marker.empty()) {
          if (!t.empty()) encode_piece(p, t, s, out);
          continue;
        }
        // Cut before each run of markers (see hf_tokenizer_spec.h).
        const std::string_view m = p.word_marker;
        size_t begin = 0;
        for (size_t at = t.find(m, 1); at != std::string_view::npos; at = t.find(m, at + m.size())) {
          if (at >= m.size() && t.compare(at - m.size(), m.size(), m) == 0) continue;  // inside a run
          if (at > begin) encode_piece(p, t.substr(begin, at - begin), s, out);
          begin = at;
        }
        if (begin < t.size()) encode_piece(p, t.substr(begin), s, out);
      }
    }
  }
}

// tokenizers' decoders over token strings.
std::string decode_tokens(const Pipeline& p, std::vector<std::string> tokens) {
  for (const DecodeStep& step : p.decoder) {
    switch (step.kind) {
      case DecodeStep::byte_level: {
        // A character of the byte alphabet is its byte; any other is itself.
        std::string all, bytes;
        for (const std::string& t : tokens)
          for (size_t i = 0; i < t.size();) {
            const size_t n = std::min(utf8_length(static_cast<unsigned char>(t[i])), t.size() - i);
            if (alphabet_to_bytes(std::string_view(t).substr(i, n), bytes))
              all += bytes;
            else
              all.append(t, i, n);
            i += n;
          }
        tokens.assign(1, std::move(all));
        break;
      }
      case DecodeStep::byte_fallback: {
        std::vector<std::string> out;
        std::string bytes;
        bool in_bytes = false;
        for (std::string& t : tokens) {
          const bool is_byte = t.size() == 6 && t.starts_with("<0x") && t[5] == '>' &&
                               std::isxdigit(static_cast<unsigned char>(t[3])) &&
                               std::isxdigit(static_cast<unsigned char>(t[4]));
          if (is_byte) {
            bytes.push_back(static_cast<char>(std::stoi(t.substr(3, 2), nullptr, 16)));
            in_bytes = true;
            continue;
          }
          if (in_bytes) out.push_back(std::move(bytes)), bytes.clear(), in_bytes = false;
          out.push_back(std::move(t));
        }
        if (in_bytes) out.push_back(std::move(bytes));
        tokens.swap(out);
        break;
      }
      case DecodeStep::fuse: {
        std::string all;
        for (const std::string& t : tokens) all += t;
        tokens.assign(1, std::move(all));
        break;
      }
      case DecodeStep::strip:
        for (std::string& t : tokens) {
          size_t b = 0, e = t.size();
          for (int k = 0; k < step.start && t.compare(b, step.content.size(), step.content) == 0 && b < e; ++k)
            b += step.content.size();
          for (int k = 0; k < step.stop && e >= b + step.content.size() &&
                          t.compare(e - step.content.size(), step.content.size(), step.content) == 0;
               ++k)
            e -= step.content.size();
          t = t.substr(b, e - b);
        }
        break;
      case DecodeStep::replace:
        for (std::string& t : tokens) t = replace_all(t, step.text, step.content);
        break;
      case DecodeStep::metaspace:
        // The replacement is a space, except in the first token, where it
        // is dropped (the prefix the pre-tokenizer added) unless it never
        // adds one.
        for (size_t i = 0; i < tokens.size(); ++i)
          tokens[i] = replace_all(tokens[i], step.text, i == 0 && step.prepend != PreStep::never ? "" : " ");
        break;
    }
  }
  std::string out;
  for (const std::string& t : tokens) out += t;
  return out;
}

}  // namespace
}  // namespace hf

namespace {

// tokenizer_config.json beside `json_path`, or null when there is none.
nlohmann::json tokenizer_config(const std::string& json_path) {
  const std::string config = (std::filesystem::path(json_path).parent_path() / "tokenizer_config.json").string();
  if (!path_exists(config)) return nullptr;
  const std::string text = read_file(config, "tokenizer config");
  if (const size_t at = json_too_deep(text); at != std::string_view::npos)
    fail("{}: JSON nested deeper than {} levels at byte {}", config, kMaxJsonDepth, at);
  try {
    nlohmann::json doc = nlohmann::json::parse(text);
    if (!doc.is_object()) fail("{}: a tokenizer config is a JSON object", config);
    return doc;
  } catch (const nlohmann::json::parse_error& e) {
    fail("{}: not valid JSON (byte {}): {}", config, e.byte, e.what());
  }
}

// A token named by tokenizer_config.json: a string or {"content": string}.
std::string config_token(const nlohmann::json& config, const char* key, const std::string& json_path) {
  auto it = config.is_object() ? config.find(key) : config.end();
  if (it == config.end() || it->is_null()) return {};
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string())
    return (*it)["content"].get<std::string>();
  fail("{}: {} must be a string or {{\"content\": string}}",
       (std::filesystem::path(json_path).parent_path() / "tokenizer_config.json").string(), key);
}

}  // namespace

std::string hf_tokenizer_json(const std::string& path) {
  if (std::filesystem::is_directory(path)) {
    const std::string file = (std::filesystem::path(path) / "tokenizer.json").string();
    if (!path_exists(file)) fail("{}: no tokenizer.json in this directory", path);
    return file;
  }
  return path;
}

HfTokenizerConfig read_hf_tokenizer_config(const std::string& path) {
  const std::string file = hf_tokenizer_json(path);
  const nlohmann::json config = tokenizer_config(file);
  const std::string config_path = (std::filesystem::path(file).parent_path() / "tokenizer_config.json").string();
  HfTokenizerConfig c;
  c.bos_token = config_token(config, "bos_token", file);
  c.eos_token = config_token(config, "eos_token", file);
  auto it = config.is_object() ? config.find("chat_template") : config.end();
  if (it != config.end() && !it->is_null()) {
    c.chat_template_file = config_path;
    if (it->is_string()) {
      c.chat_template = it->get<std::string>();
    } else if (it->is_array()) {
      for (const nlohmann::json& t : *it)
        if (t.is_object() && t.value("name", "") == "default" && t.contains("template") && t["template"].is_string())
          c.chat_template = t["template"].get<std::string>();
      if (c.chat_template.empty())
        fail("{}: chat_template is a list without a {{\"name\": \"default\", \"template\": ...}}", config_path);
    } else {
      fail("{}: chat_template must be a string or a list of {{\"name\", \"template\"}}", config_path);
    }
  }
  const std::string jinja = (std::filesystem::path(file).parent_path() / "chat_template.jinja").string();
  if (c.chat_template.empty() && path_exists(jinja)) {
    c.chat_template = read_file(jinja, "chat template");
    c.chat_template_file = jinja;
  }
  return c;
}

HfTokenizer HfTokenizer::load(const std::string& path, const std::string& eod_token) {
  const std::string text = read_file(path, "tokenizer.json");
  const HfTokenizerConfig config = read_hf_tokenizer_config(path);
  HfTokenizer t = parse(text, path, eod_token.empty() ? config.eos_token : eod_token);
  if (!config.bos_token.empty()) {
    const std::optional<int32_t> id = t.token_to_id(config.bos_token);
    if (!id)
      fail("{}: bos_token \"{}\" is not in the vocabulary of {}",
           (std::filesystem::path(path).parent_path() / "tokenizer_config.json").string(), config.bos_token, path);
    t.bos_ = *id;
  }
  t.chat_template_ = config.chat_template;
  t.chat_template_file_ = config.chat_template_file;
  return t;
}

HfTokenizer HfTokenizer::parse(std::string_view json_text, const std::string& source, const std::string& eod_token) {
  return HfTokenizer(hf::read_pipeline(json_text, source, eod_token));
}

HfTokenizer HfTokenizer::from_json(const nlohmann::json& doc, const std::string& source, const std::string& eod_token) {
  return HfTokenizer(hf::read_pipeline(doc, source, eod_token));
}

std::vector<int32_t> HfTokenizer::encode_impl(std::string_view text, SpecialTokens special) const {
  hf::State& s = hf::thread_state(*p_);
  std::vector<int32_t> out;
  out.reserve(text.size() / 4 + 1);
  hf::encode_text(*p_, text, special, s, out);
  return out;
}

std::string HfTokenizer::decode(std::span<const int32_t> ids) const {
  for (int32_t id : ids)
    if (id < 0 || id >= p_->vocab_size)
      fail("token id {} is outside the vocabulary of {} [0, {})", id, p_->source, p_->vocab_size);
  if (!p_->byte_text.empty()) {
    std::string out;
    for (int32_t id : ids) out += p_->byte_text[static_cast<size_t>(id)];
    return out;
  }
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) tokens.push_back(p_->token_text[static_cast<size_t>(id)]);
  return hf::decode_tokens(*p_, std::move(tokens));
}

int32_t HfTokenizer::vocab_size() const { return p_->vocab_size; }
int32_t HfTokenizer::eod() const { return p_->eod; }
std::string HfTokenizer::name() const { return "tokenizer.json"; }
std::string_view HfTokenizer::mode() const { return p_->byte_level ? "byte-level" : "character"; }
const std::vector<HfAddedToken>& HfTokenizer::added_tokens() const { return p_->added; }

std::vector<int32_t> HfTokenizer::add_special_tokens(std::span<const int32_t> ids) const {
  std::vector<int32_t> out(p_->prefix);
  out.insert(out.end(), ids.begin(), ids.end());
  out.insert(out.end(), p_->suffix.begin(), p_->suffix.end());
  return out;
}

std::optional<int32_t> HfTokenizer::token_to_id(std::string_view token) const {
  auto it = p_->id_of.find(std::string(token));
  if (it == p_->id_of.end()) return std::nullopt;
  return it->second;
}

}  // namespace claw::data
