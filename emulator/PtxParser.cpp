//===- PtxParser.cpp - PTX text -> Syntax (SynModule) ---------------------===//
//
// A tokenizer and a statement parser for the subset of PTX that LLVM's
// NVPTX backend emits for kernels: module directives, `.entry` kernels with
// their parameters and performance directives, register and variable
// declarations, labels, and guarded instructions with their operands.
// Nested `{ ... }` blocks (what inline assembly wraps itself in) are
// scopes: their registers and labels are renamed apart (`name$scope`), so
// two blocks may both declare `.reg .pred p` and label `waitLoop`.
// Nothing here knows what an opcode means (Decode.cpp does).
//
//===----------------------------------------------------------------------===//
#include "Syntax.h"

#include <cctype>
#include <cstdlib>
#include <functional>
#include <map>
#include <set>

namespace attnc::emu {

Ty parseTy(const std::string &in) {
  std::string s = !in.empty() && in[0] == '.' ? in.substr(1) : in;
  static const struct { const char *n; Ty t; } table[] = {
      {"pred", Ty::Pred}, {"b8", Ty::B8},     {"b16", Ty::B16},
      {"b32", Ty::B32},   {"b64", Ty::B64},   {"u8", Ty::U8},
      {"u16", Ty::U16},   {"u32", Ty::U32},   {"u64", Ty::U64},
      {"s8", Ty::S8},     {"s16", Ty::S16},   {"s32", Ty::S32},
      {"s64", Ty::S64},   {"f16", Ty::F16},   {"f16x2", Ty::F16x2},
      {"bf16", Ty::BF16}, {"bf16x2", Ty::BF16x2}, {"f32", Ty::F32},
      {"f64", Ty::F64}};
  for (const auto &e : table)
    if (s == e.n)
      return e.t;
  return Ty::None;
}

const char *tyName(Ty t) {
  switch (t) {
  case Ty::None: return "none";
  case Ty::Pred: return "pred";
  case Ty::B8: return "b8";
  case Ty::B16: return "b16";
  case Ty::B32: return "b32";
  case Ty::B64: return "b64";
  case Ty::U8: return "u8";
  case Ty::U16: return "u16";
  case Ty::U32: return "u32";
  case Ty::U64: return "u64";
  case Ty::S8: return "s8";
  case Ty::S16: return "s16";
  case Ty::S32: return "s32";
  case Ty::S64: return "s64";
  case Ty::F16: return "f16";
  case Ty::F16x2: return "f16x2";
  case Ty::BF16: return "bf16";
  case Ty::BF16x2: return "bf16x2";
  case Ty::F32: return "f32";
  case Ty::F64: return "f64";
  }
  return "?";
}

int tyBits(Ty t) {
  switch (t) {
  case Ty::None: return 0;
  case Ty::Pred: return 1;
  case Ty::B8: case Ty::U8: case Ty::S8: return 8;
  case Ty::B16: case Ty::U16: case Ty::S16: case Ty::F16: case Ty::BF16:
    return 16;
  case Ty::B32: case Ty::U32: case Ty::S32: case Ty::F32: case Ty::F16x2:
  case Ty::BF16x2:
    return 32;
  case Ty::B64: case Ty::U64: case Ty::S64: case Ty::F64: return 64;
  }
  return 0;
}

namespace {

struct Token {
  enum Kind { Word, Number, String, Punct, End } kind = End;
  std::string text;
  int line = 0;
};

bool wordStart(char c) {
  return std::isalpha(static_cast<unsigned char>(c)) || c == '_' || c == '.' ||
         c == '%' || c == '$';
}
bool wordChar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' ||
         c == '$' || c == '%';
}

bool tokenize(const std::string &s, std::vector<Token> &out, std::string &err) {
  int line = 1;
  size_t i = 0, n = s.size();
  while (i < n) {
    char c = s[i];
    if (c == '\n') {
      ++line;
      ++i;
    } else if (std::isspace(static_cast<unsigned char>(c))) {
      ++i;
    } else if (c == '/' && i + 1 < n && s[i + 1] == '/') {
      while (i < n && s[i] != '\n')
        ++i;
    } else if (c == '/' && i + 1 < n && s[i + 1] == '*') {
      int start = line;
      i += 2;
      while (i + 1 < n && !(s[i] == '*' && s[i + 1] == '/')) {
        line += s[i] == '\n';
        ++i;
      }
      if (i + 1 >= n) {
        err = "line " + std::to_string(start) + ": unterminated comment";
        return false;
      }
      i += 2;
    } else if (c == '"') {
      size_t j = i + 1;
      while (j < n && s[j] != '"' && s[j] != '\n')
        ++j;
      if (j >= n || s[j] != '"') {
        err = "line " + std::to_string(line) + ": unterminated string";
        return false;
      }
      out.push_back({Token::String, s.substr(i + 1, j - i - 1), line});
      i = j + 1;
    } else if (std::isdigit(static_cast<unsigned char>(c))) {
      size_t j = i;
      while (j < n && (std::isalnum(static_cast<unsigned char>(s[j])) || s[j] == '.' ||
                       ((s[j] == '+' || s[j] == '-') && j > i &&
                        (s[j - 1] == 'e' || s[j - 1] == 'E') &&
                        !(s[i] == '0' && i + 1 < n &&
                          (s[i + 1] == 'x' || s[i + 1] == 'X' || s[i + 1] == 'f' ||
                           s[i + 1] == 'F' || s[i + 1] == 'd' || s[i + 1] == 'D')))))
        ++j;
      out.push_back({Token::Number, s.substr(i, j - i), line});
      i = j;
    } else if (wordStart(c)) {
      size_t j = i + 1;
      while (j < n && wordChar(s[j]))
        ++j;
      // "::" belongs to qualifiers such as .L2::128B and .L1::no_allocate.
      while (j + 1 < n && s[j] == ':' && s[j + 1] == ':') {
        j += 2;
        while (j < n && wordChar(s[j]))
          ++j;
      }
      out.push_back({Token::Word, s.substr(i, j - i), line});
      i = j;
    } else if (std::string("{}[](),;:+-<>|!@=").find(c) != std::string::npos) {
      out.push_back({Token::Punct, std::string(1, c), line});
      ++i;
    } else {
      err = "line " + std::to_string(line) + ": unexpected character '" +
            std::string(1, c) + "'";
      return false;
    }
  }
  out.push_back({Token::End, "", line});
  return true;
}

class Parser {
public:
  Parser(std::vector<Token> toks, std::string &err)
      : t_(std::move(toks)), err_(err) {}

