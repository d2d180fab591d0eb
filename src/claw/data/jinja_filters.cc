// The filters and globals of claw's Jinja interpreter (jinja_builtins.h).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>

#include <fmt/format.h>

#include "claw/data/jinja_builtins.h"

namespace claw::data::jinja {
namespace {

std::string indent_text(const std::string& s, const Value& width, bool first, bool blank) {
  const std::string pad =
      width.is_string() ? width.as_string()
                        : std::string(static_cast<size_t>(width.is_number() ? width.as_int() : 4), ' ');
  std::string out;
  size_t at = 0;
  bool first_line = true;
  while (at <= s.size()) {
    const size_t nl = s.find('\n', at);
    const std::string line = s.substr(at, nl == std::string::npos ? std::string::npos : nl - at);
    const bool pad_it = first_line ? first : (blank || !line.empty());
    out += (pad_it ? pad : "") + line;
    if (nl == std::string::npos) break;
    out += '\n';
    at = nl + 1;
    first_line = false;
  }
  return out;
}

Value attribute_of(const Value& x, const std::string& path, Env& env) {
  Value cur = x;
  for (size_t at = 0; at <= path.size();) {
    const size_t dot = path.find('.', at);
    const std::string part = path.substr(at, dot == std::string::npos ? std::string::npos : dot - at);
    cur = !part.empty() && std::all_of(part.begin(), part.end(), ::isdigit)
              ? get_item(cur, Value(static_cast<int64_t>(std::stoll(part))), env)
              : get_attr(cur, part, env);
    if (dot == std::string::npos) break;
    at = dot + 1;
  }
  return cur;
}

// select/reject/selectattr/rejectattr: the items passing (or failing) a test.
Value select(const Value& v, const Args& args, bool attr, bool keep, Env& env) {
  List out;
  if (!v.truthy()) return Value::generator(out);  // as Jinja2: none | selectattr(...) is empty
  const size_t first_test = attr ? 1 : 0;
  const std::string path = attr ? args.get(0, "attribute", Value()).str() : "";
  const Value test = args.get(first_test, "test", Value());
  Args rest;
  for (size_t i = first_test + 1; i < args.positional.size(); ++i) rest.positional.push_back(args.positional[i]);
  for (const Value& x : iterate(v, env)) {
    const Value subject = attr ? attribute_of(x, path, env) : x;
    const bool pass = test.is_string() ? apply_test(test.as_string(), subject, rest, env) : subject.truthy();
    if (pass == keep) out.push_back(x);
  }
  return Value::generator(out);
}

int order(const Value& a, const Value& b, bool case_sensitive) {
  if (a.is_string() && b.is_string()) {
    std::string x = a.as_string(), y = b.as_string();
    if (!case_sensitive) {
      std::transform(x.begin(), x.end(), x.begin(), ::tolower);
      std::transform(y.begin(), y.end(), y.begin(), ::tolower);
    }
    return x < y ? -1 : x > y ? 1 : 0;
  }
  const double x = a.as_double(), y = b.as_double();
  return x < y ? -1 : x > y ? 1 : 0;
}

// result = v, and the filter was found.
bool done(Value& result, Value v) {
  result = std::move(v);
  return true;
}

// Filters of single values (strings, numbers) and of any value (tojson, default, length).
bool scalar_filter(const std::string& name, const Value& v, const Args& args, Env& env, Value& result) {
  if (name == "tojson") {
    std::vector<const Value*> stack{&v};
    while (!stack.empty()) {  // Python's json cannot write a generator
      const Value* x = stack.back();
      stack.pop_back();
      if (x->is_generator()) env.error("Object of type generator is not JSON serializable");
      if (x->is_list())
        for (const Value& y : x->as_list()) stack.push_back(&y);
      if (x->is_dict())
        for (const auto& kv : x->as_dict().items) stack.push_back(&kv.second);
    }
    const Value indent = args.get(0, "indent", Value());
    return done(result, Value(v.to_json(indent.is_number() ? static_cast<int>(indent.as_int()) : -1,
                           args.get(99, "sort_keys", Value(false)).truthy())));
  }
  if (name == "trim") {  // Python's str.strip
    Args chars;
    chars.positional.push_back(args.get(0, "chars", Value()));
    return done(result, get_attr(Value(v.str()), "strip", env).as_callable().call(chars));
  }
  if ((name == "length" || name == "count") && v.is_generator()) env.error("object of type 'generator' has no len()");
  if (name == "length" || name == "count") {
    if (v.is_string()) return done(result, Value(static_cast<int64_t>(iterate(v, env).size())));
    if (v.is_list()) return done(result, Value(static_cast<int64_t>(v.as_list().size())));
    if (v.is_dict()) return done(result, Value(static_cast<int64_t>(v.as_dict().items.size())));
    if (v.is_undefined()) return done(result, Value(int64_t{0}));
    env.error(fmt::format("object of type '{}' has no len()", v.type_name()));
  }
  if (name == "default" || name == "d") {
    const bool boolean = args.get(1, "boolean", Value(false)).truthy();
    if (v.is_undefined() || (boolean && !v.truthy())) return done(result, args.get(0, "default_value", Value("")));
    return done(result, v);
  }
  if (name == "upper" || name == "lower" || name == "capitalize" || name == "title") {
    const Value m = get_attr(Value(v.str()), name, env);
    return done(result, m.as_callable().call(Args{}));
  }
  if (name == "replace") {
    const Value m = get_attr(Value(v.str()), "replace", env);
    return done(result, m.as_callable().call(args));
  }
  if (name == "string") return done(result, Value(v.str()));
  if (name == "safe") return done(result, v.is_markup() ? v : Value::markup(v.str()));
  if (name == "e" || name == "escape" || name == "forceescape")
    return done(result, v.is_markup() && name != "forceescape" ? v : Value::markup(html_escape(v.str())));
  if (name == "int") {
    if (v.is_number() || v.is_bool())
      return done(result, Value(v.is_int() || v.is_bool() ? v.as_int() : static_cast<int64_t>(v.as_double())));
    try {
      return done(result, Value(static_cast<int64_t>(std::stoll(v.str()))));
    } catch (const std::exception&) {
      return done(result, args.get(0, "default", Value(int64_t{0})));
    }
  }
  if (name == "float") {
    if (v.is_number() || v.is_bool()) return done(result, Value(v.as_double()));
    try {
      return done(result, Value(std::stod(v.str())));
    } catch (const std::exception&) {
      return done(result, args.get(0, "default", Value(0.0)));
    }
  }
  if (name == "abs") return done(result, v.is_int() ? Value(std::abs(v.as_int())) : Value(std::fabs(v.as_double())));
  if (name == "round") {
    const int64_t precision = args.get(0, "precision", Value(int64_t{0})).as_int();
    const double m = std::pow(10.0, static_cast<double>(precision));
    return done(result, Value(std::round(v.as_double() * m) / m));
  }
  return false;
}

// Filters of sequences and dicts.
bool sequence_filter(const std::string& name, const Value& v, const Args& args, Env& env, Value& result) {
  if (name == "join") {
    const std::string sep = args.get(0, "d", Value("")).str();
    const Value attr = args.get(1, "attribute", Value());
    std::string out;
    bool first = true;
    for (const Value& x : iterate(v, env)) {
      out += (first ? "" : sep) + (attr.is_undefined() ? x : attribute_of(x, attr.str(), env)).str();
      first = false;
    }
    return done(result, Value(out));
  }
  if (name == "last" && v.is_generator()) env.error("'generator' object is not reversible");
  if (name == "first" || name == "last") {
    const List items = iterate(v, env);
    if (items.empty()) return done(result, Value());
    return done(result, name == "first" ? items.front() : items.back());
  }
  if (name == "list") return done(result, Value(List(iterate(v, env))));
  if (name == "unique") {
    List out;
    for (const Value& x : iterate(v, env))
      if (std::find(out.begin(), out.end(), x) == out.end()) out.push_back(x);
    return done(result, Value(out));
  }
  if (name == "reverse") {
    if (v.is_string()) {
      List cps = iterate(v, env);
      std::string out;
      for (auto it = cps.rbegin(); it != cps.rend(); ++it) out += it->as_string();
      return done(result, Value(out));
    }
    List items = iterate(v, env);
    std::reverse(items.begin(), items.end());
    return done(result, Value(items));
  }
  if (name == "sort") {
    List items = iterate(v, env);
    const bool reverse = args.get(0, "reverse", Value(false)).truthy();
    const bool cs = args.get(1, "case_sensitive", Value(false)).truthy();
    const Value attr = args.get(2, "attribute", Value());
    std::stable_sort(items.begin(), items.end(), [&](const Value& a, const Value& b) {
      const Value x = attr.is_undefined() ? a : attribute_of(a, attr.str(), env);
      const Value y = attr.is_undefined() ? b : attribute_of(b, attr.str(), env);
      const int c = order(x, y, cs);
      return reverse ? c > 0 : c < 0;
    });
    return done(result, Value(items));
  }
  if (name == "dictsort") {
    if (!v.is_dict()) env.error("dictsort needs a dict");
    List items;
    const Dict& d = v.as_dict();
    for (size_t i = 0; i < d.items.size(); ++i) items.emplace_back(List{d.key(i), d.items[i].second});
    const bool by_value = args.get(1, "by", Value("key")).str() == "value";
    std::stable_sort(items.begin(), items.end(), [&](const Value& a, const Value& b) {
      return order(a.as_list()[by_value ? 1 : 0], b.as_list()[by_value ? 1 : 0], false) < 0;
    });
    return done(result, Value(items));
  }
  if (name == "items") {
    if (v.is_undefined()) return done(result, Value(List{}));
    if (!v.is_dict()) env.error(fmt::format("items needs a dict, got {}", v.type_name()));
    List items;
    const Dict& d = v.as_dict();
    for (size_t i = 0; i < d.items.size(); ++i) items.emplace_back(List{d.key(i), d.items[i].second});
    return done(result, Value(items));
  }
  if (name == "map") {
    List out;
    if (!v.truthy()) return done(result, Value::generator(out));
    const Value attr = args.get(99, "attribute", Value());
    for (const Value& x : iterate(v, env)) {
      if (!attr.is_undefined()) {
        Value got = attribute_of(x, attr.str(), env);
        out.push_back(got.is_undefined() ? args.get(99, "default", Value()) : got);
        continue;
      }
      const Value filter = args.get(0, "", Value());
      if (!filter.is_string()) env.error("map needs a filter name or attribute=");
      Args rest;
      for (size_t i = 1; i < args.positional.size(); ++i) rest.positional.push_back(args.positional[i]);
      out.push_back(apply_filter(filter.as_string(), x, rest, env));
    }
    return done(result, Value::generator(out));
  }
  if (name == "select") return done(result, select(v, args, false, true, env));
  if (name == "reject") return done(result, select(v, args, false, false, env));
  if (name == "selectattr") return done(result, select(v, args, true, true, env));
  if (name == "rejectattr") return done(result, select(v, args, true, false, env));
  if (name == "indent")
    return done(result, Value(indent_text(v.str(), args.get(0, "width", Value(int64_t{4})),
                                          args.get(1, "first", Value(false)).truthy(),
                             args.get(2, "blank", Value(false)).truthy())));
  if (name == "wordcount") {
    int64_t n = 0;
    bool in = false;
    for (char c : v.str()) {
      const bool word = std::isalnum(static_cast<unsigned char>(c)) || c == '_';
      n += word && !in;
      in = word;
    }
    return done(result, Value(n));
  }
  if (name == "batch") {
    const int64_t size = args.get(0, "linecount", Value(int64_t{1})).as_int();
    if (size < 1) env.error("batch needs a size of at least 1");
    List out, cur;
    for (const Value& x : iterate(v, env)) {
      cur.push_back(x);
      if (static_cast<int64_t>(cur.size()) == size) out.emplace_back(cur), cur.clear();
    }
    if (!cur.empty()) out.emplace_back(cur);
    return done(result, Value(out));
  }
  return false;
}

// Filters that fold a sequence to one value.
bool aggregate_filter(const std::string& name, const Value& v, const Args& args, Env& env, Value& result) {
  if (name == "min" || name == "max") {
    const List items = iterate(v, env);
    if (items.empty()) return done(result, Value());
    const bool cs = args.get(0, "case_sensitive", Value(false)).truthy();
    const Value attr = args.get(1, "attribute", Value());
    const Value* best = &items[0];
    for (const Value& x : items) {
      const Value a = attr.is_undefined() ? x : attribute_of(x, attr.str(), env);
      const Value b = attr.is_undefined() ? *best : attribute_of(*best, attr.str(), env);
      if (name == "min" ? order(a, b, cs) < 0 : order(a, b, cs) > 0) best = &x;
    }
    return done(result, *best);
  }
  if (name == "sum") {
    const Value attr = args.get(0, "attribute", Value());
    Value total = args.get(1, "start", Value(int64_t{0}));
    for (const Value& x : iterate(v, env)) {
      const Value y = attr.is_undefined() ? x : attribute_of(x, attr.str(), env);
      total = total.is_int() && y.is_int() ? Value(total.as_int() + y.as_int())
                                           : Value(total.as_double() + y.as_double());
    }
    return done(result, total);
  }
  return false;
}

}  // namespace

Value apply_filter(const std::string& name, const Value& v, const Args& args, Env& env) {
  Value result;
  if (scalar_filter(name, v, args, env, result) || sequence_filter(name, v, args, env, result) ||
      aggregate_filter(name, v, args, env, result))
    return result;
  env.error(fmt::format("unknown filter '{}'", name));
}

Dict make_globals(Env& env) {
  Dict g;
  Env* e = &env;
  g.set("range", Value(Callable{"range", [e](const Args& a) {
                                  int64_t start = 0, stop = 0, step = 1;
                                  const size_t n = a.positional.size();
                                  if (n == 1) stop = a.positional[0].as_int();
                                  if (n >= 2) start = a.positional[0].as_int(), stop = a.positional[1].as_int();
                                  if (n >= 3) step = a.positional[2].as_int();
                                  if (n == 0 || n > 3 || step == 0)
                                    e->error("range() takes 1 to 3 integers, step not 0");
                                  List out;
                                  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
                                    out.emplace_back(i);
                                    if (out.size() > 10'000'000) e->error("range() over ten million items");
                                  }
                                  return Value(out);
                                }}));
  g.set("namespace", Value(Callable{"namespace", [](const Args& a) {
                                      Dict d;
                                      d.is_namespace = true;
                                      for (const Value& p : a.positional)
                                        if (p.is_dict())
                                          for (const auto& [k, v] : p.as_dict().items) d.set(k, v);
                                      for (const auto& [k, v] : a.keyword) d.set(k, v);
                                      return Value(std::move(d));
                                    }}));
  g.set("dict", Value(Callable{"dict", [](const Args& a) {
                                 Dict d;
                                 for (const auto& [k, v] : a.keyword) d.set(k, v);
                                 return Value(std::move(d));
                               }}));
  g.set("raise_exception", Value(Callable{"raise_exception", [e](const Args& a) -> Value {
                                            e->error("the template raised: " + a.get(0, "message", Value("")).str());
                                          }}));
  g.set("strftime_now", Value(Callable{"strftime_now", [](const Args& a) {
                                         const std::time_t t = std::time(nullptr);
                                         std::tm tm{};
                                         localtime_r(&t, &tm);
                                         char buf[256];
                                         const std::string f = a.get(0, "format", Value("%Y-%m-%d")).str();
                                         const size_t n = std::strftime(buf, sizeof buf, f.c_str(), &tm);
                                         return Value(std::string(buf, n));
                                       }}));
  return g;
}

}  // namespace claw::data::jinja
