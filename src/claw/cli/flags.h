// Flags declared once (STYLE.md #18): each Flag has its Megatron spelling, a
// help line, a parser that writes a typed config field (throwing claw::Error
// that names the flag and what is valid) and a printer for the resolved
// value. The same table drives the command line (CLI11), the TOML config
// file (--config) and the "resolved config" printout.
//
// Precedence: defaults < --model preset < TOML file < command-line flags.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace claw::cli {

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

// Registers `flags` on a CLI11 app; after app.parse(), apply() writes the
// given ones into args in table order.
template <typename Args>
class FlagBinder {
 public:
  FlagBinder(CLI::App& app, const std::vector<Flag<Args>>& flags, const Args& defaults) : flags_(flags) {
    values_.resize(flags_.size());
    words_.resize(flags_.size());
    switches_.assign(flags_.size(), 0);
    options_.resize(flags_.size());
    for (size_t i = 0; i < flags_.size(); ++i) {
      const auto& f = flags_[i];
      if (f.is_switch)
        options_[i] = app.add_flag("--" + f.name, switches_[i], f.help);
      else if (f.multi)
        options_[i] = app.add_option("--" + f.name, words_[i], f.help)->type_name(f.type)->expected(1, 1 << 20);
      else
        options_[i] =
            app.add_option("--" + f.name, values_[i], f.help)->default_str(f.get(defaults))->type_name(f.type);
    }
  }
  bool given(const std::string& name) const {
    for (size_t i = 0; i < flags_.size(); ++i)
      if (flags_[i].name == name) return options_[i]->count() > 0;
    return false;
  }
  std::string value(const std::string& name) const {
    for (size_t i = 0; i < flags_.size(); ++i)
      if (flags_[i].name == name) return values_[i];
    return "";
  }
  // Applies every given flag except those in `skip`.
  void apply(Args& args, const std::vector<std::string>& skip = {}) const {
    for (size_t i = 0; i < flags_.size(); ++i) {
      if (options_[i]->count() == 0) continue;
      if (std::find(skip.begin(), skip.end(), flags_[i].name) != skip.end()) continue;
      std::string joined;
      for (const auto& w : words_[i]) joined += (joined.empty() ? "" : " ") + w;
      flags_[i].set(args, flags_[i].is_switch ? "true" : flags_[i].multi ? joined : values_[i]);
    }
  }

 private:
  const std::vector<Flag<Args>>& flags_;
  std::vector<std::string> values_;
  std::vector<std::vector<std::string>> words_;
  std::vector<int> switches_;
  std::vector<CLI::Option*> options_;
};

// Reads a TOML file of `key = value` pairs (keys are flag names; '_' and '-'
// are interchangeable; tables only group keys, their names are ignored) and
// returns (flag name, value text); an array of strings becomes its elements
// joined by spaces (for multi-word flags such as data-path). Unknown keys and values of the
// wrong type are errors naming the file, key and line.
template <typename Args>
std::vector<std::pair<std::string, std::string>> read_toml_config(const std::string& path,
                                                                  const std::vector<Flag<Args>>& flags,
                                                                  const std::vector<std::string>& extra_keys);
std::vector<std::pair<std::string, std::string>> read_toml_pairs(const std::string& path,
                                                                 const std::vector<std::string>& known_keys,
                                                                 const std::vector<std::string>& switch_keys);

template <typename Args>
std::vector<std::pair<std::string, std::string>> read_toml_config(const std::string& path,
                                                                  const std::vector<Flag<Args>>& flags,
                                                                  const std::vector<std::string>& extra_keys) {
  std::vector<std::string> known = extra_keys, switches;
  for (const auto& f : flags) {
    known.push_back(f.name);
    if (f.is_switch) switches.push_back(f.name);
  }
  return read_toml_pairs(path, known, switches);
}

}  // namespace claw::cli