  bool module(SynModule &m) {
    while (peek().kind != Token::End) {
      const Token &tk = peek();
      if (tk.text == ".version") {
        next();
        const Token &v = next();
        size_t dot = v.text.find('.');
        if (v.kind != Token::Number || dot == std::string::npos)
          return fail(v, "expected a version such as 8.0");
        m.version = std::atoi(v.text.c_str()) * 10 + std::atoi(v.text.c_str() + dot + 1);
      } else if (tk.text == ".target") {
        next();
        const Token &v = next();
        if (v.text.rfind("sm_", 0) != 0)
          return fail(v, "expected a target such as sm_90, got '" + v.text + "'");
        m.target = std::atoi(v.text.c_str() + 3);
        m.archSpecific = !v.text.empty() && v.text.back() == 'a';
        while (peekIs(",")) {
          next();
          next();
        }
      } else if (tk.text == ".address_size") {
        next();
        const Token &v = next();
        if (v.text != "64")
          return fail(v, "only .address_size 64 is supported");
      } else if (tk.text == ".file" || tk.text == ".loc" || tk.text == ".section") {
        bool section = tk.text == ".section";
        skipLine();
        // A debug section's contents: `{ .b8 ... }`, skipped whole.
        if (section && peekIs("{")) {
          int depth = 0;
          do {
            if (peek().kind == Token::End)
              return fail(peek(), "a .section's block is not closed");
            if (peekIs("{"))
              ++depth;
            else if (peekIs("}"))
              --depth;
            next();
          } while (depth > 0);
        }
      } else if (tk.text == ".visible" || tk.text == ".weak" || tk.text == ".extern" ||
                 tk.text == ".entry" || tk.text == ".func" || tk.text == ".shared" ||
                 tk.text == ".global" || tk.text == ".const") {
        bool isExtern = false;
        while (peek().text == ".visible" || peek().text == ".weak" ||
               peek().text == ".extern")
          isExtern |= next().text == ".extern";
        const Token &kw = peek();
        if (kw.text == ".entry") {
          next();
          SynKernel k;
          if (!kernel(k))
            return false;
          m.kernels.push_back(std::move(k));
        } else if (kw.text == ".func") {
          return fail(kw, "device functions (.func) are not supported by the "
                          "emulator");
        } else if (kw.text == ".shared") {
          SynVar v;
          if (!variable(v))
            return false;
          v.isExtern = isExtern;
          m.vars.push_back(v);
        } else {
          return fail(kw, "module-scope '" + kw.text +
                              "' variables are not supported by the emulator");
        }
      } else {
        return fail(tk, "unexpected '" + tk.text + "' at module scope");
      }
    }
    return true;
  }

private:
  std::vector<Token> t_;
  size_t p_ = 0;
  std::string &err_;

