#include "claw/core/flag.h"

#include <charconv>
#include <cmath>
#include <map>

#include <fmt/format.h>

#include "claw/core/error.h"

namespace claw {

int64_t parse_int(const std::string& flag, const std::string& text) {
  int64_t v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size())
    fail("--{} expects an integer, got '{}'", flag, text);
  return v;
}

double parse_double(const std::string& flag, const std::string& text) {
  try {
    size_t used = 0;
    double v = std::stod(text, &used);
    if (used == text.size() && std::isfinite(v)) return v;
  } catch (const std::exception&) {
  }
  fail("--{} expects a finite number, got '{}'", flag, text);
}

bool parse_bool(const std::string& flag, const std::string& text) {
  if (text == "true" || text == "1") return true;
  if (text == "false" || text == "0") return false;
  fail("--{} expects true or false, got '{}'", flag, text);
}

std::string format_double(double v) { return fmt::format("{}", v); }

uint64_t parse_size(const std::string& flag, const std::string& text) {
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(text, &used);
  } catch (const std::exception&) {
    fail("{} '{}' is not a size (e.g. 5GB, 500MB, 1000000)", flag, text);
  }
  const std::string unit = text.substr(used);
  static const std::map<std::string, double> units = {
      {"", 1}, {"B", 1}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"KiB", 1024.0}, {"MiB", 1048576.0},
      {"GiB", 1073741824.0}};
  const auto it = units.find(unit);
  if (it == units.end() || !(v > 0)) fail("{} '{}' is not a size (e.g. 5GB, 500MB, 1000000)", flag, text);
  return static_cast<uint64_t>(v * it->second);
}

std::vector<std::string> split_names(const std::string& v) {
  std::vector<std::string> out;
  std::string w;
  for (char c : v + ",") {
    if (c == ',' || c == ' ') {
      if (!w.empty()) out.push_back(w);
      w.clear();
    } else {
      w += c;
    }
  }
  return out;
}
std::string join_names(const std::vector<std::string>& names) {
  std::string s;
  for (const std::string& w : names) s += (s.empty() ? "" : ",") + w;
  return s;
}


}  // namespace claw
