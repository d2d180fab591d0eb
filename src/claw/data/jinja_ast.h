// The syntax tree of claw's Jinja interpreter (jinja.h): what
// jinja_parse.cc makes of a template and jinja_render.cc walks.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "claw/data/jinja_value.h"

namespace claw::data::jinja {

struct Expr;
using ExprP = std::shared_ptr<const Expr>;

struct Expr {
  enum class Kind {
    literal,   // value
    name,      // name
    attr,      // args[0].name
    item,      // args[0][args[1]]
    slice,     // args[0][args[1]:args[2]:args[3]] (null: absent)
    call,      // args[0](args[1..], kw)
    filter,    // args[0] | name(args[1..], kw)
    test,      // args[0] is [not] name(args[1..])
    unary,     // name ("-", "+", "not") args[0]
    binary,    // args[0] name args[1]: + - * / // % ** ~ and or
    compare,   // args[0] ops[0] args[1] ops[1] args[2] ...: == != < <= > >= in "not in"
    cond,      // args[0] if args[1] else args[2] (args[2] null: undefined)
    list,      // [args...]
    tuple,     // (args...)
    dict,      // {args[0]: args[1], ...}
  };
  Kind kind = Kind::literal;
  int line = 0;
  Value value;
  std::string name;
  std::vector<ExprP> args;
  std::vector<std::string> kw;   // call, filter, test: the names of the last kw.size() args
  std::vector<std::string> ops;  // compare
  bool negated = false;          // test
};

struct Node;
using NodeP = std::shared_ptr<const Node>;
using Body = std::vector<NodeP>;

struct Node {
  enum class Kind {
    text,          // text
    output,        // {{ expr }}
    if_,           // branches: (cond, body)...; else_body
    for_,          // for targets in expr [if cond]: body [else: else_body]
    set,           // set targets = expr (targets[0] "ns.attr" for a namespace attribute)
    set_block,     // set targets[0] %} body {% endset (body rendered to a string)
    macro,         // macro name(params = defaults): body
    call_block,    // call(params) expr: body (the body is `caller()`)
    filter_block,  // filter expr (a filter chain over a placeholder): body
    break_,
    continue_,
    generation,    // {% generation %} body: an assistant's reply (rendered as the body)
  };
  Kind kind = Kind::text;
  int line = 0;
  std::string text, name;
  ExprP expr, cond;
  std::vector<std::string> targets, params;
  std::vector<ExprP> defaults;  // per param, null when none
  std::vector<std::pair<ExprP, Body>> branches;
  Body body, else_body;
};

// Parses a template (trim_blocks and lstrip_blocks on, as transformers
// renders chat templates). Throws claw::Error "<name> line N: ...".
Body parse_template(const std::string& source, const std::string& name);

}  // namespace claw::data::jinja