  const Token &peek(size_t k = 0) const {
    return t_[std::min(p_ + k, t_.size() - 1)];
  }
  const Token &next() {
    const Token &tk = peek();
    if (p_ < t_.size() - 1)
      ++p_;
    return tk;
  }
  bool peekIs(const char *s) const { return peek().text == s && peek().kind != Token::String; }
  bool fail(const Token &tk, const std::string &what) {
    err_ = "line " + std::to_string(tk.line) + ": " + what;
    return false;
  }
  bool expect(const char *s) {
    if (!peekIs(s))
      return fail(peek(), std::string("expected '") + s + "', got '" +
                              peek().text + "'");
    next();
    return true;
  }
  void skipLine() {
    int line = next().line;
    while (peek().kind != Token::End && peek().line == line)
      next();
  }
  bool integer(int64_t &v) {
    bool neg = false;
    if (peekIs("-")) {
      next();
      neg = true;
    }
    const Token &tk = next();
    if (tk.kind != Token::Number)
      return fail(tk, "expected a number, got '" + tk.text + "'");
    std::string s = tk.text;
    if (!s.empty() && (s.back() == 'U' || s.back() == 'u'))
      s.pop_back();
    char *end = nullptr;
    unsigned long long u;
    if (s.size() > 2 && s[0] == '0' && (s[1] == 'b' || s[1] == 'B'))
      u = std::strtoull(s.c_str() + 2, &end, 2);
    else
      u = std::strtoull(s.c_str(), &end, 0);
    if (*end)
      return fail(tk, "bad integer '" + tk.text + "'");
    v = neg ? -static_cast<int64_t>(u) : static_cast<int64_t>(u);
    return true;
  }

  // .param .u64 .ptr .align 1 name  |  .param .align 8 .b8 name[16]
  bool param(SynParam &p) {
    if (!expect(".param"))
      return false;
    while (peek().kind == Token::Word && peek().text[0] == '.') {
      const Token &tk = next();
      if (tk.text == ".align") {
        int64_t a;
        if (!integer(a))
          return false;
        p.align = static_cast<int>(a);
      } else if (Ty t = parseTy(tk.text); t != Ty::None) {
        p.type = t;
      } else if (tk.text != ".ptr" && tk.text != ".global" &&
                 tk.text != ".shared" && tk.text != ".const" &&
                 tk.text != ".local") {
        return fail(tk, "unexpected '" + tk.text + "' in a parameter");
      }
    }
    const Token &name = next();
    if (name.kind != Token::Word || p.type == Ty::None)
      return fail(name, "expected a typed parameter name");
    p.name = name.text;
    if (peekIs("[")) {
      next();
      if (!integer(p.count) || !expect("]"))
        return false;
    }
    return true;
  }

  // .shared .align 16 .b8 name[N];   .local ...   (the leading space word)
  bool variable(SynVar &v) {
    const Token &sp = next();
    v.line = sp.line;
    v.space = sp.text == ".shared" ? Space::Shared
              : sp.text == ".local" ? Space::Local
              : sp.text == ".global" ? Space::Global
                                     : Space::Const;
    while (peek().kind == Token::Word && peek().text[0] == '.') {
      const Token &tk = next();
      if (tk.text == ".align") {
        int64_t a;
        if (!integer(a))
          return false;
        v.align = static_cast<int>(a);
      } else if (Ty t = parseTy(tk.text); t != Ty::None) {
        v.type = t;
      } else {
        return fail(tk, "unexpected '" + tk.text + "' in a variable");
      }
    }
    const Token &name = next();
    if (name.kind != Token::Word)
      return fail(name, "expected a variable name");
    v.name = name.text;
    v.count = 1;
    if (peekIs("[")) {
      next();
      if (peekIs("]")) {
        v.count = -1;
      } else if (!integer(v.count)) {
        return false;
      }
      if (!expect("]"))
        return false;
    }
    if (peekIs("="))
      return fail(peek(), "initialized variables are not supported by the "
                          "emulator");
    return expect(";");
  }

