// The values of claw's Jinja interpreter (jinja.h): Python's, as the
// templates that models ship were written for Jinja2 under Python.
//
//   undefined  a name or attribute that does not exist: prints as "", is
//              false, iterates as empty, `is defined` tells it apart
//   none, bool, int (int64), float (double), string (UTF-8 bytes)
//   list       shared, as Python's (a macro or `loop` sees the same one)
//   dict       insertion-ordered string keys (JSON objects; namespace()
//              objects are dicts whose attributes `set` may assign)
//   callable   a macro, a global function (range, namespace, ...) or a
//              bound method ('a b'.split)
//
// str() is Python's str(): True/False/None, 1.0, lists and dicts as their
// repr (['a', 1], {'k': 'v'}); to_json() feeds the tojson filter.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace claw::data::jinja {

class Value;
using List = std::vector<Value>;

// Keys are held as strings (str() of a number key: 0 and "0" are one key);
// a dict literal with number keys keeps them as given for iteration.
struct Dict {
  std::vector<std::pair<std::string, Value>> items;
  std::vector<Value> key_values;  // empty, or each item's key as given
  bool is_namespace = false;
  const Value* find(const std::string& key) const;
  Value* find(const std::string& key);
  void set(const std::string& key, Value v, const Value* given_key = nullptr);
  Value key(size_t i) const;
};

// Positional and keyword arguments of a call.
struct Args {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
  // The argument at `index` or named `name`, or `fallback` (undefined when absent).
  Value get(size_t index, const std::string& name, const Value& fallback) const;
};

struct Callable {
  std::string name;
  std::function<Value(const Args&)> call;
};

class Value {
 public:
  enum class Kind { undefined, none, boolean, integer, real, string, list, dict, callable };

  Value() = default;  // undefined
  static Value none();
  Value(bool b);     // NOLINT: implicit, as literals
  Value(int64_t i);  // NOLINT
  Value(int i) : Value(static_cast<int64_t>(i)) {}  // NOLINT
  Value(double d);   // NOLINT
  Value(std::string s);      // NOLINT
  Value(const char* s);      // NOLINT
  Value(List l);             // NOLINT
  Value(Dict d);             // NOLINT
  Value(Callable c);         // NOLINT
  static Value from_json(const nlohmann::ordered_json& j);
  // A string marked safe (Jinja2's Markup, from |safe or |escape): a plain
  // string added to it is HTML-escaped first, as markupsafe does.
  static Value markup(std::string s);
  // What Jinja2's map, select, reject, selectattr and rejectattr return: a
  // generator over the items. It iterates (for, join, list, first) and is
  // always true, but has no len(), no index and no JSON, as in Python.
  static Value generator(List items);
  bool is_generator() const { return kind_ == Kind::list && generator_; }
  bool is_markup() const { return kind_ == Kind::string && markup_; }

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::undefined; }
  bool is_none() const { return kind_ == Kind::none; }
  bool is_bool() const { return kind_ == Kind::boolean; }
  bool is_int() const { return kind_ == Kind::integer; }
  bool is_number() const { return kind_ == Kind::integer || kind_ == Kind::real; }
  bool is_string() const { return kind_ == Kind::string; }
  bool is_list() const { return kind_ == Kind::list; }
  bool is_dict() const { return kind_ == Kind::dict; }
  bool is_callable() const { return kind_ == Kind::callable; }

  bool as_bool() const { return b_; }
  int64_t as_int() const { return kind_ == Kind::boolean ? (b_ ? 1 : 0) : i_; }
  double as_double() const { return kind_ == Kind::real ? d_ : static_cast<double>(as_int()); }
  const std::string& as_string() const { return *s_; }
  List& as_list() const { return *l_; }
  Dict& as_dict() const { return *m_; }
  const Callable& as_callable() const { return *c_; }

  bool truthy() const;
  std::string str() const;   // Python's str()
  std::string repr() const;  // Python's repr()
  // tojson: Python's json.dumps(..., ensure_ascii=False) spacing unless
  // `indent` >= 0 (then one item per line, indented); keys sorted on request.
  std::string to_json(int indent = -1, bool sort_keys = false) const;
  std::string type_name() const;  // Python's: 'str', 'int', 'list', 'dict', 'NoneType', ...

  bool operator==(const Value& o) const;
  bool operator!=(const Value& o) const { return !(*this == o); }

 private:
  Kind kind_ = Kind::undefined;
  bool b_ = false;
  bool markup_ = false;
  bool generator_ = false;
  int64_t i_ = 0;
  double d_ = 0;
  std::shared_ptr<std::string> s_;
  std::shared_ptr<List> l_;
  std::shared_ptr<Dict> m_;
  std::shared_ptr<Callable> c_;
};

// Python's float repr: the shortest text that reads back as `d`, with ".0"
// on integral values and e-notation outside [1e-4, 1e16).
std::string python_float(double d);
// markupsafe's escape: & < > ' " as &amp; &lt; &gt; &#39; &#34;.
std::string html_escape(const std::string& s);

}  // namespace claw::data::jinja
