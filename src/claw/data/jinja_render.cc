// Rendering a parsed template (jinja_ast.h): scopes as Jinja2 has them (a
// for loop's and a macro's assignments stay inside; namespace() objects
// carry values out), Python's arithmetic and comparisons, loop controls.
#include <cmath>

#include <fmt/format.h>

#include "claw/core/error.h"
#include "claw/data/jinja.h"
#include "claw/data/jinja_ast.h"
#include "claw/data/jinja_builtins.h"

namespace claw::data::jinja {
namespace {

enum class Flow { normal, break_, continue_ };

class Renderer final : public Env {
 public:
  Renderer(const std::string& name, const nlohmann::ordered_json& context) : name_(name) {
    auto globals = std::make_shared<Dict>(make_globals(*this));
    if (context.is_object())
      for (const auto& [k, v] : context.items()) globals->set(k, Value::from_json(v));
    scopes_.push_back(globals);
    scopes_.push_back(std::make_shared<Dict>());  // the template's own assignments
  }

  std::string where() const override { return fmt::format("{} line {}", name_, line_); }

  Value call(const Value& callee, const Args& args) override {
    if (!callee.is_callable())
      error(callee.is_undefined() ? "calling an undefined name" : fmt::format("'{}' is not callable", callee.type_name()));
    return callee.as_callable().call(args);
  }

  Flow render(const Body& body, std::string& out) {
    for (const NodeP& n : body) {
      line_ = n->line;
      switch (n->kind) {
        case Node::Kind::text: out += n->text; break;
        case Node::Kind::output: out += eval(*n->expr).str(); break;
        case Node::Kind::if_: {
          const Body* chosen = &n->else_body;
          for (const auto& [cond, b] : n->branches)
            if (eval(*cond).truthy()) {
              chosen = &b;
              break;
            }
          if (Flow f = render(*chosen, out); f != Flow::normal) return f;
          break;
        }
        case Node::Kind::for_: render_for(*n, out); break;
        case Node::Kind::set: assign(n->targets, eval(*n->expr)); break;
        case Node::Kind::set_block: {
          std::string s;
          render(n->body, s);
          assign(n->targets, Value(s));
          break;
        }
        case Node::Kind::macro: scopes_.back()->set(n->name, make_macro(*n)); break;
        case Node::Kind::call_block: {
          Value caller = make_macro(*n);
          scopes_.push_back(std::make_shared<Dict>());
          scopes_.back()->set("caller", caller);
          out += eval(*n->expr).str();
          scopes_.pop_back();
          break;
        }
        case Node::Kind::filter_block: {
          std::string s;
          render(n->body, s);
          scopes_.push_back(std::make_shared<Dict>());
          scopes_.back()->set("__filter_input__", Value(s));
          out += eval(*n->expr).str();
          scopes_.pop_back();
          break;
        }
        case Node::Kind::break_: return Flow::break_;
        case Node::Kind::continue_: return Flow::continue_;
        case Node::Kind::generation:
          if (Flow f = render(n->body, out); f != Flow::normal) return f;
          break;
      }
    }
    return Flow::normal;
  }

 private:
  Value lookup(const std::string& name) const {
    for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it)
      if (const Value* v = (*it)->find(name)) return *v;
    return Value();
  }

  void assign(const std::vector<std::string>& targets, const Value& v) {
    if (targets.size() == 1) {
      const std::string& t = targets[0];
      const size_t dot = t.find('.');
      if (dot == std::string::npos) return scopes_.back()->set(t, v);
      const Value ns = lookup(t.substr(0, dot));
      if (!ns.is_dict() || !ns.as_dict().is_namespace)
        error(fmt::format("cannot assign attribute '{}' of '{}': not a namespace()", t.substr(dot + 1), t.substr(0, dot)));
      ns.as_dict().set(t.substr(dot + 1), v);
      return;
    }
    const List items = iterate(v, *this);
    if (items.size() != targets.size())
      error(fmt::format("cannot unpack {} values into {} names", items.size(), targets.size()));
    for (size_t i = 0; i < targets.size(); ++i) scopes_.back()->set(targets[i], items[i]);
  }

