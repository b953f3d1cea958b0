//===- Parser.cpp - Recursive-descent parser for .attn -------------------===//
//
// Grammar (docs/language.md has the full reference):
//   file     := (fn | variant)*
//   fn       := 'fn' IDENT '(' [fparam (',' fparam)*] ')' '->' type body
//   variant  := 'variant' IDENT '(' [vparam (',' vparam)*] ')'
//               '{' modifier* '}'
//   modifier := ('score_mod' | 'mask_mod') '(' IDENT (',' IDENT)* ')' body
//   body     := '=' expr | '{' ('let' IDENT '=' expr [';'])* 'return' expr
//               [';'] '}'
//   expr     := or ['?' expr ':' expr]
//   or := and ('||' and)*      and := cmp ('&&' cmp)*
//   cmp := add [relop add]     add := mul (('+'|'-') mul)*
//   mul := unary (('*'|'/'|'%') unary)*
//   unary := ('-'|'!') unary | postfix
//   postfix := primary ['[' expr (',' expr)* ']']
//   primary := INT | FLOAT | 'inf' | 'true' | 'false' | IDENT
//            | IDENT '(' [expr (',' expr)*] ')' | '(' expr ')'
//
// Errors are reported once per construct; the parser then resynchronizes at
// the next modifier or top-level declaration.
//
//===----------------------------------------------------------------------===//
#include "attnc/Frontend/Parser.h"

#include <algorithm>

namespace attnc {
namespace {

/// Trees deeper than this are rejected: every later stage walks them
/// recursively, and a 10^6-term `a+a+...` chain must not overflow a stack.
constexpr int kMaxExprDepth = 1000;

class Parser {
public:
  Parser(std::vector<Token> toks, DiagnosticEngine &diag)
      : toks_(std::move(toks)), diag_(diag) {}

  Module parseFile() {
    Module m;
    while (!at(Tok::Eof)) {
      if (at(Tok::KwFn)) {
        FnDecl fn;
        if (parseFn(fn))
          m.fns.push_back(std::move(fn));
        else
          syncTopLevel();
      } else if (at(Tok::KwVariant)) {
        Variant v;
        if (parseVariant(v))
          m.variants.push_back(std::move(v));
        else
          syncTopLevel();
      } else {
        if (!at(Tok::Error))
          error(cur().loc, std::string("expected 'fn' or 'variant' at top "
                                       "level, found ") + describe(cur()));
        advance();
        syncTopLevel();
      }
    }
    return m;
  }

private:
  // ---- token helpers ----
  const Token &cur() const { return toks_[pos_]; }
  const Token &peekTok(size_t n = 1) const {
    return toks_[std::min(pos_ + n, toks_.size() - 1)];
  }
  bool at(Tok k) const { return cur().kind == k; }
  void advance() {
    if (pos_ + 1 < toks_.size())
      ++pos_;
  }
  bool consume(Tok k) {
    if (!at(k))
      return false;
    advance();
    return true;
  }
  static std::string describe(const Token &t) {
    switch (t.kind) {
    case Tok::Ident: return "identifier '" + t.text + "'";
    case Tok::IntLit:
    case Tok::FloatLit: return "number '" + t.text + "'";
    default: return tokSpelling(t.kind);
    }
  }
  void error(SourceLoc loc, std::string msg) {
    // One error per broken construct; the lexer reported Error tokens.
    if (panic_)
      return;
    panic_ = true;
    diag_.error(loc, std::move(msg));
  }
  bool expect(Tok k, const char *context) {
    if (consume(k))
      return true;
    if (!at(Tok::Error))
      error(cur().loc, std::string("expected ") + tokSpelling(k) + " " +
                           context + ", found " + describe(cur()));
    else
      panic_ = true;
    return false;
  }
  bool expectIdent(std::string &name, SourceLoc &loc, const char *context) {
    if (!at(Tok::Ident)) {
      if (at(Tok::Error))
        panic_ = true;
      else if (isKeyword(cur().kind))
        error(cur().loc, std::string("expected ") + context + ", found " +
                             describe(cur()) + " (a reserved word)");
      else
        error(cur().loc, std::string("expected ") + context + ", found " +
                             describe(cur()));
      return false;
    }
    name = cur().text;
    loc = cur().loc;
    advance();
    return true;
  }
  static bool isKeyword(Tok k) {
    return k >= Tok::KwFn && k <= Tok::KwInf;
  }

