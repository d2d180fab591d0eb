// The filters, tests, methods and globals of claw's Jinja interpreter
// (jinja.h), as Jinja2 and transformers define them. Internal to data/.
#pragma once

#include <string>

#include "claw/core/error.h"
#include "claw/data/jinja_value.h"

namespace claw::data::jinja {

// What the builtins need of the renderer: its errors (naming the template
// and line) and calls of callables (macros) with its state.
class Env {
 public:
  virtual ~Env() = default;
  // "<template> line N", where rendering is.
  virtual std::string where() const = 0;
  [[noreturn]] void error(const std::string& what) const { fail("{}: {}", where(), what); }
  virtual Value call(const Value& callee, const Args& args) = 0;
};

Value apply_filter(const std::string& name, const Value& v, const Args& args, Env& env);
bool apply_test(const std::string& name, const Value& v, const Args& args, Env& env);
// obj.attr: a dict's item, a namespace's attribute, or a bound method of a
// string, dict or list; undefined when there is none.
Value get_attr(const Value& obj, const std::string& attr, Env& env);
// obj[key]: list and string indexes (negative from the end), dict keys;
// undefined when absent.
Value get_item(const Value& obj, const Value& key, Env& env);
// obj[start:stop:step] on lists and strings (by code point).
Value get_slice(const Value& obj, const Value& start, const Value& stop, const Value& step, Env& env);
// range, namespace, dict, raise_exception, strftime_now, joiner, cycler.
Dict make_globals(Env& env);
// The items of an iterable (a dict iterates its keys; a string its code
// points); an error for anything else.
List iterate(const Value& v, Env& env);

}  // namespace claw::data::jinja
