#include "claw/serve/text_stream.h"

#include <algorithm>
#include <span>
#include <string_view>

namespace claw::serve {
namespace {

// Length of the longest valid UTF-8 prefix that does not end inside a
// character whose remaining bytes may still come (a truncated sequence at the
// very end). Invalid bytes elsewhere do not stop it: they are final.
size_t complete_prefix(std::string_view s, size_t from) {
  size_t i = from;
  while (i < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 1;
    if (i + n > s.size()) {
      bool continuation = true;
      for (size_t k = i + 1; k < s.size(); ++k) continuation &= (static_cast<unsigned char>(s[k]) >> 6) == 0x2;
      if (continuation) return i;  // may complete with the next token
      n = 1;
    }
    i += n;
  }
  return i;
}

}  // namespace

TextStream::TextStream(const data::Tokenizer& tokenizer, std::vector<std::string> stop)
    : tok_(tokenizer), stop_(std::move(stop)) {
  std::erase_if(stop_, [](const std::string& s) { return s.empty(); });
}

std::string TextStream::push(int32_t token) {
  if (stopped_) return {};
  ids_.push_back(token);
  // The new token's text: what decoding it after the previous tokens adds to
  // decoding those alone (a tokenizer may decode a token differently after
  // others: SentencePiece's leading space), over a window that starts one
  // token back, so each push costs the same however long the text is.
  const std::span<const int32_t> all_ids(ids_);
  const std::string before = tok_.decode(all_ids.subspan(prefix_, read_ - prefix_));
  const std::string after = tok_.decode(all_ids.subspan(prefix_));
  if (after.size() >= before.size() && after.compare(0, before.size(), before) == 0) {
    all_ += after.substr(before.size());
    prefix_ = read_;
    read_ = ids_.size();
  } else {
    all_ = tok_.decode(ids_);  // the window's start decodes differently: the whole text again
    prefix_ = ids_.size() - 1;
    read_ = ids_.size();
  }
  size_t end = all_.size();
  // A stop string anywhere in the text not yet emitted (it may start in the
  // held-back tail and end in the new token).
  for (const std::string& s : stop_) {
    const size_t from = emitted_.size() >= s.size() ? emitted_.size() - s.size() + 1 : 0;
    const size_t at = all_.find(s, from);
    if (at != std::string::npos && at < end) {
      end = at;
      stopped_ = true;
    }
  }
  if (!stopped_) {
    // Hold back the longest tail that begins some stop string.
    size_t hold = 0;
    for (const std::string& s : stop_)
      for (size_t n = std::min(s.size() - 1, all_.size()); n > hold; --n)
        if (all_.compare(all_.size() - n, n, s, 0, n) == 0) {
          hold = n;
          break;
        }
    end = all_.size() - hold;
    end = std::min(end, complete_prefix(std::string_view(all_).substr(0, end), emitted_.size()));
  }
  if (end <= emitted_.size()) return {};
  std::string piece = all_.substr(emitted_.size(), end - emitted_.size());
  emitted_ += piece;
  return piece;
}

std::string TextStream::finish() {
  if (stopped_ || emitted_.size() >= all_.size()) return {};
  std::string rest = all_.substr(emitted_.size());
  emitted_ += rest;
  return rest;
}

std::string valid_utf8(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    bool ok = n > 0 && i + n <= s.size();
    for (size_t k = 1; ok && k < n; ++k) ok = (static_cast<unsigned char>(s[i + k]) >> 6) == 0x2;
    if (ok && n == 2) ok = c >= 0xC2;  // no overlong forms
    if (ok && n == 3) {
      const unsigned char d = static_cast<unsigned char>(s[i + 1]);
      ok = !(c == 0xE0 && d < 0xA0) && !(c == 0xED && d >= 0xA0);  // overlong; surrogates
    }
    if (ok && n == 4) {
      const unsigned char d = static_cast<unsigned char>(s[i + 1]);
      ok = c <= 0xF4 && !(c == 0xF0 && d < 0x90) && !(c == 0xF4 && d >= 0x90);
    }
    if (ok) {
      out.append(s, i, n);
      i += n;
    } else {
      out += "\xEF\xBF\xBD";
      ++i;
    }
  }
  return out;
}

}  // namespace claw::serve