  void syncTopLevel() {
    while (!at(Tok::Eof) && !at(Tok::KwFn) && !at(Tok::KwVariant))
      advance();
    panic_ = false;
  }
  /// Inside a variant: skip to the next modifier, the next top-level
  /// declaration, or the end of file.
  void syncModifier() {
    while (!at(Tok::Eof) && !at(Tok::KwFn) && !at(Tok::KwVariant) &&
           !at(Tok::KwScoreMod) && !at(Tok::KwMaskMod))
      advance();
    panic_ = false;
  }

  // ---- types ----
  bool parseScalarType(Type &t, const char *context) {
    std::string name;
    SourceLoc loc;
    if (!expectIdent(name, loc, context))
      return false;
    if (name == "f32")
      t = Type::F32;
    else if (name == "i32")
      t = Type::I32;
    else if (name == "bool")
      t = Type::Bool;
    else {
      error(loc, "unknown type '" + name + "'; expected f32, i32 or bool");
      return false;
    }
    return true;
  }

  // ---- declarations ----
  bool parseFn(FnDecl &fn) {
    fn.loc = cur().loc;
    advance(); // 'fn'
    if (!expectIdent(fn.name, fn.loc, "a function name"))
      return false;
    if (!expect(Tok::LParen, "after the function name"))
      return false;
    if (!at(Tok::RParen)) {
      do {
        FnParam p;
        if (!expectIdent(p.name, p.loc, "a parameter name") ||
            !expect(Tok::Colon, "after the parameter name") ||
            !parseScalarType(p.type, "a parameter type"))
          return false;
        fn.params.push_back(std::move(p));
      } while (consume(Tok::Comma));
    }
    if (!expect(Tok::RParen, "to close the parameter list") ||
        !expect(Tok::Arrow, "before the return type of a fn") ||
        !parseScalarType(fn.returnType, "a return type"))
      return false;
    return parseBody(fn.body);
  }

  bool parseVariantParam(VariantParam &p) {
    if (!expectIdent(p.name, p.loc, "a parameter name") ||
        !expect(Tok::Colon, "after the parameter name"))
      return false;
    std::string ty;
    SourceLoc tyLoc;
    if (!expectIdent(ty, tyLoc, "a type"))
      return false;
    if (at(Tok::LBracket)) {
      p.isTensor = true;
      static const std::pair<const char *, ElemType> elems[] = {
          {"f32", ElemType::F32}, {"f16", ElemType::F16},
          {"bf16", ElemType::BF16}, {"i32", ElemType::I32},
          {"i64", ElemType::I64}, {"bool", ElemType::Bool}};
      bool found = false;
      for (auto &[n, e] : elems)
        if (ty == n) {
          p.elem = e;
          found = true;
        }
      if (!found) {
        error(tyLoc, "unknown tensor element type '" + ty +
                         "'; expected f32, f16, bf16, i32, i64 or bool");
        return false;
      }
      advance(); // '['
      if (at(Tok::RBracket)) {
        // A rank-0 tensor (torch's 0-d tensor): one element, held as [1].
        Dim one;
        one.value = 1;
        one.loc = cur().loc;
        p.dims.push_back(std::move(one));
        p.rank0 = true;
        advance();
        return true;
      }
      do {
        Dim d;
        d.loc = cur().loc;
        if (at(Tok::IntLit)) {
          d.value = cur().intValue;
          if (d.value <= 0) {
            error(d.loc, "a tensor dimension must be positive");
            return false;
          }
          advance();
        } else if (!expectIdent(d.symbol, d.loc,
                                "a dimension (a symbol or an integer)")) {
          return false;
        }
        p.dims.push_back(std::move(d));
      } while (consume(Tok::Comma));
      return expect(Tok::RBracket, "to close the tensor's dimensions");
    }
    if (ty == "f32")
      p.scalarType = Type::F32;
    else if (ty == "i32")
      p.scalarType = Type::I32;
    else if (ty == "bool")
      p.scalarType = Type::Bool;
    else if (ty == "f16" || ty == "bf16" || ty == "i64") {
      error(tyLoc, "scalar parameters are f32, i32 or bool; '" + ty +
                       "' is only allowed as a tensor element type");
      return false;
    } else {
      error(tyLoc, "unknown type '" + ty + "'; expected f32, i32, bool or a "
                                           "tensor such as f32[H]");
      return false;
    }
    return true;
  }

