// Flag tables (core/flag.h) on the command line: bound to CLI11, read from
// a TOML config file (--config), printed as the resolved configuration.
//
// Precedence: defaults < --model preset < TOML file < command-line flags.
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>

#include "claw/core/flag.h"

namespace claw::cli {

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
      // A switch counts its occurrences; CLI11 makes --name=false count -1.
      const std::string sw = switches_[i] > 0 ? "true" : "false";
      flags_[i].set(args, flags_[i].is_switch ? sw : flags_[i].multi ? joined : values_[i]);
    }
  }

 private:
  const std::vector<Flag<Args>>& flags_;
  std::vector<std::string> values_;
  std::vector<std::vector<std::string>> words_;
  std::vector<int> switches_;
  std::vector<CLI::Option*> options_;
};

// The configuration a command prints before it runs: "`title`:" and one
// `  flag value` line per entry (tests/e2e/cli/flags_apply.py reads it).
std::string config_table(const std::string& title, const std::vector<std::pair<std::string, std::string>>& lines);
// Each flag of a table with its value in `args`, for config_table.
template <typename Args>
std::vector<std::pair<std::string, std::string>> flag_values(const std::vector<Flag<Args>>& flags, const Args& args) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const Flag<Args>& f : flags) out.emplace_back(f.name, f.get(args));
  return out;
}

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