  bool kernel(SynKernel &k) {
    const Token &name = next();
    k.name = name.text;
    k.line = name.line;
    if (!expect("("))
      return false;
    while (!peekIs(")")) {
      SynParam p;
      if (!param(p))
        return false;
      k.params.push_back(p);
      if (peekIs(","))
        next();
      else if (!peekIs(")"))
        return fail(peek(), "expected ',' or ')' in the parameter list");
    }
    next();
    while (!peekIs("{")) {
      const Token &tk = next();
      int *dims = tk.text == ".maxntid"   ? k.maxntid
                  : tk.text == ".reqntid" ? k.reqntid
                                          : nullptr;
      if (dims) {
        for (int i = 0; i < 3; ++i) {
          int64_t v;
          if (!integer(v))
            return false;
          dims[i] = static_cast<int>(v);
          if (!peekIs(","))
            break;
          next();
        }
        for (int i = 1; i < 3; ++i)
          if (!dims[i])
            dims[i] = 1;
      } else if (tk.text == ".minnctapersm" || tk.text == ".maxnreg" ||
                 tk.text == ".maxclusterrank") {
        int64_t v;
        if (!integer(v))
          return false;
        if (tk.text == ".maxnreg")
          k.maxnreg = static_cast<int>(v);
      } else if (tk.text == ".noreturn" || tk.text == ".explicitcluster") {
      } else if (tk.text == ".pragma") {
        next();
        if (!expect(";"))
          return false;
      } else {
        return fail(tk, "unexpected '" + tk.text + "' before the kernel body");
      }
    }
    next(); // {
    // Scope 0 is the body; each nested block a scope with its parent.
    std::vector<int> parent = {-1}, open = {0};
    std::vector<int> regScope; // per k.regs entry
    std::vector<int> stmtScope; // per k.body entry
    while (!open.empty()) {
      const Token &tk = peek();
      if (tk.kind == Token::End)
        return fail(tk, "the body of '" + k.name + "' is not closed");
      if (peekIs("{")) {
        next();
        parent.push_back(open.back());
        open.push_back(static_cast<int>(parent.size()) - 1);
      } else if (peekIs("}")) {
        next();
        open.pop_back();
      } else if (tk.text == ".reg") {
        next();
        const Token &ty = next();
        Ty t = parseTy(ty.text);
        if (t == Ty::None)
          return fail(ty, "expected a register type, got '" + ty.text + "'");
        for (;;) {
          const Token &rn = next();
          if (rn.kind != Token::Word || rn.text[0] == '.')
            return fail(rn, "expected a register name");
          SynReg r{t, rn.text, -1};
          if (peekIs("<")) {
            next();
            int64_t c;
            if (!integer(c) || !expect(">"))
              return false;
            r.count = static_cast<int>(c);
          }
          k.regs.push_back(r);
          regScope.push_back(open.back());
          if (!peekIs(","))
            break;
          next();
        }
        if (!expect(";"))
          return false;
      } else if (tk.text == ".shared" || tk.text == ".local" ||
                 tk.text == ".global" || tk.text == ".const") {
        SynVar v;
        if (!variable(v))
          return false;
        k.vars.push_back(v);
      } else if (tk.text == ".pragma") {
        next();
        next();
        if (!expect(";"))
          return false;
      } else if (tk.text == ".loc" || tk.text == ".file") {
        skipLine();
      } else if (tk.kind == Token::Word && peek(1).text == ":" &&
                 peek(1).kind == Token::Punct) {
        SynStmt s;
        s.label = tk.text;
        s.instr.line = tk.line;
        next();
        next();
        k.body.push_back(std::move(s));
        stmtScope.push_back(open.back());
      } else {
        SynStmt s;
        if (!instruction(s.instr))
          return false;
        k.body.push_back(std::move(s));
        stmtScope.push_back(open.back());
      }
    }
    if (parent.size() > 1)
      renameScopes(k, parent, regScope, stmtScope);
    return true;
  }