  bool parseVariant(Variant &v) {
    v.loc = cur().loc;
    advance(); // 'variant'
    if (!expectIdent(v.name, v.loc, "a variant name") ||
        !expect(Tok::LParen, "after the variant name"))
      return false;
    if (!at(Tok::RParen)) {
      do {
        VariantParam p;
        if (!parseVariantParam(p))
          return false;
        v.params.push_back(std::move(p));
      } while (consume(Tok::Comma));
    }
    if (!expect(Tok::RParen, "to close the parameter list") ||
        !expect(Tok::LBrace, "to open the variant's body"))
      return false;
    bool recovering = false; // a modifier failed and we skipped ahead
    while (!at(Tok::RBrace)) {
      if (at(Tok::KwScoreMod) || at(Tok::KwMaskMod)) {
        recovering = false;
        bool isScore = at(Tok::KwScoreMod);
        Modifier &mod = isScore ? v.scoreMod : v.maskMod;
        SourceLoc loc = cur().loc;
        Modifier parsed;
        if (parseModifier(parsed)) {
          if (mod.present)
            diag_.error(loc, std::string("duplicate ") +
                                 (isScore ? "score_mod" : "mask_mod") +
                                 " in variant '" + v.name + "'");
          else
            mod = std::move(parsed);
        } else {
          syncModifier();
          recovering = true;
        }
        continue;
      }
      if (at(Tok::Eof) || at(Tok::KwFn) || at(Tok::KwVariant)) {
        // After recovery the variant's '}' was most likely skipped with the
        // broken modifier: do not report it a second time.
        if (!panic_ && !recovering)
          diag_.error(cur().loc, "expected '}' to close variant '" + v.name +
                                     "', found " + describe(cur()));
        panic_ = false;
        return true; // keep what was parsed
      }
      error(cur().loc, "expected 'score_mod', 'mask_mod' or '}' in variant '" +
                           v.name + "', found " + describe(cur()));
      advance();
      syncModifier();
      recovering = true;
    }
    advance(); // '}'
    return true;
  }

  bool parseModifier(Modifier &mod) {
    bool isScore = at(Tok::KwScoreMod);
    mod.present = true;
    mod.loc = cur().loc;
    advance();
    if (!expect(Tok::LParen, isScore ? "after 'score_mod'" : "after 'mask_mod'"))
      return false;
    if (!at(Tok::RParen)) {
      do {
        NamedLoc n;
        if (!expectIdent(n.name, n.loc, "a parameter name"))
          return false;
        mod.params.push_back(std::move(n));
      } while (consume(Tok::Comma));
    }
    if (!expect(Tok::RParen, "to close the parameter list"))
      return false;
    return parseBody(mod.body);
  }

  bool parseBody(Body &body) {
    body.loc = cur().loc;
    if (consume(Tok::Assign)) {
      body.result = parseExpr();
      return body.result != nullptr;
    }
    if (!at(Tok::LBrace)) {
      if (!at(Tok::Error))
        error(cur().loc, "expected '=' or '{' to start a body, found " +
                             describe(cur()));
      panic_ = true;
      return false;
    }
    advance();
    while (at(Tok::KwLet)) {
      advance();
      LetStmt let;
      if (!expectIdent(let.name, let.loc, "a name after 'let'") ||
          !expect(Tok::Assign, "after the name in 'let'"))
        return false;
      let.value = parseExpr();
      if (!let.value)
        return false;
      consume(Tok::Semi);
      body.lets.push_back(std::move(let));
    }
    if (at(Tok::RBrace)) {
      diag_.error(cur().loc, "missing 'return' at the end of a block body");
      advance();
      return true; // the body is otherwise well-formed; Sema skips it
    }
    if (!consume(Tok::KwReturn)) {
      if (!at(Tok::Error))
        error(cur().loc, "expected 'let' or 'return' in a block body, found " +
                             describe(cur()));
      panic_ = true;
      return false;
    }
    body.result = parseExpr();
    if (!body.result)
      return false;
    consume(Tok::Semi);
    if (at(Tok::KwLet)) {
      error(cur().loc, "'return' must be the last statement of a block body");
      return false;
    }
    return expect(Tok::RBrace, "to close the block body");
  }

  // ---- expressions ----
  ExprPtr make(Expr::Kind k, SourceLoc loc, std::vector<ExprPtr> ops = {}) {
    int depth = 0;
    for (auto &o : ops)
      depth = std::max(depth, depthOf(o.get()));
    if (depth + 1 > kMaxExprDepth) {
      error(loc, "expression is too deeply nested (more than " +
                     std::to_string(kMaxExprDepth) + " levels)");
      return nullptr;
    }
    auto e = std::make_unique<Expr>(k, loc);
    // Infix forms start at their left operand.
    if ((k == Expr::Kind::Binary || k == Expr::Kind::Ternary) && !ops.empty())
      e->begin = ops[0]->begin;
    e->operands = std::move(ops);
    e->depth = depth + 1;
    return e;
  }
  static int depthOf(const Expr *e) { return e->depth; }

