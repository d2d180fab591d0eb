// Jinja templates to syntax trees (jinja_ast.h), in two passes: the source
// cut into text and tags with Jinja2's whitespace rules (trim_blocks,
// lstrip_blocks, "-" and "+" modifiers, raw blocks), then each tag's
// tokens parsed by recursive descent with Jinja2's operator precedence.
#include <cctype>
#include <cstring>

#include <fmt/format.h>

#include "claw/core/error.h"
#include "claw/data/jinja_ast.h"

namespace claw::data::jinja {
namespace {

struct Segment {
  enum class Kind { text, var, block };
  Kind kind;
  std::string text;  // text, or the tag's inside
  int line;
};

int lines_in(const std::string& s, size_t from, size_t to) {
  int n = 0;
  for (size_t i = from; i < to && i < s.size(); ++i) n += s[i] == '\n';
  return n;
}

// The end of a tag's inside: the first `close` ("}}" or "%}") outside a
// string literal, from `at`; npos when there is none.
size_t find_tag_end(const std::string& s, size_t at, const char* close) {
  char quote = 0;
  for (size_t i = at; i + 1 < s.size(); ++i) {
    const char c = s[i];
    if (quote) {
      if (c == '\\') ++i;
      else if (c == quote) quote = 0;
    } else if (c == '"' || c == '\'') {
      quote = c;
    } else if (c == close[0] && s[i + 1] == close[1]) {
      return i;
    }
  }
  return std::string::npos;
}

std::string trim(const std::string& s) {
  size_t a = 0, b = s.size();
  while (a < b && std::isspace(static_cast<unsigned char>(s[a]))) ++a;
  while (b > a && std::isspace(static_cast<unsigned char>(s[b - 1]))) --b;
  return s.substr(a, b - a);
}

std::vector<Segment> segment(const std::string& src, const std::string& name) {
  std::vector<Segment> out;
  std::string text;
  int line = 1, text_line = 1;
  bool strip_next = false, trim_next = false;  // the previous tag's "-" / trim_blocks
  size_t i = 0;
  auto flush = [&] {
    if (!text.empty()) out.push_back({Segment::Kind::text, text, text_line});
    text.clear();
  };
  while (i < src.size()) {
    // The next tag: "{{", "{%" or "{#".
    size_t open = i;
    for (;;) {
      open = src.find('{', open);
      if (open == std::string::npos || (open + 1 < src.size() && std::strchr("{%#", src[open + 1]))) break;
      ++open;
    }
    const bool is_tag = open != std::string::npos;
    const size_t upto = is_tag ? open : src.size();
    std::string chunk = src.substr(i, upto - i);
    bool at_line_start = i == 0 || src[i - 1] == '\n';
    if (strip_next) {
      size_t k = 0;
      while (k < chunk.size() && std::isspace(static_cast<unsigned char>(chunk[k]))) ++k;
      chunk.erase(0, k);
    } else if (trim_next && !chunk.empty() && chunk[0] == '\n') {
      chunk.erase(0, 1);
      at_line_start = true;
    }
    strip_next = trim_next = false;
    const char type = is_tag ? src[open + 1] : 0;
    const char mod = is_tag && open + 2 < src.size() ? src[open + 2] : 0;
    if (is_tag && mod == '-') {
      while (!chunk.empty() && std::isspace(static_cast<unsigned char>(chunk.back()))) chunk.pop_back();
    } else if (is_tag && type != '{' && mod != '+') {
      // lstrip_blocks: spaces and tabs between a line's start and a block
      // or comment tag go.
      const size_t nl = chunk.rfind('\n');
      const size_t from = nl == std::string::npos ? 0 : nl + 1;
      if ((nl != std::string::npos || at_line_start) && chunk.find_first_not_of(" \t", from) == std::string::npos)
        chunk.resize(from);
    }
    if (text.empty()) text_line = line;
    text += chunk;
    line += lines_in(src, i, upto);
    i = upto;
    if (!is_tag) break;
    const size_t inner = open + 2 + (mod == '-' || mod == '+' ? 1 : 0);
    size_t end, after;
    if (type == '#') {
      end = src.find("#}", inner);
      if (end == std::string::npos) fail("{} line {}: a comment '{{#' is not closed with '#}}'", name, line);
      after = end + 2;
    } else {
      end = find_tag_end(src, inner, type == '{' ? "}}" : "%}");
      if (end == std::string::npos)
        fail("{} line {}: a tag '{{{}' is not closed with '{}'", name, line, type, type == '{' ? "}}" : "%}");
      after = end + 2;
    }
    const bool close_strip = end > inner && src[end - 1] == '-';
    const bool close_keep = end > inner && src[end - 1] == '+';
    std::string body = src.substr(inner, end - inner - (close_strip || close_keep ? 1 : 0));
    const int tag_line = line;
    line += lines_in(src, open, after);
    i = after;
    if (type == '#') {
      strip_next = close_strip;
      trim_next = !close_strip && !close_keep;
      continue;
    }
    flush();
    if (type == '{') {
      out.push_back({Segment::Kind::var, body, tag_line});
      strip_next = close_strip;
      continue;
    }
    const std::string stmt = trim(body);
    strip_next = close_strip;
    trim_next = !close_strip && !close_keep;
    if (stmt == "raw") {  // verbatim up to {% endraw %}
      size_t at = i;
      for (;;) {
        const size_t tag = src.find("{%", at);
        if (tag == std::string::npos) fail("{} line {}: {{% raw %}} without {{% endraw %}}", name, tag_line);
        size_t k = tag + 2;
        if (k < src.size() && (src[k] == '-' || src[k] == '+')) ++k;
        while (k < src.size() && std::isspace(static_cast<unsigned char>(src[k]))) ++k;
        if (src.compare(k, 6, "endraw") == 0) {
          std::string raw = src.substr(i, tag - i);
          if (trim_next && !raw.empty() && raw[0] == '\n') raw.erase(0, 1);
          if (src[tag + 2] == '-')
            while (!raw.empty() && std::isspace(static_cast<unsigned char>(raw.back()))) raw.pop_back();
          text_line = tag_line;
          text = raw;
          flush();
          const size_t close = find_tag_end(src, k, "%}");
          if (close == std::string::npos) fail("{} line {}: {{% endraw %}} is not closed", name, tag_line);
          strip_next = src[close - 1] == '-';
          trim_next = !strip_next && src[close - 1] != '+';
          line += lines_in(src, i, close + 2);
          i = close + 2;
          break;
        }
        at = tag + 2;
      }
      continue;
    }
    out.push_back({Segment::Kind::block, stmt, tag_line});
  }
  flush();
  return out;
}

// ---- Tokens of a tag ----

struct Token {
  enum class Kind { name, string, integer, real, op, end };
  Kind kind = Kind::end;
  std::string text;
  Value value;
};

std::vector<Token> tokenize(const std::string& s, const std::string& where) {
  std::vector<Token> out;
  static const char* ops[] = {"**", "//", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%", "~", "<", ">", "(", ")",
                              "[", "]", "{", "}", ",", ".", ":", "|", "="};
  size_t i = 0;
  while (i < s.size()) {
    const char c = s[i];
    if (std::isspace(static_cast<unsigned char>(c))) {
      ++i;
    } else if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t j = i;
      while (j < s.size() && (std::isalnum(static_cast<unsigned char>(s[j])) || s[j] == '_')) ++j;
      out.push_back({Token::Kind::name, s.substr(i, j - i), {}});
      i = j;
    } else if (std::isdigit(static_cast<unsigned char>(c))) {
      size_t j = i;
      bool real = false;
      while (j < s.size() && (std::isdigit(static_cast<unsigned char>(s[j])) || s[j] == '_')) ++j;
      if (j + 1 < s.size() && s[j] == '.' && std::isdigit(static_cast<unsigned char>(s[j + 1]))) {
        real = true;
        for (++j; j < s.size() && std::isdigit(static_cast<unsigned char>(s[j])); ++j) {
        }
      }
      if (j < s.size() && (s[j] == 'e' || s[j] == 'E')) {
        real = true;
        ++j;
        if (j < s.size() && (s[j] == '+' || s[j] == '-')) ++j;
        while (j < s.size() && std::isdigit(static_cast<unsigned char>(s[j]))) ++j;
      }
      std::string num = s.substr(i, j - i);
      std::erase(num, '_');
      Token t{real ? Token::Kind::real : Token::Kind::integer, num, {}};
      t.value = real ? Value(std::stod(num)) : Value(static_cast<int64_t>(std::stoll(num)));
      out.push_back(t);
      i = j;
    } else if (c == '"' || c == '\'') {
      std::string v;
      size_t j = i + 1;
      for (; j < s.size() && s[j] != c; ++j) {
        if (s[j] != '\\' || j + 1 >= s.size()) {
          v += s[j];
          continue;
        }
        const char e = s[++j];
        switch (e) {
          case 'n': v += '\n'; break;
          case 't': v += '\t'; break;
          case 'r': v += '\r'; break;
          case '0': v += '\0'; break;
          case '\\': v += '\\'; break;
          case '\'': v += '\''; break;
          case '"': v += '"'; break;
          case 'u':
          case 'x': {
            const size_t n = e == 'u' ? 4 : 2;
            const uint32_t cp = static_cast<uint32_t>(std::stoul(s.substr(j + 1, n), nullptr, 16));
            j += n;
            if (cp < 0x80) {
              v += static_cast<char>(cp);
            } else if (cp < 0x800) {
              v += static_cast<char>(0xC0 | (cp >> 6));
              v += static_cast<char>(0x80 | (cp & 0x3F));
            } else {
              v += static_cast<char>(0xE0 | (cp >> 12));
              v += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
              v += static_cast<char>(0x80 | (cp & 0x3F));
            }
            break;
          }
          default: v += '\\', v += e;
        }
      }
      if (j >= s.size()) fail("{}: a string literal is not closed", where);
      out.push_back({Token::Kind::string, v, Value(v)});
      i = j + 1;
    } else {
      bool matched = false;
      for (const char* op : ops)
        if (s.compare(i, std::strlen(op), op) == 0) {
          out.push_back({Token::Kind::op, op, {}});
          i += std::strlen(op);
          matched = true;
          break;
        }
      if (!matched) fail("{}: unexpected character '{}'", where, c);
    }
  }
  out.push_back({Token::Kind::end, "", {}});
  return out;
}

// ---- Expressions ----

class ExprParser {
 public:
  ExprParser(const std::string& text, std::string where, int line)
      : toks_(tokenize(text, where)), where_(std::move(where)), line_(line) {}