  /// Gives the registers and labels of nested blocks names of their own:
  /// every use resolves to the innermost enclosing block that declares it.
  static void renameScopes(SynKernel &k, const std::vector<int> &parent,
                           const std::vector<int> &regScope,
                           const std::vector<int> &stmtScope) {
    auto suffix = [](int scope) { return "$" + std::to_string(scope); };
    std::vector<std::map<std::string, int>> arrays(parent.size()); // base -> count
    std::vector<std::set<std::string>> scalars(parent.size()), labels(parent.size());
    for (size_t i = 0; i < k.regs.size(); ++i) {
      int sc = regScope[i];
      if (sc == 0)
        continue;
      SynReg &r = k.regs[i];
      if (r.count < 0)
        scalars[size_t(sc)].insert(r.name);
      else
        arrays[size_t(sc)][r.name] = r.count;
      r.name += suffix(sc) + (r.count < 0 ? "" : "_");
    }
    for (size_t i = 0; i < k.body.size(); ++i)
      if (!k.body[i].label.empty() && stmtScope[i] != 0)
        labels[size_t(stmtScope[i])].insert(k.body[i].label);
    auto reg = [&](std::string &name, int sc) {
      for (int s = sc; s > 0; s = parent[size_t(s)]) {
        if (scalars[size_t(s)].count(name)) {
          name += suffix(s);
          return;
        }
        for (const auto &[base, count] : arrays[size_t(s)])
          if (name.size() > base.size() && name.compare(0, base.size(), base) == 0 &&
              std::isdigit(static_cast<unsigned char>(name[base.size()])) &&
              std::atoi(name.c_str() + base.size()) < count) {
            name = base + suffix(s) + "_" + name.substr(base.size());
            return;
          }
      }
    };
    auto label = [&](std::string &name, int sc) {
      for (int s = sc; s > 0; s = parent[size_t(s)])
        if (labels[size_t(s)].count(name)) {
          name += suffix(s);
          return;
        }
    };
    std::function<void(SynOperand &, int)> operand = [&](SynOperand &o, int sc) {
      if (o.kind == SynOperand::Name) { // a register without '%', or a label
        std::string before = o.name;
        reg(o.name, sc);
        if (o.name == before)
          label(o.name, sc);
      } else if (!o.name.empty()) {
        reg(o.name, sc);
      }
      for (SynOperand &e : o.elems)
        operand(e, sc);
    };
    for (size_t i = 0; i < k.body.size(); ++i) {
      int sc = stmtScope[i];
      if (sc == 0)
        continue;
      SynStmt &st = k.body[i];
      if (!st.label.empty()) {
        label(st.label, sc);
        continue;
      }
      if (!st.instr.guard.empty())
        reg(st.instr.guard, sc);
      for (SynOperand &o : st.instr.ops)
        operand(o, sc);
    }
  }

  bool instruction(SynInstr &in) {
    in.line = peek().line;
    if (peekIs("@")) {
      next();
      if (peekIs("!")) {
        next();
        in.guardNeg = true;
      }
      const Token &g = next();
      if (g.kind != Token::Word || g.text[0] == '.')
        return fail(g, "expected a predicate register after '@'");
      in.guard = g.text;
    }
    const Token &op = next();
    if (op.kind != Token::Word || op.text[0] == '.' || op.text[0] == '%')
      return fail(op, "expected an instruction, got '" + op.text + "'");
    in.opcode = op.text;
    if (peekIs(";")) {
      next();
      return true;
    }
    for (;;) {
      SynOperand o;
      if (!operand(o))
        return false;
      in.ops.push_back(std::move(o));
      if (peekIs(",")) {
        next();
        continue;
      }
      return expect(";");
    }
  }

