// claw's Jinja interpreter: the chat templates that models ship in
// tokenizer_config.json and GGUF files, rendered as transformers renders
// them (Jinja2's ImmutableSandboxedEnvironment with trim_blocks,
// lstrip_blocks and loop controls; its globals raise_exception and
// strftime_now; its tojson), without Python.
//
//   const jinja::Template t(source, "tokenizer_config.json chat_template");
//   std::string prompt = t.render({{"messages", messages}, {"add_generation_prompt", true},
//                                  {"bos_token", "<s>"}});
//
// The language: text, {{ expressions }}, {# comments #}, whitespace control
// ("-", "+"), and the statements if/elif/else, for (tuple targets, an `if`
// filter, else, loop.index/index0/revindex/revindex0/first/last/length/
// previtem/nextitem/cycle), set (names, tuples, namespace attributes,
// blocks), macro (defaults, caller), call, filter, raw, break, continue,
// generation. Expressions: Python's literals, arithmetic, comparisons,
// and/or/not, in, is [not] TEST, | FILTER, x if c else y, attribute and item
// access, slices, calls with keyword arguments. Filters, tests, methods and
// globals: jinja_builtins.cc lists them.
//
// Errors (claw::Error): a syntax error names the template and line when the
// template is built; at render time, an unsupported construct, a type error
// or raise_exception() names the template and line too. Sandbox: strings,
// lists and dicts from the context cannot be changed in place (no
// list.append); namespace() objects can, as in Jinja2.
#pragma once

#include <memory>
#include <string>

#include <nlohmann/json.hpp>

namespace claw::data::jinja {

struct Node;

class Template {
 public:
  // Parses `source`; `name` names it in errors.
  Template(const std::string& source, std::string name);
  // Renders with the variables of `context` (a JSON object).
  std::string render(const nlohmann::ordered_json& context) const;
  const std::string& name() const { return name_; }

 private:
  std::string name_;
  std::shared_ptr<const std::vector<std::shared_ptr<const Node>>> body_;
};

}  // namespace claw::data::jinja
