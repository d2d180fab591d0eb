#include "claw/data/jinja_value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

namespace claw::data::jinja {

const Value* Dict::find(const std::string& key) const {
  for (const auto& [k, v] : items)
    if (k == key) return &v;
  return nullptr;
}

Value* Dict::find(const std::string& key) {
  for (auto& [k, v] : items)
    if (k == key) return &v;
  return nullptr;
}

void Dict::set(const std::string& key, Value v, const Value* given_key) {
  if (Value* at = find(key)) {
    *at = std::move(v);
    return;
  }
  const bool keep = !key_values.empty() || (given_key && !given_key->is_string());
  if (keep && key_values.empty())
    for (const auto& kv : items) key_values.emplace_back(kv.first);
  items.emplace_back(key, std::move(v));
  if (keep) key_values.push_back(given_key ? *given_key : Value(key));
}

Value Dict::key(size_t i) const { return key_values.empty() ? Value(items[i].first) : key_values[i]; }

Value Args::get(size_t index, const std::string& name, const Value& fallback) const {
  for (const auto& [k, v] : keyword)
    if (k == name) return v;
  return index < positional.size() ? positional[index] : fallback;
}

Value Value::none() {
  Value v;
  v.kind_ = Kind::none;
  return v;
}
Value::Value(bool b) : kind_(Kind::boolean), b_(b) {}
Value::Value(int64_t i) : kind_(Kind::integer), i_(i) {}
Value::Value(double d) : kind_(Kind::real), d_(d) {}
Value::Value(std::string s) : kind_(Kind::string), s_(std::make_shared<std::string>(std::move(s))) {}
Value::Value(const char* s) : Value(std::string(s)) {}
Value::Value(List l) : kind_(Kind::list), l_(std::make_shared<List>(std::move(l))) {}
Value::Value(Dict d) : kind_(Kind::dict), m_(std::make_shared<Dict>(std::move(d))) {}
Value::Value(Callable c) : kind_(Kind::callable), c_(std::make_shared<Callable>(std::move(c))) {}

Value Value::markup(std::string s) {
  Value v(std::move(s));
  v.markup_ = true;
  return v;
}

Value Value::generator(List items) {
  Value v(std::move(items));
  v.generator_ = true;
  return v;
}

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '\'': out += "&#39;"; break;
      case '"': out += "&#34;"; break;
      default: out += c;
    }
  }
  return out;
}

