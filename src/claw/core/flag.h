// A flag declared once (STYLE.md #18): its Megatron spelling, a help line,
// a parser that writes a typed config field (throwing claw::Error that names
// the flag and what is valid) and a printer for the resolved value. The
// command line (cli/flags.h binds a table to CLI11), TOML config files, the
// printed configuration and a checkpoint's recorded model
// (model/config_flags.h) all read the same tables.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace claw {

template <typename Args>
struct Flag {
  std::string name;  // without dashes, e.g. "num-layers"
  std::string help;
  bool is_switch = false;  // present/absent (TOML: true/false), no value on the command line
  std::function<void(Args&, const std::string&)> set;
  std::function<std::string(const Args&)> get;
  std::string type = "TEXT";  // shown in --help
  bool multi = false;         // takes several words (set() gets them joined by spaces)
};

// Value parsers shared by the flag tables; each names the flag in its error.
int64_t parse_int(const std::string& flag, const std::string& text);
double parse_double(const std::string& flag, const std::string& text);
bool parse_bool(const std::string& flag, const std::string& text);
std::string format_double(double v);
// A byte count: 5GB, 500MB, 512MiB, 1000000.
uint64_t parse_size(const std::string& flag, const std::string& text);

// Flag<Args> factories over a field accessor `Field& (*)(Args&)`.
template <typename Args, typename Get>
Flag<Args> int_flag(std::string name, std::string help, Get field) {
  return {name, std::move(help), false,
          [name, field](Args& a, const std::string& v) { field(a) = static_cast<std::remove_reference_t<decltype(field(a))>>(parse_int(name, v)); },
          [field](const Args& a) { return std::to_string(field(const_cast<Args&>(a))); }, "INT"};
}
template <typename Args, typename Get>
Flag<Args> double_flag(std::string name, std::string help, Get field) {
  return {name, std::move(help), false,
          [name, field](Args& a, const std::string& v) { field(a) = parse_double(name, v); },
          [field](const Args& a) { return format_double(field(const_cast<Args&>(a))); }, "FLOAT"};
}
template <typename Args, typename Get>
Flag<Args> string_flag(std::string name, std::string help, Get field) {
  return {name, std::move(help), false, [field](Args& a, const std::string& v) { field(a) = v; },
          [field](const Args& a) { return field(const_cast<Args&>(a)); }};
}
// A list of words (e.g. --data-path W1 P1 W2 P2); set() splits on spaces.
template <typename Args, typename Get>
Flag<Args> words_flag(std::string name, std::string help, Get field) {
  Flag<Args> f{name, std::move(help), false,
               [field](Args& a, const std::string& v) {
                 auto& out = field(a);
                 out.clear();
                 for (size_t b = v.find_first_not_of(' '); b != std::string::npos;) {
                   size_t e = v.find(' ', b);
                   out.push_back(v.substr(b, e == std::string::npos ? std::string::npos : e - b));
                   b = e == std::string::npos ? e : v.find_first_not_of(' ', e);
                 }
               },
               [field](const Args& a) {
                 std::string s;
                 for (const auto& w : field(const_cast<Args&>(a))) s += (s.empty() ? "" : " ") + w;
                 return s;
               },
               "WORDS"};
  f.multi = true;
  return f;
}

// A boolean switch; `set_to` is the field's value when the switch is given.
template <typename Args, typename Get>
Flag<Args> switch_flag(std::string name, std::string help, Get field, bool set_to = true) {
  return {name, std::move(help), true,
          [name, field, set_to](Args& a, const std::string& v) { field(a) = parse_bool(name, v) ? set_to : !set_to; },
          [field, set_to](const Args& a) { return field(const_cast<Args&>(a)) == set_to ? "true" : "false"; }};
}

// A list flag's value: names separated by commas or spaces, and back.
std::vector<std::string> split_names(const std::string& v);
std::string join_names(const std::vector<std::string>& names);

// Two flag tables as one.
template <typename T>
std::vector<T> concat(std::vector<T> a, const std::vector<T>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

}  // namespace claw