  bool at_end() const { return toks_[pos_].kind == Token::Kind::end; }
  bool peek_name(const char* n) const { return toks_[pos_].kind == Token::Kind::name && toks_[pos_].text == n; }
  bool peek_op(const char* o) const { return toks_[pos_].kind == Token::Kind::op && toks_[pos_].text == o; }
  bool accept_name(const char* n) {
    if (!peek_name(n)) return false;
    ++pos_;
    return true;
  }
  bool accept_op(const char* o) {
    if (!peek_op(o)) return false;
    ++pos_;
    return true;
  }
  void expect_op(const char* o) {
    if (!accept_op(o)) error(fmt::format("expected '{}'", o));
  }
  std::string expect_name() {
    if (toks_[pos_].kind != Token::Kind::name) error("expected a name");
    return toks_[pos_++].text;
  }
  void expect_end() {
    if (!at_end()) error(fmt::format("unexpected '{}'", toks_[pos_].text));
  }
  [[noreturn]] void error(const std::string& what) const {
    fail("{}: {}{}", where_, what, at_end() ? " at the end of the tag" : fmt::format(" at '{}'", toks_[pos_].text));
  }

  // expression with a top-level tuple: "a, b" (for `set a, b = ...`, `for` iterables)
  // `condexpr` false: no "x if c else y" at the top (a for loop's
  // iterable, whose "if" filters the items).
  ExprP tuple_or_expr(bool condexpr = true) {
    ExprP first = condexpr ? expression() : or_expr();
    if (!peek_op(",")) return first;
    auto t = make(Expr::Kind::tuple);
    t->args.push_back(first);
    while (accept_op(",")) {
      if (at_end() || peek_op(")")) break;
      t->args.push_back(condexpr ? expression() : or_expr());
    }
    return t;
  }

