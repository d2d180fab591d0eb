#include "claw/data/jinja_builtins.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <ctime>

#include <fmt/format.h>

namespace claw::data::jinja {
namespace {

// UTF-8 code points of `s`, each as its bytes (Python indexes strings by
// code point).
std::vector<std::string> code_points(const std::string& s) {
  std::vector<std::string> out;
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    const size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
    out.push_back(s.substr(i, n));
    i += n;
  }
  return out;
}

bool is_space(char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; }

std::string strip(const std::string& s, const Value& chars, bool left, bool right) {
  auto drop = [&](char c) {
    return chars.is_string() ? chars.as_string().find(c) != std::string::npos : is_space(c);
  };
  size_t a = 0, b = s.size();
  if (left)
    while (a < b && drop(s[a])) ++a;
  if (right)
    while (b > a && drop(s[b - 1])) --b;
  return s.substr(a, b - a);
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}
std::string upper(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::toupper(c); });
  return s;
}
std::string capitalize(const std::string& s) {
  std::string out = lower(s);
  if (!out.empty()) out[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(out[0])));
  return out;
}
std::string title(const std::string& s) {
  std::string out = s;
  bool start = true;
  for (char& c : out) {
    const bool alpha = std::isalpha(static_cast<unsigned char>(c)) != 0;
    c = static_cast<char>(start && alpha ? std::toupper(static_cast<unsigned char>(c))
                                         : std::tolower(static_cast<unsigned char>(c)));
    start = !alpha;
  }
  return out;
}
std::string replace_all(std::string s, const std::string& from, const std::string& to, int64_t count) {
  if (from.empty()) return s;
  size_t at = 0;
  for (int64_t n = 0; (count < 0 || n < count) && (at = s.find(from, at)) != std::string::npos; ++n) {
    s.replace(at, from.size(), to);
    at += to.size();
  }
  return s;
}

List split(const std::string& s, const Value& sep, int64_t maxsplit) {
  List out;
  if (!sep.is_string()) {  // runs of white space, leading and trailing ignored
    size_t i = 0;
    while (i < s.size()) {
      while (i < s.size() && is_space(s[i])) ++i;
      if (i >= s.size()) break;
      if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
        out.emplace_back(strip(s.substr(i), Value(), false, true));
        return out;
      }
      size_t j = i;
      while (j < s.size() && !is_space(s[j])) ++j;
      out.emplace_back(s.substr(i, j - i));
      i = j;
    }
    return out;
  }
  const std::string& d = sep.as_string();
  size_t at = 0;
  for (;;) {
    const size_t next = maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit ? std::string::npos
                                                                                      : s.find(d, at);
    if (next == std::string::npos) {
      out.emplace_back(s.substr(at));
      return out;
    }
    out.emplace_back(s.substr(at, next - at));
    at = next + d.size();
  }
}

bool starts_or_ends(const std::string& s, const Value& what, bool start) {
  auto one = [&](const std::string& p) { return start ? s.starts_with(p) : s.ends_with(p); };
  if (what.is_list()) {
    for (const Value& p : what.as_list())
      if (p.is_string() && one(p.as_string())) return true;
    return false;
  }
  return what.is_string() && one(what.as_string());
}

int compare_values(const Value& a, const Value& b, bool case_sensitive, Env& env) {
  if ((a.is_number() || a.is_bool()) && (b.is_number() || b.is_bool()))
    return a.as_double() < b.as_double() ? -1 : a.as_double() > b.as_double() ? 1 : 0;
  if (a.is_string() && b.is_string()) {
    const std::string x = case_sensitive ? a.as_string() : lower(a.as_string());
    const std::string y = case_sensitive ? b.as_string() : lower(b.as_string());
    return x < y ? -1 : x > y ? 1 : 0;
  }
  env.error(fmt::format("cannot compare {} and {}", a.type_name(), b.type_name()));
}

Value bound(const std::string& name, std::function<Value(const Args&)> fn) { return Value(Callable{name, std::move(fn)}); }