  struct NestGuard {
    Parser &p;
    bool ok;
    NestGuard(Parser &p, SourceLoc loc) : p(p) {
      ok = ++p.nesting_ <= kMaxNesting;
      if (!ok)
        p.error(loc, "expression is too deeply nested (more than " +
                         std::to_string(kMaxNesting) + " levels)");
    }
    ~NestGuard() { --p.nesting_; }
  };

  ExprPtr parseExpr() {
    NestGuard g(*this, cur().loc);
    if (!g.ok)
      return nullptr;
    ExprPtr c = parseBinary(0);
    if (!c || !at(Tok::Question))
      return c;
    SourceLoc loc = cur().loc;
    advance();
    ExprPtr a = parseExpr();
    if (!a || !expect(Tok::Colon, "in a conditional expression 'c ? a : b'"))
      return nullptr;
    ExprPtr b = parseExpr();
    if (!b)
      return nullptr;
    std::vector<ExprPtr> ops;
    ops.push_back(std::move(c));
    ops.push_back(std::move(a));
    ops.push_back(std::move(b));
    return make(Expr::Kind::Ternary, loc, std::move(ops));
  }

  /// Precedence levels, loosest first: || && cmp | ^ & shifts +- */%;
  /// the bitwise operators bind tighter than comparisons, as in Python
  /// (`q & 1 == 0` is `(q & 1) == 0`).
  static int precedence(Tok k) {
    switch (k) {
    case Tok::OrOr: return 1;
    case Tok::AndAnd: return 2;
    case Tok::Lt: case Tok::Le: case Tok::Gt: case Tok::Ge:
    case Tok::EqEq: case Tok::NotEq: return 3;
    case Tok::Pipe: return 4;
    case Tok::Caret: return 5;
    case Tok::Amp: return 6;
    case Tok::Shl: case Tok::Shr: return 7;
    case Tok::Plus: case Tok::Minus: return 8;
    case Tok::Star: case Tok::Slash: case Tok::Percent: return 9;
    default: return 0;
    }
  }

  ExprPtr parseBinary(int minPrec) {
    ExprPtr lhs = parseUnary();
    while (lhs) {
      Tok op = cur().kind;
      int prec = precedence(op);
      if (prec == 0 || prec <= minPrec)
        return lhs;
      SourceLoc loc = cur().loc;
      advance();
      ExprPtr rhs = parseBinary(prec);
      if (!rhs)
        return nullptr;
      // Comparisons do not chain: `a < b < c` is almost always a mistake.
      if (prec == 3 && precedence(cur().kind) == 3) {
        bool bitwise = rhs->kind == Expr::Kind::Binary &&
                       (rhs->op == Tok::Amp || rhs->op == Tok::Pipe ||
                        rhs->op == Tok::Caret);
        error(cur().loc,
              std::string("comparisons cannot be chained; use '&&' to combine "
                          "them") +
                  (bitwise ? std::string(", or parenthesize each comparison "
                                         "around ") +
                                 tokSpelling(rhs->op) +
                                 " (it binds tighter than comparisons, as in "
                                 "Python)"
                           : ""));
        return nullptr;
      }
      std::vector<ExprPtr> ops;
      ops.push_back(std::move(lhs));
      ops.push_back(std::move(rhs));
      lhs = make(Expr::Kind::Binary, loc, std::move(ops));
      if (lhs)
        lhs->op = op;
    }
    return lhs;
  }

  ExprPtr parseUnary() {
    if (at(Tok::Minus) || at(Tok::Bang) || at(Tok::Tilde)) {
      NestGuard g(*this, cur().loc);
      if (!g.ok)
        return nullptr;
      Tok op = cur().kind;
      SourceLoc loc = cur().loc;
      advance();
      ExprPtr operand = parseUnary();
      if (!operand)
        return nullptr;
      // -2147483648 is one literal: its digits alone do not fit in i32.
      if (op == Tok::Minus && operand->kind == Expr::Kind::IntLit &&
          operand->intValue == 2147483648LL) {
        operand->intValue = -2147483648LL;
        operand->loc = loc;
        return operand;
      }
      std::vector<ExprPtr> ops;
      ops.push_back(std::move(operand));
      ExprPtr e = make(Expr::Kind::Unary, loc, std::move(ops));
      if (e)
        e->op = op;
      return e;
    }
    return parsePostfix();
  }

  bool parseArgs(std::vector<ExprPtr> &args, Tok close, const char *what) {
    if (!at(close)) {
      do {
        ExprPtr a = parseExpr();
        if (!a)
          return false;
        args.push_back(std::move(a));
      } while (consume(Tok::Comma));
    }
    return expect(close, what);
  }

