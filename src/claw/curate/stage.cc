#include "claw/curate/stage.h"

#include <algorithm>

#include <fmt/format.h>

#include "claw/core/error.h"

namespace claw::curate {

StageKeys::StageKeys(const toml::table& table, std::string where) : table_(table), where_(std::move(where)) {
  read_.push_back("kind");
}

namespace {

const char* type_name(const toml::node& n) {
  if (n.is_string()) return "a string";
  if (n.is_integer()) return "an integer";
  if (n.is_floating_point()) return "a number";
  if (n.is_boolean()) return "a boolean";
  if (n.is_array()) return "an array";
  if (n.is_table()) return "a table";
  return "a date or time";
}

}  // namespace

double StageKeys::number(std::string_view key, double fallback) {
  read_.emplace_back(key);
  const toml::node* n = table_.get(key);
  if (!n) return fallback;
  if (auto v = n->value<double>(); v && (n->is_integer() || n->is_floating_point())) return *v;
  throw Error(fmt::format("{}: key '{}' must be a number, got {}", where_, key, type_name(*n)));
}

int64_t StageKeys::integer(std::string_view key, int64_t fallback) {
  read_.emplace_back(key);
  const toml::node* n = table_.get(key);
  if (!n) return fallback;
  if (n->is_integer()) return *n->value<int64_t>();
  throw Error(fmt::format("{}: key '{}' must be an integer, got {}", where_, key, type_name(*n)));
}

bool StageKeys::boolean(std::string_view key, bool fallback) {
  read_.emplace_back(key);
  const toml::node* n = table_.get(key);
  if (!n) return fallback;
  if (n->is_boolean()) return *n->value<bool>();
  throw Error(fmt::format("{}: key '{}' must be true or false, got {}", where_, key, type_name(*n)));
}

std::string StageKeys::string(std::string_view key, std::string fallback) {
  read_.emplace_back(key);
  const toml::node* n = table_.get(key);
  if (!n) return fallback;
  if (n->is_string()) return *n->value<std::string>();
  throw Error(fmt::format("{}: key '{}' must be a string, got {}", where_, key, type_name(*n)));
}

std::vector<std::string> StageKeys::strings(std::string_view key, std::vector<std::string> fallback) {
  read_.emplace_back(key);
  const toml::node* n = table_.get(key);
  if (!n) return fallback;
  std::vector<std::string> out;
  if (const toml::array* a = n->as_array()) {
    for (const toml::node& e : *a) {
      if (!e.is_string())
        throw Error(fmt::format("{}: key '{}' must be an array of strings, has {}", where_, key, type_name(e)));
      out.push_back(*e.value<std::string>());
    }
    return out;
  }
  throw Error(fmt::format("{}: key '{}' must be an array of strings, got {}", where_, key, type_name(*n)));
}

std::vector<std::pair<int64_t, double>> StageKeys::number_pairs(std::string_view key,
                                                                std::vector<std::pair<int64_t, double>> fallback) {
  read_.emplace_back(key);
  const toml::node* n = table_.get(key);
  if (!n) return fallback;
  const toml::array* a = n->as_array();
  auto bad = [&](const char* got) {
    return Error(fmt::format("{}: key '{}' must be an array of [integer, number] pairs, e.g. [[2, 0.2], [3, 0.18]]; "
                             "has {}", where_, key, got));
  };
  if (!a) throw bad(type_name(*n));
  std::vector<std::pair<int64_t, double>> out;
  for (const toml::node& e : *a) {
    const toml::array* pair = e.as_array();
    if (!pair || pair->size() != 2 || !(*pair)[0].is_integer() ||
        !((*pair)[1].is_integer() || (*pair)[1].is_floating_point()))
      throw bad(pair ? "a pair that is not [integer, number]" : type_name(e));
    out.emplace_back(*(*pair)[0].value<int64_t>(), *(*pair)[1].value<double>());
  }
  return out;
}

std::map<std::string, double> StageKeys::numbers(std::string_view key) {
  read_.emplace_back(key);
  std::map<std::string, double> out;
  const toml::node* n = table_.get(key);
  if (!n) return out;
  const toml::table* t = n->as_table();
  if (!t) throw Error(fmt::format("{}: key '{}' must be a table of numbers ({{ fr = 0.5 }}), got {}", where_, key, type_name(*n)));
  for (const auto& [k, v] : *t) {
    if (!v.is_integer() && !v.is_floating_point())
      throw Error(fmt::format("{}: {}.{} must be a number, got {}", where_, key, k.str(), type_name(v)));
    out[std::string(k.str())] = *v.value<double>();
  }
  return out;
}

bool StageKeys::optional_number(std::string_view key, double fallback, double& value) {
  const toml::node* n = table_.get(key);
  if (n && n->is_boolean()) {
    read_.emplace_back(key);
    if (*n->value<bool>())
      throw Error(fmt::format("{}: key '{}' takes a number, or false to switch the check off", where_, key));
    return false;
  }
  value = number(key, fallback);
  return true;
}

void StageKeys::check_all_read() const {
  for (const auto& [k, v] : table_) {
    if (std::find(read_.begin(), read_.end(), k.str()) != read_.end()) continue;
    std::vector<std::string> known(read_.begin(), read_.end());
    std::sort(known.begin(), known.end());
    known.erase(std::unique(known.begin(), known.end()), known.end());
    throw Error(fmt::format("{}: unknown key '{}' (this stage takes: {})", where_, k.str(), fmt::join(known, ", ")));
  }
}

}  // namespace claw::curate