  void render_for(const Node& n, std::string& out) {
    List items = iterate(eval(*n.expr), *this);
    if (n.cond) {  // `for x in xs if cond`: filtered before the loop counts
      List kept;
      for (const Value& x : items) {
        scopes_.push_back(std::make_shared<Dict>());
        assign(n.targets, x);
        if (eval(*n.cond).truthy()) kept.push_back(x);
        scopes_.pop_back();
      }
      items = std::move(kept);
    }
    if (items.empty()) {
      render(n.else_body, out);
      return;
    }
    const auto len = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < len; ++i) {
      scopes_.push_back(std::make_shared<Dict>());
      Dict loop;
      loop.set("index", Value(i + 1));
      loop.set("index0", Value(i));
      loop.set("revindex", Value(len - i));
      loop.set("revindex0", Value(len - i - 1));
      loop.set("first", Value(i == 0));
      loop.set("last", Value(i == len - 1));
      loop.set("length", Value(len));
      loop.set("depth", Value(int64_t{1}));
      loop.set("depth0", Value(int64_t{0}));
      loop.set("previtem", i > 0 ? items[static_cast<size_t>(i - 1)] : Value());
      loop.set("nextitem", i + 1 < len ? items[static_cast<size_t>(i + 1)] : Value());
      loop.set("cycle", Value(Callable{"cycle", [i](const Args& a) {
                                         return a.positional.empty() ? Value()
                                                                     : a.positional[static_cast<size_t>(i) % a.positional.size()];
                                       }}));
      scopes_.back()->set("loop", Value(std::move(loop)));
      assign(n.targets, items[static_cast<size_t>(i)]);
      const Flow f = render(n.body, out);
      scopes_.pop_back();
      if (f == Flow::break_) break;
    }
  }

  Value make_macro(const Node& n) {
    const Node* node = &n;
    return Value(Callable{n.name.empty() ? "caller" : n.name, [this, node](const Args& a) {
                            auto frame = std::make_shared<Dict>();
                            for (size_t i = 0; i < node->params.size(); ++i) {
                              Value v = a.get(i, node->params[i], Value());
                              if (v.is_undefined() && node->defaults[i]) v = eval(*node->defaults[i]);
                              frame->set(node->params[i], v);
                            }
                            if (a.positional.size() > node->params.size())
                              error(fmt::format("macro '{}' takes {} arguments, got {}", node->name,
                                                node->params.size(), a.positional.size()));
                            // The body sees the globals and the template's names, not the caller's locals.
                            const Value caller = lookup("caller");
                            std::vector<std::shared_ptr<Dict>> saved = std::move(scopes_);
                            scopes_ = {saved[0], saved[1], frame};
                            if (!caller.is_undefined() && !frame->find("caller")) frame->set("caller", caller);
                            std::string out;
                            const int line = line_;
                            try {
                              render(node->body, out);
                            } catch (...) {
                              scopes_ = std::move(saved);
                              throw;
                            }
                            scopes_ = std::move(saved);
                            line_ = line;
                            return Value(out);
                          }});
  }

  Args eval_args(const Expr& e, size_t first) {
    Args a;
    const size_t n_kw = e.kw.size(), n = e.args.size();
    for (size_t i = first; i < n - n_kw; ++i) a.positional.push_back(eval(*e.args[i]));
    for (size_t k = 0; k < n_kw; ++k) a.keyword.emplace_back(e.kw[k], eval(*e.args[n - n_kw + k]));
    return a;
  }

  Value arith(const std::string& op, const Value& a, const Value& b) {
    if (op == "~") return Value(a.str() + b.str());
    if (op == "+") {
      if (a.is_markup() || b.is_markup()) {  // Markup + str escapes the str
        if (!(a.is_string() || a.is_markup()) || !(b.is_string() || b.is_markup()))
          error(fmt::format("unsupported operand types for +: '{}' and '{}'", a.type_name(), b.type_name()));
        return Value::markup((a.is_markup() ? a.as_string() : html_escape(a.as_string())) +
                             (b.is_markup() ? b.as_string() : html_escape(b.as_string())));
      }
      if (a.is_string() && b.is_string()) return Value(a.as_string() + b.as_string());
      if (a.is_list() && b.is_list()) {
        List l = a.as_list();
        l.insert(l.end(), b.as_list().begin(), b.as_list().end());
        return Value(l);
      }
    }
    if (op == "*" && a.is_string() && b.is_int()) {
      std::string s;
      for (int64_t i = 0; i < b.as_int() && s.size() < (1u << 26); ++i) s += a.as_string();
      return Value(s);
    }
    if (op == "%" && a.is_string()) error("string formatting with % is not supported; use ~ or format filters");
    const bool nums = (a.is_number() || a.is_bool()) && (b.is_number() || b.is_bool());
    if (!nums) error(fmt::format("unsupported operand types for {}: '{}' and '{}'", op, a.type_name(), b.type_name()));
    const bool ints = !(a.kind() == Value::Kind::real || b.kind() == Value::Kind::real);
    if (op == "/") {
      if (b.as_double() == 0) error("division by zero");
      return Value(a.as_double() / b.as_double());
    }
    if (ints) {
      const int64_t x = a.as_int(), y = b.as_int();
      if (op == "+") return Value(x + y);
      if (op == "-") return Value(x - y);
      if (op == "*") return Value(x * y);
      if (op == "**") return y >= 0 ? Value(static_cast<int64_t>(std::pow(x, y))) : Value(std::pow(x, y));
      if (y == 0) error("integer division or modulo by zero");
      const int64_t q = x / y - ((x % y != 0) && ((x < 0) != (y < 0)) ? 1 : 0);  // Python floors
      if (op == "//") return Value(q);
      if (op == "%") return Value(x - q * y);
    }
    const double x = a.as_double(), y = b.as_double();
    if (op == "+") return Value(x + y);
    if (op == "-") return Value(x - y);
    if (op == "*") return Value(x * y);
    if (op == "**") return Value(std::pow(x, y));
    if (y == 0) error("float division by zero");
    if (op == "//") return Value(std::floor(x / y));
    if (op == "%") return Value(x - std::floor(x / y) * y);
    error(fmt::format("unknown operator {}", op));
  }