  ExprP expression() {
    ExprP e = or_expr();
    if (accept_name("if")) {
      auto c = make(Expr::Kind::cond);
      c->args = {e, or_expr(), accept_name("else") ? expression() : nullptr};
      return c;
    }
    return e;
  }

 private:
  std::shared_ptr<Expr> make(Expr::Kind k) {
    auto e = std::make_shared<Expr>();
    e->kind = k;
    e->line = line_;
    return e;
  }
  ExprP binary(const std::string& op, ExprP a, ExprP b) {
    auto e = make(Expr::Kind::binary);
    e->name = op;
    e->args = {std::move(a), std::move(b)};
    return e;
  }
  ExprP or_expr() {
    ExprP e = and_expr();
    while (accept_name("or")) e = binary("or", e, and_expr());
    return e;
  }
  ExprP and_expr() {
    ExprP e = not_expr();
    while (accept_name("and")) e = binary("and", e, not_expr());
    return e;
  }
  ExprP not_expr() {
    if (accept_name("not")) {
      auto e = make(Expr::Kind::unary);
      e->name = "not";
      e->args = {not_expr()};
      return e;
    }
    return compare();
  }
  ExprP compare() {
    ExprP first = math1();
    std::shared_ptr<Expr> c;
    for (;;) {
      std::string op;
      for (const char* o : {"==", "!=", "<=", ">=", "<", ">"})
        if (accept_op(o)) {
          op = o;
          break;
        }
      if (op.empty() && accept_name("in")) op = "in";
      if (op.empty() && peek_name("not") && toks_[pos_ + 1].kind == Token::Kind::name && toks_[pos_ + 1].text == "in") {
        pos_ += 2;
        op = "not in";
      }
      if (op.empty()) break;
      if (!c) {
        c = make(Expr::Kind::compare);
        c->args.push_back(first);
      }
      c->ops.push_back(op);
      c->args.push_back(math1());
    }
    return c ? ExprP(c) : first;
  }
  ExprP math1() {
    ExprP e = concat();
    for (;;) {
      if (accept_op("+")) e = binary("+", e, concat());
      else if (accept_op("-")) e = binary("-", e, concat());
      else return e;
    }
  }
  ExprP concat() {
    ExprP e = math2();
    while (accept_op("~")) e = binary("~", e, math2());
    return e;
  }
  ExprP math2() {
    ExprP e = power();
    for (;;) {
      std::string op;
      for (const char* o : {"//", "*", "/", "%"})
        if (accept_op(o)) {
          op = o;
          break;
        }
      if (op.empty()) return e;
      e = binary(op, e, power());
    }
  }
  ExprP power() {
    ExprP e = unary(true);
    while (accept_op("**")) e = binary("**", e, unary(true));
    return e;
  }
  ExprP unary(bool with_filter) {
    ExprP e;
    if (peek_op("-") || peek_op("+")) {
      auto u = make(Expr::Kind::unary);
      u->name = toks_[pos_++].text;
      u->args = {unary(false)};
      e = u;
    } else {
      e = postfix(primary());
    }
    return with_filter ? filters(e) : e;
  }
  // Comma-separated items up to `close` (a trailing comma allowed), each
  // read by `item`; the opening bracket is already read.
  template <class F>
  void items_until(const char* close, F&& item) {
    for (bool first = true; !accept_op(close); first = false) {
      if (!first) {
        expect_op(",");
        if (accept_op(close)) break;
      }
      item();
    }
  }
  // (args) after a callee: positional then name=value.
  void call_args(Expr& e) {
    std::vector<ExprP> pos, kwv;
    items_until(")", [&] {
      if (toks_[pos_].kind == Token::Kind::name && toks_[pos_ + 1].kind == Token::Kind::op &&
          toks_[pos_ + 1].text == "=") {
        e.kw.push_back(toks_[pos_].text);
        pos_ += 2;
        kwv.push_back(expression());
      } else {
        if (!kwv.empty()) error("a positional argument after a keyword argument");
        pos.push_back(expression());
      }
    });
    for (auto& p : pos) e.args.push_back(p);
    for (auto& k : kwv) e.args.push_back(k);
  }
  ExprP postfix(ExprP e) {
    for (;;) {
      if (accept_op(".")) {
        auto a = make(Expr::Kind::attr);
        if (toks_[pos_].kind == Token::Kind::integer) {  // x.0: an index
          a->kind = Expr::Kind::item;
          auto k = make(Expr::Kind::literal);
          k->value = toks_[pos_++].value;
          a->args = {e, k};
        } else {
          a->name = expect_name();
          a->args = {e};
        }
        e = a;
      } else if (accept_op("[")) {
        e = subscript(e);
      } else if (accept_op("(")) {
        auto c = make(Expr::Kind::call);
        c->args.push_back(e);
        call_args(*c);
        e = c;
      } else {
        return e;
      }
    }
  }
  ExprP subscript(ExprP obj) {
    ExprP parts[3];
    int n = 0;
    bool slice = false;
    for (;;) {
      if (!peek_op(":") && !peek_op("]")) parts[n] = expression();
      if (accept_op(":")) {
        slice = true;
        if (++n > 2) error("a slice has at most three parts");
        continue;
      }
      expect_op("]");
      break;
    }
    if (!slice) {
      auto e = make(Expr::Kind::item);
      e->args = {obj, parts[0]};
      return e;
    }
    auto e = make(Expr::Kind::slice);
    e->args = {obj, parts[0], parts[1], parts[2]};
    return e;
  }
  ExprP filters(ExprP e) {
    for (;;) {
      if (accept_op("|")) {
        auto f = make(Expr::Kind::filter);
        f->name = expect_name();
        while (accept_op(".")) f->name += "." + expect_name();
        f->args.push_back(e);
        if (accept_op("(")) call_args(*f);
        e = f;
      } else if (accept_name("is")) {
        auto t = make(Expr::Kind::test);
        t->negated = accept_name("not");
        t->name = expect_name();
        t->args.push_back(e);
        if (accept_op("(")) {
          call_args(*t);
        } else if (!at_end() && !peek_op(")") && !peek_op(",") && !peek_op("]") && !peek_op("}") &&
                   !peek_op(":") && !peek_name("and") && !peek_name("or") && !peek_name("else") &&
                   !peek_name("if") && !peek_op("|") && !peek_op("==") && !peek_op("!=")) {
          t->args.push_back(postfix(primary()));  // `is divisibleby 3`, `is sameas none`
        }
        e = t;
      } else {
        return e;
      }
    }
  }
  ExprP primary() {
    const Token& t = toks_[pos_];
    if (t.kind == Token::Kind::string) {
      auto e = make(Expr::Kind::literal);
      std::string s;
      while (toks_[pos_].kind == Token::Kind::string) s += toks_[pos_++].text;  // adjacent literals join
      e->value = Value(s);
      return e;
    }
    if (t.kind == Token::Kind::integer || t.kind == Token::Kind::real) {
      auto e = make(Expr::Kind::literal);
      e->value = toks_[pos_++].value;
      return e;
    }
    if (t.kind == Token::Kind::name) {
      ++pos_;
      auto e = make(Expr::Kind::literal);
      if (t.text == "true" || t.text == "True") e->value = Value(true);
      else if (t.text == "false" || t.text == "False") e->value = Value(false);
      else if (t.text == "none" || t.text == "None") e->value = Value::none();
      else e->kind = Expr::Kind::name, e->name = t.text;
      return e;
    }
    if (accept_op("(")) {
      if (accept_op(")")) return make(Expr::Kind::tuple);
      ExprP first = expression();
      if (accept_op(")")) return first;
      auto tup = make(Expr::Kind::tuple);
      tup->args.push_back(first);
      while (accept_op(",")) {
        if (peek_op(")")) break;
        tup->args.push_back(expression());
      }
      expect_op(")");
      return tup;
    }
    if (accept_op("[")) {
      auto l = make(Expr::Kind::list);
      items_until("]", [&] { l->args.push_back(expression()); });
      return l;
    }
    if (accept_op("{")) {
      auto d = make(Expr::Kind::dict);
      items_until("}", [&] {
        d->args.push_back(expression());
        expect_op(":");
        d->args.push_back(expression());
      });
      return d;
    }
    error("expected a value");
  }