  bool number(SynOperand &o, bool neg) {
    const Token &tk = peek();
    const std::string &s = tk.text;
    if (s.size() > 2 && s[0] == '0' && (s[1] == 'f' || s[1] == 'F' ||
                                        s[1] == 'd' || s[1] == 'D')) {
      next();
      o.kind = SynOperand::Float;
      o.fwidth = (s[1] == 'f' || s[1] == 'F') ? 32 : 64;
      if (s.size() != size_t(2 + o.fwidth / 4))
        return fail(tk, "bad floating-point literal '" + s + "'");
      char *end = nullptr;
      o.fbits = std::strtoull(s.c_str() + 2, &end, 16);
      if (*end)
        return fail(tk, "bad floating-point literal '" + s + "'");
      if (neg)
        o.fbits ^= o.fwidth == 32 ? 0x80000000ull : 0x8000000000000000ull;
      return true;
    }
    bool isFloat = s.find('.') != std::string::npos ||
                   ((s.find('e') != std::string::npos || s.find('E') != std::string::npos) &&
                    !(s.size() > 1 && (s[1] == 'x' || s[1] == 'X')));
    if (isFloat) {
      next();
      char *end = nullptr;
      o.kind = SynOperand::Float;
      o.dval = std::strtod(s.c_str(), &end);
      if (*end)
        return fail(tk, "bad number '" + s + "'");
      if (neg)
        o.dval = -o.dval;
      return true;
    }
    o.kind = SynOperand::Int;
    int64_t v;
    if (!integer(v))
      return false;
    o.ival = neg ? -v : v;
    return true;
  }

  bool operand(SynOperand &o) {
    const Token &tk = peek();
    if (peekIs("{")) {
      next();
      o.kind = SynOperand::Vec;
      for (;;) {
        SynOperand e;
        if (!operand(e))
          return false;
        o.elems.push_back(std::move(e));
        if (peekIs(",")) {
          next();
          continue;
        }
        if (!expect("}"))
          return false;
        // `{ %r }` (what inline assembly writes for a scalar) is the
        // register itself: no instruction takes a vector of one.
        if (o.elems.size() == 1) {
          SynOperand one = std::move(o.elems[0]);
          o = std::move(one);
        }
        return true;
      }
    }
    if (peekIs("[")) {
      next();
      o.kind = SynOperand::Addr;
      if (peek().kind == Token::Word) {
        o.name = next().text;
      } else if (peek().kind == Token::Number || peekIs("-")) {
        if (!integer(o.offset))
          return false;
        return expect("]");
      }
      if (peekIs("+")) {
        next();
        if (!integer(o.offset))
          return false;
      } else if (peekIs("-")) {
        int64_t v;
        if (!integer(v))
          return false;
        o.offset = v;
      }
      if (peekIs(",")) { // [tensorMap, {c0, c1, ...}]
        next();
        SynOperand coords;
        if (!operand(coords))
          return false;
        if (coords.kind == SynOperand::Vec)
          o.elems = std::move(coords.elems);
        else
          o.elems.push_back(std::move(coords));
      }
      return expect("]");
    }
    if (peekIs("!")) {
      next();
      const Token &r = next();
      if (r.kind != Token::Word || r.text[0] == '.')
        return fail(r, "expected a predicate register after '!'");
      o.kind = SynOperand::NotReg;
      o.name = r.text;
      return true;
    }
    if (peekIs("-")) {
      next();
      if (peek().kind != Token::Number)
        return fail(peek(), "expected a number after '-'");
      return number(o, true);
    }
    if (tk.kind == Token::Number)
      return number(o, false);
    if (tk.kind == Token::Word) {
      next();
      if (tk.text == "_") {
        o.kind = SynOperand::Sink;
        return true;
      }
      if (tk.text[0] == '%') {
        o.kind = SynOperand::Reg;
        o.name = tk.text;
        if (peekIs("|")) {
          next();
          SynOperand second;
          if (!operand(second))
            return false;
          SynOperand first = o;
          o = SynOperand();
          o.kind = SynOperand::Pair;
          o.elems = {first, second};
        }
        return true;
      }
      o.kind = SynOperand::Name;
      o.name = tk.text;
      if (peekIs("+")) {
        next();
        if (!integer(o.offset))
          return false;
      }
      return true;
    }
    return fail(tk, "unexpected '" + tk.text + "' in an operand");
  }
};

} // namespace

bool parsePtx(const std::string &text, SynModule &out, std::string &error) {
  std::vector<Token> toks;
  if (!tokenize(text, toks, error))
    return false;
  Parser p(std::move(toks), error);
  return p.module(out);
}

} // namespace attnc::emu
