#include "claw/curate/cleaner.h"

#include <unicode/bytestream.h>
#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/utf8.h>

#include <array>

#include "claw/core/error.h"

namespace claw::curate {
namespace {

// One code point from s at i (well-formed or not: an ill-formed byte gives
// c < 0 and advances one byte, as ICU's U8_NEXT).
inline UChar32 next_code_point(std::string_view s, size_t& i) {
  const size_t left = s.size() - i;
  const int32_t len = static_cast<int32_t>(left < 4 ? left : 4);
  int32_t j = 0;
  UChar32 c;
  U8_NEXT(s.data() + i, j, len, c);
  i += static_cast<size_t>(j);
  return c;
}

inline void append_code_point(std::string& out, UChar32 c) {
  char buf[4];
  int32_t n = 0;
  U8_APPEND_UNSAFE(buf, n, c);
  out.append(buf, static_cast<size_t>(n));
}

// The Windows-1252 byte that decodes to c (Latin-1 for what 1252 leaves
// undefined, as decoders that fall back to it do), or -1.
int cp1252_byte(UChar32 c) {
  if (c >= 0x80 && c <= 0xFF) return c;  // Latin-1 (and C1 controls for 1252's holes)
  static constexpr std::array<std::pair<char16_t, uint8_t>, 27> kSpecial = {{
      {0x20AC, 0x80}, {0x201A, 0x82}, {0x0192, 0x83}, {0x201E, 0x84}, {0x2026, 0x85}, {0x2020, 0x86},
      {0x2021, 0x87}, {0x02C6, 0x88}, {0x2030, 0x89}, {0x0160, 0x8A}, {0x2039, 0x8B}, {0x0152, 0x8C},
      {0x017D, 0x8E}, {0x2018, 0x91}, {0x2019, 0x92}, {0x201C, 0x93}, {0x201D, 0x94}, {0x2022, 0x95},
      {0x2013, 0x96}, {0x2014, 0x97}, {0x02DC, 0x98}, {0x2122, 0x99}, {0x0161, 0x9A}, {0x203A, 0x9B},
      {0x0153, 0x9C}, {0x017E, 0x9E}, {0x0178, 0x9F},
  }};
  for (const auto& [cp, b] : kSpecial)
    if (cp == c) return b;
  return -1;
}

bool is_removed_control(UChar32 c) {
  return (c < 0x20 && c != '\t' && c != '\n' && c != '\r') || c == 0x7F || (c >= 0x80 && c <= 0x9F) || c == 0xFEFF;
}

bool is_horizontal_space(UChar32 c) {
  return c == ' ' || c == '\t' || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

class Cleaner final : public Stage {
 public:
  explicit Cleaner(StageKeys& keys) {
    mojibake_ = keys.boolean("fix_mojibake", true);
    control_ = keys.boolean("remove_control", true);
    form_ = keys.string("normalization", "NFC");
    if (form_ != "NFC" && form_ != "NFKC" && form_ != "none")
      fail("{}: normalization = \"{}\" is not one of \"NFC\", \"NFKC\", \"none\"", keys.where(), form_);
    whitespace_ = keys.boolean("normalize_whitespace", true);
    keys.check_all_read();
  }
  std::string_view kind() const override { return "clean"; }

  std::string_view process(Document& doc, StageCounters& counters) const override {
    auto apply = [&](bool on, const char* name, auto&& fn) {
      if (!on) return;
      std::string out = fn(doc.text);
      if (out != doc.text) {
        counters.add(name);
        doc.text = std::move(out);
      }
    };
    apply(mojibake_, "mojibake_fixed", [](std::string_view t) { return fix_mojibake(t); });
    apply(control_, "control_removed", [](std::string_view t) { return remove_control_chars(t); });
    apply(form_ != "none", "normalized", [&](std::string_view t) { return normalize_unicode(t, form_); });
    apply(whitespace_, "whitespace_fixed", [](std::string_view t) { return normalize_whitespace(t); });
    return doc.text.empty() ? "empty_after_cleaning" : "";
  }

 private:
  bool mojibake_, control_, whitespace_;
  std::string form_;
};

}  // namespace

std::string fix_mojibake(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    const size_t start = i;
    const UChar32 c = next_code_point(text, i);
    const int lead = c >= 0 ? cp1252_byte(c) : -1;
    const int need = lead >= 0xC2 && lead <= 0xDF ? 1 : lead >= 0xE0 && lead <= 0xEF ? 2 : lead >= 0xF0 && lead <= 0xF4 ? 3 : 0;
    if (need > 0) {
      // The bytes the following characters stand for, if they continue the
      // sequence; then check it decodes to one well-formed character.
      char bytes[4] = {static_cast<char>(lead)};
      size_t j = i;
      int got = 0;
      while (got < need && j < text.size()) {
        const UChar32 d = next_code_point(text, j);
        const int b = d >= 0 ? cp1252_byte(d) : -1;
        if (b < 0x80 || b > 0xBF) break;
        bytes[1 + got++] = static_cast<char>(b);
      }
      if (got == need) {
        int32_t k = 0;
        UChar32 decoded;
        U8_NEXT(bytes, k, need + 1, decoded);
        if (decoded >= 0 && k == need + 1) {
          append_code_point(out, decoded);
          i = j;
          continue;
        }
      }
    }
    out.append(text.substr(start, i - start));
  }
  return out;
}

std::string remove_control_chars(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const size_t start = i;
    const UChar32 c = next_code_point(text, i);
    if (c < 0 || !is_removed_control(c)) out.append(text.substr(start, i - start));
  }
  return out;
}

std::string normalize_whitespace(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  int newlines = 0;       // newlines since the last other character
  bool space = false;     // a horizontal space is pending
  for (size_t i = 0; i < text.size();) {
    const size_t start = i;
    UChar32 c = next_code_point(text, i);
    if (c == '\r') {
      if (i < text.size() && text[i] == '\n') ++i;
      c = '\n';
    }
    if (c == '\n') {
      space = false;  // drops spaces at the end of a line
      ++newlines;
      continue;
    }
    if (is_horizontal_space(c)) {
      space = true;
      continue;
    }
    if (!out.empty()) {
      if (newlines > 0) out.append(newlines >= 2 ? "\n\n" : "\n");
      else if (space) out.push_back(' ');
    }
    newlines = 0, space = false;
    out.append(text.substr(start, i - start));
  }
  return out;
}

std::string normalize_unicode(std::string_view text, std::string_view form) {
  UErrorCode status = U_ZERO_ERROR;
  const icu::Normalizer2* n =
      form == "NFKC" ? icu::Normalizer2::getNFKCInstance(status) : icu::Normalizer2::getNFCInstance(status);
  if (U_FAILURE(status)) fail("ICU has no {} normalizer: {}", form, u_errorName(status));
  const icu::StringPiece piece(text.data(), static_cast<int32_t>(text.size()));
  if (n->isNormalizedUTF8(piece, status) && U_SUCCESS(status)) return std::string(text);
  status = U_ZERO_ERROR;
  std::string out;
  icu::StringByteSink<std::string> sink(&out, static_cast<int32_t>(text.size()));
  n->normalizeUTF8(0, piece, sink, nullptr, status);
  if (U_FAILURE(status)) fail("{} normalization failed: {} (is the text valid UTF-8?)", form, u_errorName(status));
  return out;
}

std::unique_ptr<Stage> make_cleaner(StageKeys& keys) { return std::make_unique<Cleaner>(keys); }

}  // namespace claw::curate
