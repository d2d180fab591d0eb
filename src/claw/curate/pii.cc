#include "claw/curate/pii.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cstring>

namespace claw::curate {
namespace {

inline bool is_digit(char c) { return c >= '0' && c <= '9'; }
inline bool is_alpha(char c) { return (c | 0x20) >= 'a' && (c | 0x20) <= 'z'; }
inline bool is_alnum(char c) { return is_digit(c) || is_alpha(c); }
inline bool is_hex(char c) { return is_digit(c) || ((c | 0x20) >= 'a' && (c | 0x20) <= 'f'); }
inline bool is_local_char(char c) { return is_alnum(c) || c == '.' || c == '_' || c == '%' || c == '+' || c == '-'; }

struct Span {
  size_t begin = 0, end = 0;  // end == 0: none
};

// An e-mail address around the '@' at `at`: a local part of
// [A-Za-z0-9._%+-] not starting or ending with '.', and a domain of
// dot-separated labels of [A-Za-z0-9-] ending in a TLD of 2+ letters.
Span match_email(std::string_view t, size_t at) {
  size_t b = at;
  while (b > 0 && is_local_char(t[b - 1])) --b;
  while (b < at && t[b] == '.') ++b;
  if (b == at || t[at - 1] == '.') return {};
  size_t e = at + 1, last_dot = 0;
  size_t label = 0;
  while (e < t.size()) {
    if (is_alnum(t[e]) || t[e] == '-') {
      ++label, ++e;
    } else if (t[e] == '.' && label > 0 && e + 1 < t.size() && is_alnum(t[e + 1])) {
      last_dot = e, label = 0, ++e;
    } else {
      break;
    }
  }
  if (last_dot == 0) return {};
  for (size_t k = last_dot + 1; k < e; ++k)
    if (!is_alpha(t[k])) return {};
  if (e - last_dot - 1 < 2) return {};
  return {b, e};
}

// An IP address starting at i: the longest run of [0-9A-Fa-f:.] that
// inet_pton accepts as IPv4 or IPv6 (shrunk from the right past trailing
// punctuation, "1.2.3.4." at the end of a sentence).
Span match_ip(std::string_view t, size_t i) {
  if (i > 0 && (is_alnum(t[i - 1]) || t[i - 1] == '.' || t[i - 1] == ':')) return {};
  size_t e = i, colons = 0, dots = 0;
  while (e < t.size() && e - i < 45 && (is_hex(t[e]) || t[e] == ':' || t[e] == '.')) {
    colons += t[e] == ':', dots += t[e] == '.';
    ++e;
  }
  if (colons < 2 && dots != 3 && dots != 4) return {};
  if (e < t.size() && is_alnum(t[e])) return {};
  for (; e > i; --e) {
    if (t[e - 1] == '.' || (t[e - 1] == ':' && !(e - i >= 2 && t[e - 2] == ':'))) continue;
    char buf[64];
    std::memcpy(buf, t.data() + i, e - i);
    buf[e - i] = 0;
    unsigned char addr[16];
    if (inet_pton(AF_INET, buf, addr) == 1) return {i, e};
    if (colons >= 2 && inet_pton(AF_INET6, buf, addr) == 1) return {i, e};
    break;
  }
  return {};
}

// Digits in groups split by one separator from `seps`; returns the span
// and counts digits and groups.
struct DigitRun {
  Span span;
  int digits = 0, groups = 0;
};
DigitRun digit_run(std::string_view t, size_t i, std::string_view seps, bool parens) {
  DigitRun r;
  size_t e = i;
  bool in_group = false, open = false;
  while (e < t.size()) {
    const char c = t[e];
    if (is_digit(c)) {
      if (!in_group) ++r.groups;
      in_group = true;
      ++r.digits, ++e;
      if (r.digits > 19) return {};
      continue;
    }
    if (parens && c == '(' && !open && e + 1 < t.size() && is_digit(t[e + 1])) {
      open = true, in_group = false, ++e;
      continue;
    }
    if (parens && c == ')' && open) {
      open = false, in_group = false, ++e;
      if (e < t.size() && t[e] == ' ' && e + 1 < t.size() && is_digit(t[e + 1])) ++e;
      continue;
    }
    if (in_group && seps.find(c) != std::string_view::npos && e + 1 < t.size() &&
        (is_digit(t[e + 1]) || (parens && t[e + 1] == '('))) {
      in_group = false, ++e;
      continue;
    }
    break;
  }
  if (open) return {};
  r.span = {i, e};
  return r;
}

class PiiRedactor final : public Stage {
 public:
  explicit PiiRedactor(StageKeys& keys) {
    email_ = keys.boolean("email", true);
    ip_ = keys.boolean("ip", true);
    phone_ = keys.boolean("phone", true);
    card_ = keys.boolean("credit_card", true);
    email_token_ = keys.string("email_token", "<EMAIL_ADDRESS>");
    ip_token_ = keys.string("ip_token", "<IP_ADDRESS>");
    phone_token_ = keys.string("phone_token", "<PHONE_NUMBER>");
    card_token_ = keys.string("credit_card_token", "<CREDIT_CARD>");
    keys.check_all_read();
  }
  std::string_view kind() const override { return "pii"; }