  std::vector<Token> toks_;
  size_t pos_ = 0;
  std::string where_;
  int line_;
};

// ---- Statements ----

class Parser {
 public:
  Parser(std::vector<Segment> segs, std::string name) : segs_(std::move(segs)), name_(std::move(name)) {}

  Body parse_all() {
    Body b = parse_body({});
    if (i_ < segs_.size()) fail("{} line {}: unexpected {{% {} %}}", name_, segs_[i_].line, segs_[i_].text);
    return b;
  }

 private:
  std::string where(int line) const { return fmt::format("{} line {}", name_, line); }
  static std::string keyword(const std::string& stmt) {
    size_t n = 0;
    while (n < stmt.size() && (std::isalnum(static_cast<unsigned char>(stmt[n])) || stmt[n] == '_')) ++n;
    return stmt.substr(0, n);
  }

  // Nodes until a block tag whose keyword is in `ends` (left unconsumed).
  Body parse_body(const std::vector<std::string>& ends) {
    Body out;
    while (i_ < segs_.size()) {
      const Segment& s = segs_[i_];
      auto n = std::make_shared<Node>();
      n->line = s.line;
      if (s.kind == Segment::Kind::text) {
        n->kind = Node::Kind::text;
        n->text = s.text;
        ++i_;
      } else if (s.kind == Segment::Kind::var) {
        ExprParser p(s.text, where(s.line), s.line);
        n->kind = Node::Kind::output;
        n->expr = p.expression();
        p.expect_end();
        ++i_;
      } else {
        const std::string kw = keyword(s.text);
        for (const std::string& e : ends)
          if (kw == e) return out;
        ++i_;
        statement(kw, s, *n);
      }
      out.push_back(n);
    }
    if (!ends.empty())
      fail("{}: the template ends inside a block that needs {{% {} %}}", name_, ends.back());
    return out;
  }