  bool compare(const std::string& op, const Value& a, const Value& b) {
    if (op == "==") return a == b;
    if (op == "!=") return a != b;
    if (op == "in" || op == "not in") {
      Args args;
      args.positional.push_back(b);
      return apply_test("in", a, args, *this) == (op == "in");
    }
    Args args;
    args.positional.push_back(b);
    return apply_test(op, a, args, *this);
  }

  Value eval(const Expr& e) {
    line_ = e.line;
    switch (e.kind) {
      case Expr::Kind::literal: return e.value;
      case Expr::Kind::name: return lookup(e.name);
      case Expr::Kind::attr: return get_attr(eval(*e.args[0]), e.name, *this);
      case Expr::Kind::item: return get_item(eval(*e.args[0]), eval(*e.args[1]), *this);
      case Expr::Kind::slice: {
        const Value obj = eval(*e.args[0]);
        auto part = [&](size_t i) { return e.args[i] ? eval(*e.args[i]) : Value(); };
        return get_slice(obj, part(1), part(2), part(3), *this);
      }
      case Expr::Kind::call: {
        const Value callee = eval(*e.args[0]);
        return call(callee, eval_args(e, 1));
      }
      case Expr::Kind::filter: {
        const Value v = eval(*e.args[0]);
        return apply_filter(e.name, v, eval_args(e, 1), *this);
      }
      case Expr::Kind::test: {
        // `x is defined` must not fail on x.missing.attr: an error evaluating the subject is undefined.
        const Value v = eval(*e.args[0]);
        return Value(apply_test(e.name, v, eval_args(e, 1), *this) != e.negated);
      }
      case Expr::Kind::unary: {
        const Value v = eval(*e.args[0]);
        if (e.name == "not") return Value(!v.truthy());
        if (!v.is_number() && !v.is_bool()) error(fmt::format("bad operand type for unary {}: '{}'", e.name, v.type_name()));
        if (e.name == "+") return v;
        return v.kind() == Value::Kind::real ? Value(-v.as_double()) : Value(-v.as_int());
      }
      case Expr::Kind::binary: {
        if (e.name == "and") {
          const Value a = eval(*e.args[0]);
          return a.truthy() ? eval(*e.args[1]) : a;
        }
        if (e.name == "or") {
          const Value a = eval(*e.args[0]);
          return a.truthy() ? a : eval(*e.args[1]);
        }
        const Value a = eval(*e.args[0]), b = eval(*e.args[1]);
        return arith(e.name, a, b);
      }
      case Expr::Kind::compare: {
        Value left = eval(*e.args[0]);
        for (size_t i = 0; i < e.ops.size(); ++i) {
          const Value right = eval(*e.args[i + 1]);
          if (!compare(e.ops[i], left, right)) return Value(false);
          left = right;
        }
        return Value(true);
      }
      case Expr::Kind::cond:
        if (eval(*e.args[1]).truthy()) return eval(*e.args[0]);
        return e.args[2] ? eval(*e.args[2]) : Value();
      case Expr::Kind::list:
      case Expr::Kind::tuple: {
        List l;
        for (const ExprP& x : e.args) l.push_back(eval(*x));
        return Value(l);
      }
      case Expr::Kind::dict: {
        Dict d;
        for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
          const Value k = eval(*e.args[i]);
          if (k.is_list() || k.is_dict() || k.is_undefined()) error(fmt::format("a dict key cannot be {}", k.type_name()));
          d.set(k.str(), eval(*e.args[i + 1]), &k);
        }
        return Value(d);
      }
    }
    error("unknown expression");
  }

  const std::string& name_;
  std::vector<std::shared_ptr<Dict>> scopes_;
  int line_ = 0;
};

}  // namespace

Template::Template(const std::string& source, std::string name)
    : name_(std::move(name)), body_(std::make_shared<const Body>(parse_template(source, name_))) {}

std::string Template::render(const nlohmann::ordered_json& context) const {
  Renderer r(name_, context);
  std::string out;
  r.render(*body_, out);
  return out;
}

}  // namespace claw::data::jinja
