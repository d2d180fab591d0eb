#include "claw/cli/flags.h"

#include <algorithm>
#include <map>

#include <fmt/format.h>
#include <toml++/toml.h>

#include "claw/core/error.h"

namespace claw::cli {

std::vector<std::pair<std::string, std::string>> read_toml_pairs(const std::string& path,
                                                                 const std::vector<std::string>& known_keys,
                                                                 const std::vector<std::string>& switch_keys) {
  toml::table root;
  try {
    root = toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    if (e.source().begin.line == 0) fail("--config {}: cannot read the file: {}", path, e.description());
    fail("--config {}:{}:{}: {}", path, e.source().begin.line, e.source().begin.column, e.description());
  }
  std::vector<std::pair<std::string, std::string>> out;
  auto visit = [&](const toml::table& t, auto& self) -> void {
    for (const auto& [k, node] : t) {
      std::string key(k.str());
      std::replace(key.begin(), key.end(), '_', '-');
      int line = static_cast<int>(node.source().begin.line);
      if (const toml::table* sub = node.as_table()) {
        self(*sub, self);
        continue;
      }
      if (std::find(known_keys.begin(), known_keys.end(), key) == known_keys.end())
        fail("--config {}:{}: unknown key '{}' (keys are `claw train` flag names, e.g. num-layers = 12)", path, line,
             key);
      bool is_switch = std::find(switch_keys.begin(), switch_keys.end(), key) != switch_keys.end();
      std::string text;
      if (auto b = node.template value<bool>(); b && node.is_boolean())
        text = *b ? "true" : "false";
      else if (is_switch)
        fail("--config {}:{}: '{}' is a switch and takes true or false", path, line, key);
      else if (node.is_integer())
        text = std::to_string(*node.template value<int64_t>());
      else if (node.is_floating_point())
        text = format_double(*node.template value<double>());
      else if (node.is_string())
        text = *node.template value<std::string>();
      else if (const toml::array* arr = node.as_array()) {
        for (const auto& el : *arr) {
          if (!el.is_string() && !el.is_number())
            fail("--config {}:{}: '{}' must be an array of strings or numbers", path, line, key);
          std::string word = el.is_string() ? *el.template value<std::string>()
                                            : el.is_integer() ? std::to_string(*el.template value<int64_t>())
                                                              : format_double(*el.template value<double>());
          text += (text.empty() ? "" : " ") + word;
        }
      }
      else
        fail("--config {}:{}: '{}' must be a number, string or boolean", path, line, key);
      out.emplace_back(key, text);
    }
  };
  visit(root, visit);
  return out;
}

std::string config_table(const std::string& title, const std::vector<std::pair<std::string, std::string>>& lines) {
  std::string s = title + ":\n";
  for (const auto& [flag, value] : lines) s += fmt::format("  {:<36} {}\n", flag, value);
  return s;
}

}  // namespace claw::cli