  ExprPtr parsePostfix() {
    ExprPtr e = parsePrimary();
    if (!e || !at(Tok::LBracket))
      return e;
    if (e->kind != Expr::Kind::Name) {
      error(cur().loc, "only a captured tensor can be indexed");
      return nullptr;
    }
    // t[i][j] is t[i, j] (torch code indexes one dimension at a time).
    std::vector<ExprPtr> idx;
    while (at(Tok::LBracket)) {
      advance();
      if (at(Tok::RBracket)) {
        error(cur().loc, "an index expression needs at least one index");
        return nullptr;
      }
      if (!parseArgs(idx, Tok::RBracket, "to close the index list"))
        return nullptr;
    }
    ExprPtr g = make(Expr::Kind::Index, e->loc, std::move(idx));
    if (g)
      g->name = e->name;
    return g;
  }

  /// The rest of `sum(i < N: term)` after `i < N`, at the colon.
  ExprPtr parseSum(SourceLoc loc, ExprPtr head) {
    if (head->kind != Expr::Kind::Binary || head->op != Tok::Lt ||
        head->operands[0]->kind != Expr::Kind::Name) {
      error(head->begin, "a sum is written sum(i < N: term), with a new index "
                         "name i and a count N");
      return nullptr;
    }
    advance(); // ':'
    ExprPtr term = parseExpr();
    if (!term || !expect(Tok::RParen, "to close the sum"))
      return nullptr;
    std::vector<ExprPtr> ops;
    ops.push_back(std::move(head->operands[1]));
    ops.push_back(std::move(term));
    ExprPtr e = make(Expr::Kind::Sum, loc, std::move(ops));
    if (e) {
      e->name = head->operands[0]->name;
      e->varLoc = head->operands[0]->loc;
    }
    return e;
  }

  ExprPtr parsePrimary() {
    const Token &t = cur();
    SourceLoc loc = t.loc;
    switch (t.kind) {
    case Tok::IntLit: {
      ExprPtr e = make(Expr::Kind::IntLit, loc);
      e->intValue = t.intValue;
      advance();
      return e;
    }
    case Tok::FloatLit: {
      ExprPtr e = make(Expr::Kind::FloatLit, loc);
      e->floatValue = t.floatValue;
      advance();
      return e;
    }
    case Tok::KwTrue:
    case Tok::KwFalse: {
      ExprPtr e = make(Expr::Kind::BoolLit, loc);
      e->boolValue = t.kind == Tok::KwTrue;
      advance();
      return e;
    }
    case Tok::KwInf:
      advance();
      return make(Expr::Kind::InfLit, loc);
    case Tok::Ident: {
      std::string name = t.text;
      advance();
      if (at(Tok::LParen)) {
        advance();
        std::vector<ExprPtr> args;
        if (name == "sum" && !at(Tok::RParen)) {
          // `sum(i < N: term)` is a reduction; any other `sum(...)` a call.
          ExprPtr first = parseExpr();
          if (!first)
            return nullptr;
          if (at(Tok::Colon))
            return parseSum(loc, std::move(first));
          args.push_back(std::move(first));
          if (consume(Tok::Comma)) {
            if (!parseArgs(args, Tok::RParen, "to close the call's arguments"))
              return nullptr;
          } else if (!expect(Tok::RParen, "to close the call's arguments")) {
            return nullptr;
          }
        } else if (!parseArgs(args, Tok::RParen,
                              "to close the call's arguments")) {
          return nullptr;
        }
        ExprPtr e = make(Expr::Kind::Call, loc, std::move(args));
        if (e)
          e->name = name;
        return e;
      }
      ExprPtr e = make(Expr::Kind::Name, loc);
      e->name = name;
      return e;
    }
    case Tok::LParen: {
      NestGuard g(*this, loc);
      if (!g.ok)
        return nullptr;
      advance();
      ExprPtr e = parseExpr();
      if (!e || !expect(Tok::RParen, "to close the parenthesis"))
        return nullptr;
      e->begin = loc;
      return e;
    }
    case Tok::Error:
      panic_ = true;
      return nullptr;
    default:
      error(loc, "expected an expression, found " + describe(t));
      return nullptr;
    }
  }

  std::vector<Token> toks_;
  DiagnosticEngine &diag_;
  size_t pos_ = 0;
  bool panic_ = false;
  int nesting_ = 0;
};

} // namespace

Module parse(const SourceFile &file, DiagnosticEngine &diag) {
  return Parser(lex(file, diag), diag).parseFile();
}

} // namespace attnc