Value string_method(const std::string& s, const std::string& m, Env& env) {
  if (m == "strip" || m == "lstrip" || m == "rstrip")
    return bound(m, [s, m](const Args& a) {
      return Value(strip(s, a.get(0, "chars", Value()), m != "rstrip", m != "lstrip"));
    });
  if (m == "split")
    return bound(m, [s](const Args& a) {
      const Value mx = a.get(1, "maxsplit", Value(-1));
      return Value(split(s, a.get(0, "sep", Value()), mx.is_number() ? mx.as_int() : -1));
    });
  if (m == "startswith" || m == "endswith")
    return bound(m, [s, m](const Args& a) { return Value(starts_or_ends(s, a.get(0, "prefix", Value()), m == "startswith")); });
  if (m == "upper") return bound(m, [s](const Args&) { return Value(upper(s)); });
  if (m == "lower") return bound(m, [s](const Args&) { return Value(lower(s)); });
  if (m == "title") return bound(m, [s](const Args&) { return Value(title(s)); });
  if (m == "capitalize") return bound(m, [s](const Args&) { return Value(capitalize(s)); });
  if (m == "replace")
    return bound(m, [s, &env](const Args& a) {
      const Value from = a.get(0, "old", Value()), to = a.get(1, "new", Value()), n = a.get(2, "count", Value(-1));
      if (!from.is_string() || !to.is_string()) env.error("str.replace() takes two strings");
      return Value(replace_all(s, from.as_string(), to.as_string(), n.is_number() ? n.as_int() : -1));
    });
  if (m == "find")
    return bound(m, [s](const Args& a) {
      const Value x = a.get(0, "sub", Value());
      const size_t at = x.is_string() ? s.find(x.as_string()) : std::string::npos;
      return Value(at == std::string::npos ? int64_t{-1} : static_cast<int64_t>(code_points(s.substr(0, at)).size()));
    });
  if (m == "count")
    return bound(m, [s](const Args& a) {
      const Value x = a.get(0, "sub", Value());
      int64_t n = 0;
      if (x.is_string() && !x.as_string().empty())
        for (size_t at = 0; (at = s.find(x.as_string(), at)) != std::string::npos; at += x.as_string().size()) ++n;
      return Value(n);
    });
  if (m == "join")
    return bound(m, [s, &env](const Args& a) {
      std::string out;
      bool first = true;
      for (const Value& x : iterate(a.get(0, "iterable", Value()), env)) {
        out += (first ? "" : s) + x.str();
        first = false;
      }
      return Value(out);
    });
  if (m == "format")  // "{}", "{0}", "{name}" (no format specs)
    return bound(m, [s, &env](const Args& a) {
      std::string out;
      size_t next = 0;
      for (size_t i = 0; i < s.size(); ++i) {
        if (s[i] == '{' && i + 1 < s.size() && s[i + 1] == '{') {
          out += '{', ++i;
        } else if (s[i] == '}' && i + 1 < s.size() && s[i + 1] == '}') {
          out += '}', ++i;
        } else if (s[i] == '{') {
          const size_t close = s.find('}', i);
          if (close == std::string::npos) env.error("str.format(): a '{' is not closed");
          const std::string field = s.substr(i + 1, close - i - 1);
          if (field.find_first_of(":!") != std::string::npos) env.error("str.format(): format specs are not supported");
          const Value v = field.empty() ? a.get(next++, "", Value())
                          : std::isdigit(static_cast<unsigned char>(field[0])) ? a.get(std::stoul(field), "", Value())
                                                                              : a.get(SIZE_MAX, field, Value());
          out += v.str();
          i = close;
        } else {
          out += s[i];
        }
      }
      return Value(out);
    });
  if (m == "isdigit" || m == "isalpha" || m == "isspace" || m == "isalnum")
    return bound(m, [s, m](const Args&) {
      auto pred = m == "isdigit" ? ::isdigit : m == "isalpha" ? ::isalpha : m == "isspace" ? ::isspace : ::isalnum;
      return Value(!s.empty() && std::all_of(s.begin(), s.end(), [&](unsigned char c) { return pred(c) != 0; }));
    });
  return Value();
}

}  // namespace

List iterate(const Value& v, Env& env) {
  switch (v.kind()) {
    case Value::Kind::undefined: return {};
    case Value::Kind::list: return v.as_list();
    case Value::Kind::dict: {
      List keys;
      for (size_t i = 0; i < v.as_dict().items.size(); ++i) keys.push_back(v.as_dict().key(i));
      return keys;
    }
    case Value::Kind::string: {
      List out;
      for (std::string& c : code_points(v.as_string())) out.emplace_back(std::move(c));
      return out;
    }
    default: env.error(fmt::format("'{}' object is not iterable", v.type_name()));
  }
}

Value get_attr(const Value& obj, const std::string& attr, Env& env) {
  if (obj.is_dict()) {
    const Dict& d = obj.as_dict();
    if (const Value* v = d.find(attr)) return *v;
    if (d.is_namespace) return Value();
    if (attr == "items")
      return bound(attr, [obj](const Args&) {
        List out;
        const Dict& d = obj.as_dict();
        for (size_t i = 0; i < d.items.size(); ++i) out.emplace_back(List{d.key(i), d.items[i].second});
        return Value(out);
      });
    if (attr == "keys" || attr == "values")
      return bound(attr, [obj, attr](const Args&) {
        List out;
        const Dict& d = obj.as_dict();
        for (size_t i = 0; i < d.items.size(); ++i) out.push_back(attr == "keys" ? d.key(i) : d.items[i].second);
        return Value(out);
      });
    if (attr == "get")
      return bound(attr, [obj](const Args& a) {
        const Value k = a.get(0, "key", Value());
        const Value* v = k.is_string() ? obj.as_dict().find(k.as_string()) : nullptr;
        return v ? *v : a.get(1, "default", Value::none());
      });
    return Value();
  }
  if (obj.is_string()) return string_method(obj.as_string(), attr, env);
  if (obj.is_list() && (attr == "append" || attr == "pop" || attr == "extend" || attr == "insert"))
    env.error(fmt::format("list.{}() would change a list, which the sandbox forbids (use a namespace)", attr));
  if (obj.is_undefined()) env.error(fmt::format("'{}' of an undefined value", attr));
  return Value();
}