  std::string_view process(Document& doc, StageCounters& counters) const override {
    const std::string_view t = doc.text;
    std::string out;
    size_t copied = 0;  // t[0, copied) is in out
    int64_t emails = 0, ips = 0, phones = 0, cards = 0;
    auto replace = [&](Span s, const std::string& token, int64_t& n) {
      if (out.empty()) out.reserve(t.size());
      out.append(t.substr(copied, s.begin - copied));
      out.append(token);
      copied = s.end;
      ++n;
    };
    // Each '@' and each start of a digit or hex run is a candidate; the
    // scan resumes after a replacement.
    for (size_t i = 0; i < t.size();) {
      const char c = t[i];
      if (email_ && c == '@') {
        const Span s = match_email(t, i);
        if (s.end > 0 && s.begin >= copied) {
          replace(s, email_token_, emails);
          i = s.end;
          continue;
        }
      }
      const bool boundary = i == 0 || !is_alnum(t[i - 1]);
      if (boundary && (is_hex(c) || c == ':') && ip_) {
        const Span s = match_ip(t, i);
        if (s.end > 0) {
          replace(s, ip_token_, ips);
          i = s.end;
          continue;
        }
      }
      if (boundary && is_digit(c) && card_) {
        const DigitRun r = digit_run(t, i, " -", false);
        const bool word_end = r.span.end == t.size() || !is_alnum(t[r.span.end]);
        if (r.span.end > 0 && word_end && r.digits >= 13 && r.digits <= 19 &&
            (r.groups == 1 || r.groups >= 3) && luhn_valid(t.substr(i, r.span.end - i))) {
          replace(r.span, card_token_, cards);
          i = r.span.end;
          continue;
        }
      }
      if (phone_ && (i == 0 || !is_alnum(t[i - 1])) && (c == '+' || c == '(' || is_digit(c))) {
        const size_t start = i + (c == '+');
        if (start < t.size() && (is_digit(t[start]) || t[start] == '(')) {
          const DigitRun r = digit_run(t, start, " -.", true);
          const bool word_end = r.span.end == t.size() || !is_alnum(t[r.span.end]);
          // Numbers of 10-15 digits written in 3+ groups (or after '+'):
          // plain long numbers, dates and amounts stay.
          if (r.span.end > 0 && word_end && r.digits >= 10 && r.digits <= 15 && (r.groups >= 3 || c == '+')) {
            replace({i, r.span.end}, phone_token_, phones);
            i = r.span.end;
            continue;
          }
        }
      }
      // Skip the rest of a word, or the whole of a grouped number that was
      // not redacted (its tail is no phone number either), so candidates
      // start at boundaries.
      if (is_alnum(c)) {
        const size_t from = i;
        while (i < t.size() && is_alnum(t[i])) ++i;
        if (is_digit(c)) i = std::max(i, digit_run(t, from, " -.", true).span.end);
      } else {
        ++i;
      }
    }
    if (emails) counters.add("email", emails);
    if (ips) counters.add("ip", ips);
    if (phones) counters.add("phone", phones);
    if (cards) counters.add("credit_card", cards);
    if (!out.empty() || copied > 0) {
      out.append(t.substr(copied));
      doc.text = std::move(out);
    }
    return "";
  }

 private:
  bool email_, ip_, phone_, card_;
  std::string email_token_, ip_token_, phone_token_, card_token_;
};

}  // namespace

bool luhn_valid(std::string_view number) {
  int sum = 0, n = 0;
  for (size_t k = number.size(); k-- > 0;) {
    if (!is_digit(number[k])) continue;
    int d = number[k] - '0';
    if (n++ % 2 == 1) d = d * 2 > 9 ? d * 2 - 9 : d * 2;
    sum += d;
  }
  return n > 0 && sum % 10 == 0;
}

std::unique_ptr<Stage> make_pii_redactor(StageKeys& keys) { return std::make_unique<PiiRedactor>(keys); }

}  // namespace claw::curate