Value Value::from_json(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null: return none();
    case nlohmann::ordered_json::value_t::boolean: return Value(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer: return Value(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned:
      return j.get<uint64_t>() <= static_cast<uint64_t>(INT64_MAX) ? Value(static_cast<int64_t>(j.get<uint64_t>()))
                                                                    : Value(static_cast<double>(j.get<uint64_t>()));
    case nlohmann::ordered_json::value_t::number_float: return Value(j.get<double>());
    case nlohmann::ordered_json::value_t::string: return Value(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      List l;
      l.reserve(j.size());
      for (const auto& x : j) l.push_back(from_json(x));
      return Value(std::move(l));
    }
    case nlohmann::ordered_json::value_t::object: {
      Dict d;
      for (const auto& [k, x] : j.items()) d.items.emplace_back(k, from_json(x));
      return Value(std::move(d));
    }
    default: return Value();
  }
}

bool Value::truthy() const {
  switch (kind_) {
    case Kind::undefined:
    case Kind::none: return false;
    case Kind::boolean: return b_;
    case Kind::integer: return i_ != 0;
    case Kind::real: return d_ != 0;
    case Kind::string: return !s_->empty();
    case Kind::list: return generator_ || !l_->empty();
    case Kind::dict: return m_->is_namespace || !m_->items.empty();
    case Kind::callable: return true;
  }
  return false;
}

std::string python_float(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
  if (d == 0) return std::signbit(d) ? "-0.0" : "0.0";
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string sci(buf, r.ptr);  // [-]d[.ddd]e[+-]xx, shortest round trip
  std::string sign;
  if (sci[0] == '-') sign = "-", sci.erase(0, 1);
  const size_t e = sci.find('e');
  const int exp = std::stoi(sci.substr(e + 1));
  std::string digits = sci.substr(0, e);
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  const int decpt = exp + 1;  // value = 0.digits x 10^decpt
  const auto n = static_cast<int>(digits.size());
  std::string out = sign;  // built by appending: GCC 12 warns falsely (-Wrestrict) on chains of +
  if (decpt <= -4 || decpt > 16) {
    out.append(digits, 0, 1);
    if (n > 1) out.append(".").append(digits, 1, std::string::npos);
    char ebuf[16];
    std::snprintf(ebuf, sizeof ebuf, "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
    return out.append(ebuf);
  }
  if (decpt <= 0) return out.append("0.").append(static_cast<size_t>(-decpt), '0').append(digits);
  if (decpt >= n) return out.append(digits).append(static_cast<size_t>(decpt - n), '0').append(".0");
  return out.append(digits, 0, static_cast<size_t>(decpt)).append(".").append(digits, static_cast<size_t>(decpt));
}

namespace {

std::string python_repr_string(const std::string& s) {
  const bool has_single = s.find('\'') != std::string::npos, has_double = s.find('"') != std::string::npos;
  const char q = has_single && !has_double ? '"' : '\'';
  std::string out(1, q);
  for (unsigned char c : s) {
    if (c == static_cast<unsigned char>(q) || c == '\\') out += '\\', out += static_cast<char>(c);
    else if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if (c == '\t') out += "\\t";
    else if (c < 0x20 || c == 0x7f) {
      char b[8];
      std::snprintf(b, sizeof b, "\\x%02x", c);
      out += b;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + q;
}

void json_string(const std::string& s, std::string& out) {
  out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          char b[8];
          std::snprintf(b, sizeof b, "\\u%04x", c);
          out += b;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += '"';
}

void json_dump(const Value& v, int indent, bool sort_keys, int depth, std::string& out) {
  const std::string nl = indent >= 0 ? "\n" + std::string(static_cast<size_t>(indent * (depth + 1)), ' ') : "";
  const std::string close = indent >= 0 ? "\n" + std::string(static_cast<size_t>(indent * depth), ' ') : "";
  const std::string item_sep = indent >= 0 ? "," : ", ";
  switch (v.kind()) {
    case Value::Kind::undefined:
    case Value::Kind::none: out += "null"; return;
    case Value::Kind::boolean: out += v.as_bool() ? "true" : "false"; return;
    case Value::Kind::integer: out += std::to_string(v.as_int()); return;
    case Value::Kind::real: {
      const double d = v.as_double();
      out += std::isnan(d) ? "NaN" : std::isinf(d) ? (d < 0 ? "-Infinity" : "Infinity") : python_float(d);
      return;
    }
    case Value::Kind::string: json_string(v.as_string(), out); return;
    case Value::Kind::list: {
      const List& l = v.as_list();
      if (l.empty()) {
        out += "[]";
        return;
      }
      out += '[';
      for (size_t i = 0; i < l.size(); ++i) {
        out += i ? item_sep + nl : nl;
        json_dump(l[i], indent, sort_keys, depth + 1, out);
      }
      out += close + ']';
      return;
    }
    case Value::Kind::dict: {
      std::vector<const std::pair<std::string, Value>*> items;
      for (const auto& kv : v.as_dict().items) items.push_back(&kv);
      if (sort_keys) std::sort(items.begin(), items.end(), [](auto* a, auto* b) { return a->first < b->first; });
      if (items.empty()) {
        out += "{}";
        return;
      }
      out += '{';
      for (size_t i = 0; i < items.size(); ++i) {
        out += i ? item_sep + nl : nl;
        json_string(items[i]->first, out);
        out += ": ";
        json_dump(items[i]->second, indent, sort_keys, depth + 1, out);
      }
      out += close + '}';
      return;
    }
    case Value::Kind::callable: out += "null"; return;
  }
}

}  // namespace

std::string Value::repr() const {
  if (generator_) return "<generator object>";
  switch (kind_) {
    case Kind::string: return python_repr_string(*s_);
    case Kind::list: {
      std::string out = "[";
      for (size_t i = 0; i < l_->size(); ++i) out += (i ? ", " : "") + (*l_)[i].repr();
      return out + "]";
    }
    case Kind::dict: {
      std::string out = "{";
      for (size_t i = 0; i < m_->items.size(); ++i)
        out += (i ? ", " : "") + m_->key(i).repr() + ": " + m_->items[i].second.repr();
      return out + "}";
    }
    default: return str();
  }
}

std::string Value::str() const {
  switch (kind_) {
    case Kind::undefined: return "";
    case Kind::none: return "None";
    case Kind::boolean: return b_ ? "True" : "False";
    case Kind::integer: return std::to_string(i_);
    case Kind::real: return python_float(d_);
    case Kind::string: return *s_;
    case Kind::list:
    case Kind::dict: return repr();
    case Kind::callable: return "<function " + c_->name + ">";
  }
  return "";
}

std::string Value::to_json(int indent, bool sort_keys) const {
  std::string out;
  json_dump(*this, indent, sort_keys, 0, out);
  return out;
}

std::string Value::type_name() const {
  switch (kind_) {
    case Kind::undefined: return "Undefined";
    case Kind::none: return "NoneType";
    case Kind::boolean: return "bool";
    case Kind::integer: return "int";
    case Kind::real: return "float";
    case Kind::string: return "str";
    case Kind::list: return generator_ ? "generator" : "list";
    case Kind::dict: return m_->is_namespace ? "Namespace" : "dict";
    case Kind::callable: return "function";
  }
  return "";
}

bool Value::operator==(const Value& o) const {
  if (is_number() || is_bool()) {
    if (!(o.is_number() || o.is_bool())) return false;
    if (kind_ == Kind::real || o.kind_ == Kind::real) return as_double() == o.as_double();
    return as_int() == o.as_int();
  }
  if (kind_ != o.kind_) return false;
  switch (kind_) {
    case Kind::undefined:
    case Kind::none: return true;
    case Kind::string: return *s_ == *o.s_;
    case Kind::list: return *l_ == *o.l_;
    case Kind::dict: {
      if (m_->items.size() != o.m_->items.size()) return false;
      for (const auto& [k, v] : m_->items) {
        const Value* w = o.m_->find(k);
        if (!w || *w != v) return false;
      }
      return true;
    }
    case Kind::callable: return c_ == o.c_;
    default: return false;
  }
}

}  // namespace claw::data::jinja