Value get_item(const Value& obj, const Value& key, Env& env) {
  if (obj.is_dict()) {  // keys are held as strings: 0 and "0" are one key (dict literals with numbers)
    if (key.is_undefined() || key.is_list() || key.is_dict()) return Value();
    const Value* v = obj.as_dict().find(key.str());
    return v ? *v : Value();
  }
  if (obj.is_generator()) env.error("'generator' object is not subscriptable");
  if (obj.is_list() || obj.is_string()) {
    if (!key.is_number() && !key.is_bool()) {
      if (key.is_string() && obj.is_string()) return get_attr(obj, key.as_string(), env);
      env.error(fmt::format("{} indices must be integers, not {}", obj.type_name(), key.type_name()));
    }
    if (obj.is_list()) {
      const List& l = obj.as_list();
      int64_t i = key.as_int();
      if (i < 0) i += static_cast<int64_t>(l.size());
      return i >= 0 && i < static_cast<int64_t>(l.size()) ? l[static_cast<size_t>(i)] : Value();
    }
    const std::vector<std::string> cps = code_points(obj.as_string());
    int64_t i = key.as_int();
    if (i < 0) i += static_cast<int64_t>(cps.size());
    return i >= 0 && i < static_cast<int64_t>(cps.size()) ? Value(cps[static_cast<size_t>(i)]) : Value();
  }
  if (obj.is_undefined()) env.error("an item of an undefined value");
  return Value();
}

Value get_slice(const Value& obj, const Value& start, const Value& stop, const Value& step, Env& env) {
  const bool str = obj.is_string();
  if (!str && !obj.is_list()) env.error(fmt::format("'{}' object is not subscriptable", obj.type_name()));
  const List items = str ? iterate(obj, env) : obj.as_list();
  const auto n = static_cast<int64_t>(items.size());
  const int64_t st = step.is_number() ? step.as_int() : 1;
  if (st == 0) env.error("slice step cannot be zero");
  auto clamp = [&](const Value& v, int64_t dflt) {
    if (!v.is_number()) return dflt;
    int64_t i = v.as_int();
    if (i < 0) i += n;
    return st > 0 ? std::clamp<int64_t>(i, 0, n) : std::clamp<int64_t>(i, -1, n - 1);
  };
  const int64_t a = clamp(start, st > 0 ? 0 : n - 1), b = clamp(stop, st > 0 ? n : -1);
  List out;
  for (int64_t i = a; st > 0 ? i < b : i > b; i += st) out.push_back(items[static_cast<size_t>(i)]);
  if (!str) return Value(out);
  std::string s;
  for (const Value& c : out) s += c.as_string();
  return Value(s);
}

bool apply_test(const std::string& name, const Value& v, const Args& args, Env& env) {
  const Value arg = args.get(0, "value", Value());
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "string") return v.is_string();
  if (name == "number") return v.is_number();
  if (name == "integer") return v.is_int();
  if (name == "float") return v.kind() == Value::Kind::real;
  if (name == "boolean") return v.is_bool();
  if (name == "true") return v.is_bool() && v.as_bool();
  if (name == "false") return v.is_bool() && !v.as_bool();
  if (name == "mapping") return v.is_dict();
  if (name == "sequence") return v.is_list() || v.is_string() || v.is_dict();
  if (name == "iterable") return v.is_list() || v.is_string() || v.is_dict();
  if (name == "callable") return v.is_callable();
  if (name == "lower") return v.is_string() && lower(v.as_string()) == v.as_string();
  if (name == "upper") return v.is_string() && upper(v.as_string()) == v.as_string();
  if (name == "odd" || name == "even") {
    if (!v.is_number()) env.error(fmt::format("test '{}' needs a number", name));
    return (v.as_int() % 2 != 0) == (name == "odd");
  }
  if (name == "divisibleby") return arg.is_number() && arg.as_int() != 0 && v.as_int() % arg.as_int() == 0;
  if (name == "eq" || name == "equalto" || name == "==") return v == arg;
  if (name == "ne" || name == "!=") return v != arg;
  if (name == "sameas") return v == arg && v.kind() == arg.kind();
  if (name == "lt" || name == "<") return compare_values(v, arg, true, env) < 0;
  if (name == "le" || name == "<=") return compare_values(v, arg, true, env) <= 0;
  if (name == "gt" || name == ">") return compare_values(v, arg, true, env) > 0;
  if (name == "ge" || name == ">=") return compare_values(v, arg, true, env) >= 0;
  if (name == "in") {
    if (arg.is_string()) return v.is_string() && arg.as_string().find(v.as_string()) != std::string::npos;
    if (arg.is_dict()) return v.is_string() && arg.as_dict().find(v.as_string());
    for (const Value& x : iterate(arg, env))
      if (x == v) return true;
    return false;
  }
  env.error(fmt::format("unknown test '{}'", name));
}

}  // namespace claw::data::jinja