  std::string end_tag() {  // the block tag that ended parse_body, consumed
    const std::string kw = keyword(segs_[i_].text);
    ++i_;
    return kw;
  }

  void statement(const std::string& kw, const Segment& s, Node& n) {
    ExprParser p(s.text.substr(kw.size()), where(s.line), s.line);
    if (kw == "if") {
      n.kind = Node::Kind::if_;
      ExprP cond = p.expression();
      p.expect_end();
      for (;;) {
        Body b = parse_body({"elif", "else", "endif"});
        n.branches.emplace_back(cond, std::move(b));
        const Segment& e = segs_[i_];
        const std::string k = end_tag();
        if (k == "elif") {
          ExprParser q(e.text.substr(4), where(e.line), e.line);
          cond = q.expression();
          q.expect_end();
        } else if (k == "else") {
          n.else_body = parse_body({"endif"});
          end_tag();
          break;
        } else {
          break;
        }
      }
    } else if (kw == "for") {
      n.kind = Node::Kind::for_;
      do n.targets.push_back(p.expect_name());
      while (p.accept_op(","));
      if (!p.accept_name("in")) p.error("expected 'in'");
      n.expr = p.tuple_or_expr(false);
      if (p.accept_name("if")) n.cond = p.expression();
      if (p.accept_name("recursive")) p.error("recursive loops are not supported");
      p.expect_end();
      n.body = parse_body({"else", "endfor"});
      if (end_tag() == "else") {
        n.else_body = parse_body({"endfor"});
        end_tag();
      }
    } else if (kw == "set") {
      std::string target = p.expect_name();
      if (p.accept_op(".")) target += "." + p.expect_name();
      n.targets.push_back(target);
      while (p.accept_op(",")) n.targets.push_back(p.expect_name());
      if (p.accept_op("=")) {
        n.kind = Node::Kind::set;
        n.expr = p.tuple_or_expr();
        p.expect_end();
      } else {
        n.kind = Node::Kind::set_block;
        if (p.accept_op("|")) p.error("a filter on {% set %} blocks is not supported");
        p.expect_end();
        n.body = parse_body({"endset"});
        end_tag();
      }
    } else if (kw == "macro" || kw == "call") {
      n.kind = kw == "macro" ? Node::Kind::macro : Node::Kind::call_block;
      if (kw == "macro") n.name = p.expect_name();
      if (kw == "macro" || p.peek_op("(")) {
        p.expect_op("(");
        while (!p.accept_op(")")) {
          if (!n.params.empty()) p.expect_op(",");
          n.params.push_back(p.expect_name());
          n.defaults.push_back(p.accept_op("=") ? p.expression() : nullptr);
        }
      }
      if (kw == "call") n.expr = p.expression();
      p.expect_end();
      n.body = parse_body({kw == "macro" ? "endmacro" : "endcall"});
      end_tag();
    } else if (kw == "filter") {
      n.kind = Node::Kind::filter_block;
      // A chain over a placeholder: "name(args) | name2".
      n.expr = ExprParser("__filter_input__ | " + s.text.substr(kw.size()), where(s.line), s.line).expression();
      n.body = parse_body({"endfilter"});
      end_tag();
    } else if (kw == "break" || kw == "continue") {
      p.expect_end();
      n.kind = kw == "break" ? Node::Kind::break_ : Node::Kind::continue_;
    } else if (kw == "generation") {
      p.expect_end();
      n.kind = Node::Kind::generation;
      n.body = parse_body({"endgeneration"});
      end_tag();
    } else {
      fail("{}: unknown or unsupported tag {{% {} %}}", where(s.line), kw.empty() ? s.text : kw);
    }
  }

  std::vector<Segment> segs_;
  size_t i_ = 0;
  std::string name_;
};

}  // namespace

Body parse_template(const std::string& source, const std::string& name) {
  return Parser(segment(source, name), name).parse_all();
}

}  // namespace claw::data::jinja
