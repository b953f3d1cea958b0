//===- Sema.cpp - Name resolution and type checking for .attn -----------===//
//
// Types: i32, f32 and bool. Arithmetic mixing i32 and f32 promotes to f32;
// bool never converts implicitly. Every expression gets a type; a subtree
// that failed gets Type::Error and is not reported again by its parents.
//
//===----------------------------------------------------------------------===//
#include "attnc/Frontend/Sema.h"
#include "attnc/Frontend/Parser.h"

#include <algorithm>
#include <set>

namespace attnc {
namespace {

bool isNumeric(Type t) { return t == Type::I32 || t == Type::F32; }

/// Edit distance with adjacent transpositions (optimal string alignment),
/// for "did you mean" hints: `tahn` is one edit from `tanh`.
size_t editDistance(const std::string &a, const std::string &b) {
  std::vector<std::vector<size_t>> d(a.size() + 1,
                                     std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i)
    d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j)
    d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i)
    for (size_t j = 1; j <= b.size(); ++j) {
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1,
                          d[i - 1][j - 1] + (a[i - 1] != b[j - 1])});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  return d[a.size()][b.size()];
}

/// The closest candidate (ties: the one of the name's length, then the
/// first), if it is a close misspelling.
std::string suggest(const std::string &name,
                    const std::vector<std::string> &candidates) {
  std::string best;
  size_t bestDist = 3, bestLen = 0; // only close misspellings
  for (const std::string &c : candidates) {
    size_t d = editDistance(name, c);
    size_t len = c.size() > name.size() ? c.size() - name.size()
                                        : name.size() - c.size();
    if ((d < bestDist || (d == bestDist && !best.empty() && len < bestLen)) &&
        d < std::max<size_t>(name.size(), 2)) {
      bestDist = d;
      bestLen = len;
      best = c;
    }
  }
  return best.empty() ? "" : "; did you mean '" + best + "'?";
}

/// The problem sizes every variant's modifiers see (then its free dims).
const std::vector<std::string> kProblemSizes = {"B", "H", "HKV", "Q", "KV"};

struct Binding {
  std::string name;
  RefKind kind;
  int index;
  Type type;
};

class Checker {
public:
  Checker(Module &m, DiagnosticEngine &diag) : m_(m), diag_(diag) {}

  bool run() {
    size_t before = diag_.errorCount();
    checkFns();
    checkVariants();
    checkInlining();
    return diag_.errorCount() == before;
  }

private:
  // ---- scopes ----
  const Binding *lookup(const std::string &name) const {
    for (auto it = scope_.rbegin(); it != scope_.rend(); ++it)
      if (it->name == name)
        return &*it;
    return nullptr;
  }
  std::vector<std::string> visibleNames() const {
    std::vector<std::string> names;
    for (const Binding &b : scope_)
      names.push_back(b.name);
    return names;
  }
  /// Adds a binding unless the name is taken in this scope or is a builtin.
  void declare(const std::string &name, SourceLoc loc, RefKind kind, int index,
               Type type, const char *what) {
    // A problem size may be shadowed (by a let or a modifier parameter).
    if (const Binding *prev = lookup(name); prev && prev->kind != RefKind::Size) {
      static const char *kinds[] = {"", "a modifier parameter", "a let binding",
                                    "a parameter", "a scalar parameter",
                                    "a tensor parameter", "a problem size",
                                    "a sum's index"};
      diag_.error(loc, std::string("redefinition of ") + what + " '" + name +
                           "' (already " +
                           kinds[static_cast<int>(prev->kind)] + ")");
    }
    scope_.push_back({name, kind, index, type});
  }

  // ---- declarations ----
  void checkFns() {
    std::set<std::string> seen;
    for (size_t i = 0; i < m_.fns.size(); ++i) {
      FnDecl &fn = m_.fns[i];
      if (lookupBuiltin(fn.name) != Builtin::None)
        diag_.error(fn.loc, "'" + fn.name + "' is a builtin function and "
                                           "cannot be redefined");
      else if (!seen.insert(fn.name).second)
        diag_.error(fn.loc, "redefinition of fn '" + fn.name + "'");
    }
    for (FnDecl &fn : m_.fns) {
      scope_.clear();
      for (size_t i = 0; i < fn.params.size(); ++i)
        declare(fn.params[i].name, fn.params[i].loc, RefKind::FnParam,
                static_cast<int>(i), fn.params[i].type, "parameter");
      Type t = checkBody(fn.body);
      if (t != Type::Error && fn.body.result &&
          !convertible(t, fn.returnType))
        diag_.error(fn.body.result->begin,
                    "fn '" + fn.name + "' is declared to return " +
                        typeName(fn.returnType) + " but its body is " +
                        typeName(t));
    }
  }

  void checkVariants() {
    std::set<std::string> seen;
    for (Variant &v : m_.variants) {
      variant_ = &v;
      if (!seen.insert(v.name).second)
        diag_.error(v.loc, "redefinition of variant '" + v.name + "'");
      scope_.clear();
      for (size_t i = 0; i < v.params.size(); ++i) {
        VariantParam &p = v.params[i];
        if (p.isTensor)
          declare(p.name, p.loc, RefKind::Tensor, static_cast<int>(i),
                  computeType(p.elem), "parameter");
        else
          declare(p.name, p.loc, RefKind::Scalar, static_cast<int>(i),
                  p.scalarType, "parameter");
      }
      // The problem sizes and the free dimensions of the captures' shapes,
      // as i32 values (a parameter of the same name takes precedence).
      for (const std::string &d : sizeNames(v))
        if (!lookup(d))
          scope_.push_back({d, RefKind::Size, -1, Type::I32});
      size_t base = scope_.size();
      checkModifier(v.scoreMod, true);
      scope_.resize(base);
      checkModifier(v.maskMod, false);
      scope_.resize(base);
    }
    variant_ = nullptr;
  }

  /// B, H, HKV, Q, KV, then each free dimension once, in order of use.
  static std::vector<std::string> sizeNames(const Variant &v) {
    std::vector<std::string> names = kProblemSizes;
    for (const VariantParam &p : v.params)
      for (const Dim &d : p.dims)
        if (!d.symbol.empty() &&
            std::find(names.begin(), names.end(), d.symbol) == names.end())
          names.push_back(d.symbol);
    return names;
  }

  void checkModifier(Modifier &mod, bool isScore) {
    if (!mod.present)
      return;
    const char *kw = isScore ? "score_mod" : "mask_mod";
    size_t want = isScore ? 5 : 4;
    if (mod.params.size() != want) {
      diag_.error(mod.loc, std::string(kw) + " takes " +
                               std::to_string(want) + " parameters (" +
                               (isScore ? "score, b, h, q, kv" : "b, h, q, kv") +
                               "), got " + std::to_string(mod.params.size()));
      return;
    }
    for (size_t i = 0; i < want; ++i) {
      Type t = (isScore && i == 0) ? Type::F32 : Type::I32;
      declare(mod.params[i].name, mod.params[i].loc, RefKind::ModParam,
              static_cast<int>(i), t, "parameter");
    }
    Type t = checkBody(mod.body);
    if (t == Type::Error || !mod.body.result)
      return;
    if (isScore && !convertible(t, Type::F32))
      diag_.error(mod.body.result->begin,
                  std::string("score_mod must yield f32, but this is ") +
                      typeName(t));
    if (!isScore && t != Type::Bool)
      diag_.error(mod.body.result->begin,
                  std::string("mask_mod must yield bool, but this is ") +
                      typeName(t) + (isNumeric(t) ? " (compare it, e.g. "
                                                    "'x != 0')"
                                                  : ""));
  }

  Type checkBody(Body &body) {
    size_t base = scope_.size();
    for (size_t i = 0; i < body.lets.size(); ++i) {
      LetStmt &l = body.lets[i];
      Type t = check(*l.value);
      declare(l.name, l.loc, RefKind::Let, static_cast<int>(i), t,
              "let binding");
    }
    Type t = body.result ? check(*body.result) : Type::Error;
    scope_.resize(base);
    return t;
  }

  static bool convertible(Type from, Type to) {
    return from == to || (from == Type::I32 && to == Type::F32);
  }

  // ---- expressions ----
  Type check(Expr &e) {
    e.type = compute(e);
    return e.type;
  }

  Type compute(Expr &e) {
    switch (e.kind) {
    case Expr::Kind::IntLit:
      if (e.intValue > 2147483647LL) {
        diag_.error(e.loc, "integer literal 2147483648 does not fit in i32 "
                           "(it may only be negated: -2147483648)");
        return Type::Error;
      }
      return Type::I32;
    case Expr::Kind::FloatLit:
    case Expr::Kind::InfLit: return Type::F32;
    case Expr::Kind::BoolLit: return Type::Bool;
    case Expr::Kind::Name: return checkName(e);
    case Expr::Kind::Unary: return checkUnary(e);
    case Expr::Kind::Binary: return checkBinary(e);
    case Expr::Kind::Ternary: return checkTernary(e);
    case Expr::Kind::Call: return checkCall(e);
    case Expr::Kind::Index: return checkIndex(e);
    case Expr::Kind::Sum: return checkSum(e);
    }
    return Type::Error;
  }

  Type checkName(Expr &e) {
    const Binding *b = lookup(e.name);
    if (!b) {
      if (!variant_ && std::find(kProblemSizes.begin(), kProblemSizes.end(),
                                 e.name) != kProblemSizes.end())
        diag_.error(e.loc, "the problem size '" + e.name +
                               "' is visible in a variant's modifiers only; "
                               "pass it to the fn as an argument");
      else if (lookupBuiltin(e.name) != Builtin::None || findFn(e.name) >= 0)
        diag_.error(e.loc, "'" + e.name + "' is a function; call it as " +
                               e.name + "(...)");
      else
        diag_.error(e.loc, "unknown name '" + e.name + "'" +
                               suggest(e.name, visibleNames()));
      return Type::Error;
    }
    e.ref = b->kind;
    e.refIndex = b->index;
    if (b->kind == RefKind::Tensor) {
      if (variant_ && variant_->params[b->index].rank0)
        return b->type; // a rank-0 tensor reads as its one element
      diag_.error(e.loc, "'" + e.name + "' is a tensor; read an element with " +
                             e.name + "[...]");
      return Type::Error;
    }
    return b->type;
  }

  Type checkUnary(Expr &e) {
    Type t = check(*e.operands[0]);
    if (t == Type::Error)
      return t;
    if (e.op == Tok::Tilde) {
      // ~ is bitwise on i32 and logical on bool (torch's ~mask).
      if (t != Type::I32 && t != Type::Bool) {
        diag_.error(e.loc, std::string("operator '~' needs an i32 or a bool, "
                                       "got ") +
                               typeName(t));
        return Type::Error;
      }
      return t;
    }
    if (e.op == Tok::Bang) {
      if (t != Type::Bool) {
        diag_.error(e.loc, std::string("operator '!' needs a bool, got ") +
                               typeName(t));
        return Type::Error;
      }
      return t;
    }
    if (!isNumeric(t)) {
      diag_.error(e.loc, std::string("operator '-' needs a number, got ") +
                             typeName(t));
      return Type::Error;
    }
    return t;
  }

  Type checkBinary(Expr &e) {
    Type l = check(*e.operands[0]);
    Type r = check(*e.operands[1]);
    if (l == Type::Error || r == Type::Error)
      return Type::Error;
    std::string op = tokSpelling(e.op);
    switch (e.op) {
    case Tok::AndAnd:
    case Tok::OrOr:
      if (l != Type::Bool || r != Type::Bool) {
        diag_.error(e.loc, "operator " + op + " needs bool operands, got " +
                               typeName(l) + " and " + typeName(r));
        return Type::Error;
      }
      return Type::Bool;
    case Tok::EqEq:
    case Tok::NotEq:
      if (l == Type::Bool && r == Type::Bool)
        return Type::Bool;
      [[fallthrough]];
    case Tok::Lt:
    case Tok::Le:
    case Tok::Gt:
    case Tok::Ge:
      if (!isNumeric(l) || !isNumeric(r)) {
        diag_.error(e.loc, "cannot compare " + std::string(typeName(l)) +
                               " with " + typeName(r) + " using " + op);
        return Type::Error;
      }
      return Type::Bool;
    case Tok::Amp:
    case Tok::Pipe:
    case Tok::Caret:
      // Bitwise on i32, logical on bool (torch's mask & mask); never mixed.
      if ((l == Type::I32 && r == Type::I32) ||
          (l == Type::Bool && r == Type::Bool))
        return l;
      diag_.error(e.loc, "operator " + op + " needs two i32 or two bool "
                             "operands, got " + typeName(l) + " and " +
                             typeName(r) +
                             ((l == Type::Bool) != (r == Type::Bool)
                                  ? " (as in Python, it binds tighter than "
                                    "comparisons: parenthesize them, "
                                    "(a < b) " + op.substr(1, op.size() - 2) +
                                    " (c < d))"
                                  : ""));
      return Type::Error;
    case Tok::Shl:
    case Tok::Shr:
      if (l == Type::I32 && r == Type::I32)
        return l;
      diag_.error(e.loc, "operator " + op + " needs i32 operands, got " +
                             typeName(l) + " and " + typeName(r));
      return Type::Error;
    default: // + - * / %
      if (!isNumeric(l) || !isNumeric(r)) {
        diag_.error(e.loc, "operator " + op + " needs numbers, got " +
                               typeName(l) + " and " + typeName(r));
        return Type::Error;
      }
      return (l == Type::I32 && r == Type::I32) ? Type::I32 : Type::F32;
    }
  }

  Type checkTernary(Expr &e) {
    Type c = check(*e.operands[0]);
    Type a = check(*e.operands[1]);
    Type b = check(*e.operands[2]);
    if (c != Type::Error && c != Type::Bool) {
      diag_.error(e.operands[0]->begin,
                  std::string("the condition of '?:' must be bool, got ") +
                      typeName(c));
      return Type::Error;
    }
    if (c == Type::Error || a == Type::Error || b == Type::Error)
      return Type::Error;
    if (a == b)
      return a;
    if (isNumeric(a) && isNumeric(b))
      return Type::F32;
    diag_.error(e.loc, std::string("the branches of '?:' have incompatible "
                                   "types ") +
                           typeName(a) + " and " + typeName(b));
    return Type::Error;
  }

  int findFn(const std::string &name) const {
    for (size_t i = 0; i < m_.fns.size(); ++i)
      if (m_.fns[i].name == name)
        return static_cast<int>(i);
    return -1;
  }

  Type checkCall(Expr &e) {
    std::vector<Type> args;
    bool bad = false;
    for (ExprPtr &a : e.operands) {
      args.push_back(check(*a));
      bad |= args.back() == Type::Error;
    }
    Builtin b = lookupBuiltin(e.name);
    if (b != Builtin::None) {
      e.builtin = b;
      return bad ? Type::Error : checkBuiltin(e, b, args);
    }
    int fi = findFn(e.name);
    if (fi < 0) {
      if (const Binding *bind = lookup(e.name))
        diag_.error(e.loc, "'" + e.name + "' is " +
                               (bind->kind == RefKind::Tensor
                                    ? "a tensor; index it with " + e.name +
                                          "[...], not " + e.name + "(...)"
                                    : std::string("not a function")));
      else {
        std::vector<std::string> names;
        for (const FnDecl &f : m_.fns)
          names.push_back(f.name);
        for (const std::string &n : builtinNames())
          names.push_back(n);
        diag_.error(e.loc, "unknown function '" + e.name + "'" +
                               suggest(e.name, names));
      }
      return Type::Error;
    }
    e.fnIndex = fi;
    const FnDecl &fn = m_.fns[fi];
    if (args.size() != fn.params.size()) {
      diag_.error(e.loc, "fn '" + fn.name + "' takes " +
                             std::to_string(fn.params.size()) +
                             " argument(s), got " +
                             std::to_string(args.size()));
      return Type::Error;
    }
    if (bad)
      return Type::Error;
    for (size_t i = 0; i < args.size(); ++i)
      if (!convertible(args[i], fn.params[i].type)) {
 diag_.error(e.operands[i]->begin,
                    "argument " + std::to_string(i + 1) + " of '" + fn.name +
                        "' ('" + fn.params[i].name + "') must be " +
                        typeName(fn.params[i].type) + ", got " +
                        typeName(args[i]));
        return Type::Error;
      }
    return fn.returnType;
  }

  Type checkBuiltin(Expr &e, Builtin b, const std::vector<Type> &args) {
    size_t arity = 1;
    if (b == Builtin::Min || b == Builtin::Max || b == Builtin::Pow ||
        b == Builtin::FloorDiv || b == Builtin::FloorMod)
      arity = 2;
    else if (b == Builtin::Clamp || b == Builtin::Where)
      arity = 3;
    if (args.size() != arity) {
      diag_.error(e.loc, "'" + e.name + "' takes " + std::to_string(arity) +
                             " argument(s), got " +
                             std::to_string(args.size()));
      return Type::Error;
    }
    if (b == Builtin::CastF32 || b == Builtin::CastI32)
      return b == Builtin::CastF32 ? Type::F32 : Type::I32;
    if (b == Builtin::Where) {
      // where(c, a, b): c ? a : b.
      if (args[0] != Type::Bool) {
        diag_.error(e.operands[0]->begin,
                    std::string("the condition of 'where' must be bool, got ") +
                        typeName(args[0]));
        return Type::Error;
      }
      if (args[1] == args[2])
        return args[1];
      if (isNumeric(args[1]) && isNumeric(args[2]))
        return Type::F32;
      diag_.error(e.loc, std::string("the branches of 'where' have "
                                     "incompatible types ") +
                             typeName(args[1]) + " and " + typeName(args[2]));
      return Type::Error;
    }
    for (size_t i = 0; i < args.size(); ++i)
      if (!isNumeric(args[i])) {
        diag_.error(e.operands[i]->begin,
                    "'" + e.name + "' needs a number, got " +
                        typeName(args[i]) +
                        (args[i] == Type::Bool ? " (convert it with f32(...) "
                                                 "or i32(...))"
                                               : ""));
        return Type::Error;
      }
    switch (b) {
    case Builtin::Abs:
    case Builtin::Sign: return args[0];
    case Builtin::IsNan:
    case Builtin::IsInf: return Type::Bool;
    case Builtin::FloorDiv:
    case Builtin::FloorMod:
    case Builtin::Min:
    case Builtin::Max:
    case Builtin::Clamp:
      return std::all_of(args.begin(), args.end(),
                         [](Type t) { return t == Type::I32; })
                 ? Type::I32
                 : Type::F32;
    default: return Type::F32; // exp, log, tanh, ...: float functions
    }
  }

  /// `sum(i < N: term)`: N is i32, the term f32 or i32 (the sum's type);
  /// `i` is an i32 visible in the term only.
  Type checkSum(Expr &e) {
    Type n = check(*e.operands[0]);
    size_t base = scope_.size();
    declare(e.name, e.varLoc, RefKind::SumIndex, -1, Type::I32, "sum index");
    Type t = check(*e.operands[1]);
    scope_.resize(base);
    if (n == Type::Error || t == Type::Error)
      return Type::Error;
    if (n != Type::I32) {
      diag_.error(e.operands[0]->begin,
                  std::string("the count of a sum must be i32, got ") +
                      typeName(n) + (n == Type::F32 ? " (convert it with i32(...))" : ""));
      return Type::Error;
    }
    if (t == Type::Bool) {
      diag_.error(e.operands[1]->begin,
                  "the term of a sum must be f32 or i32, got bool (count with "
                  "i32(...))");
      return Type::Error;
    }
    return t;
  }

  Type checkIndex(Expr &e) {
    std::vector<Type> idx;
    for (ExprPtr &a : e.operands)
      idx.push_back(check(*a));
    const Binding *b = lookup(e.name);
    if (!b) {
      diag_.error(e.loc, "unknown tensor '" + e.name + "'" +
                             suggest(e.name, visibleNames()));
      return Type::Error;
    }
    if (b->kind != RefKind::Tensor) {
      diag_.error(e.loc, "'" + e.name + "' is not a tensor and cannot be "
                                        "indexed");
      return Type::Error;
    }
    e.ref = RefKind::Tensor;
    e.refIndex = b->index;
    // Tensors are only ever the current variant's parameters.
    const VariantParam *decl =
        variant_ ? &variant_->params[b->index] : nullptr;
    size_t rank = decl ? decl->dims.size() : 0;
    if (decl && decl->rank0) {
      diag_.error(e.loc, "'" + e.name + "' is a rank-0 tensor; read it as " +
                             e.name + ", without an index");
      return Type::Error;
    }
    if (decl && idx.size() != rank) {
      diag_.error(e.loc, "'" + e.name + "' has " + std::to_string(rank) +
                             " dimension(s) but is indexed with " +
                             std::to_string(idx.size()));
      return Type::Error;
    }
    for (size_t i = 0; i < idx.size(); ++i) {
      if (idx[i] == Type::Error)
        return Type::Error;
      if (idx[i] != Type::I32) {
        diag_.error(e.operands[i]->begin,
                    "index " + std::to_string(i + 1) + " of '" + e.name +
                        "' must be i32, got " + typeName(idx[i]) +
                        (idx[i] == Type::F32 ? " (convert it with i32(...))"
                                             : ""));
        return Type::Error;
      }
    }
    return b->type;
  }

  // ---- inlining bounds and recursion ----
  // fn helpers are inlined at every call. Costs are computed bottom-up over
  // the call graph without recursing through it, so a long chain of helpers
  // cannot exhaust the stack; fns left over are on (or call into) a cycle.
  struct Cost {
    int64_t nodes = 0;
    int64_t depth = 0;
  };
  static int64_t sat(int64_t v) { return std::min<int64_t>(v, INT64_MAX / 4); }

  /// Cost of an expression given the costs of the fns it calls; false if a
  /// callee's cost is not known yet.
  bool exprCost(const Expr &e, Cost &out) {
    Cost inner{0, 0};
    for (const ExprPtr &o : e.operands) {
      Cost oc;
      if (!exprCost(*o, oc))
        return false;
      inner.nodes = sat(inner.nodes + oc.nodes);
      inner.depth = std::max(inner.depth, oc.depth);
    }
    if (e.kind == Expr::Kind::Call && e.fnIndex >= 0) {
      if (!done_[e.fnIndex])
        return false;
      inner.nodes = sat(inner.nodes + costs_[e.fnIndex].nodes);
      inner.depth = std::max(inner.depth, costs_[e.fnIndex].depth);
    }
    out.nodes = sat(1 + inner.nodes);
    out.depth = sat(1 + inner.depth);
    return true;
  }

  bool bodyCost(const Body &b, Cost &out) {
    out = {0, 0};
    for (const LetStmt &l : b.lets) {
      Cost lc;
      if (!exprCost(*l.value, lc))
        return false;
      out.nodes = sat(out.nodes + lc.nodes);
      out.depth = std::max(out.depth, lc.depth);
    }
    if (b.result) {
      Cost rc;
      if (!exprCost(*b.result, rc))
        return false;
      out.nodes = sat(out.nodes + rc.nodes);
      out.depth = std::max(out.depth, rc.depth);
    }
    return true;
  }

  static void collectCalls(const Expr &e, std::vector<int> &calls) {
    if (e.kind == Expr::Kind::Call && e.fnIndex >= 0)
      calls.push_back(e.fnIndex);
    for (const ExprPtr &o : e.operands)
      collectCalls(*o, calls);
  }

  void checkInlining() {
    size_t n = m_.fns.size();
    done_.assign(n, false);
    costs_.assign(n, {});
    for (bool progress = true; progress;) {
      progress = false;
      for (size_t i = 0; i < n; ++i)
        if (!done_[i] && bodyCost(m_.fns[i].body, costs_[i]))
          done_[i] = progress = true;
    }
    // Report each fn that can reach itself.
    std::vector<std::vector<int>> callees(n);
    for (size_t i = 0; i < n; ++i) {
      for (const LetStmt &l : m_.fns[i].body.lets)
        collectCalls(*l.value, callees[i]);
      if (m_.fns[i].body.result)
        collectCalls(*m_.fns[i].body.result, callees[i]);
    }
    for (size_t i = 0; i < n; ++i) {
      if (done_[i])
        continue;
      std::vector<char> seen(n, 0);
      std::vector<int> stack(callees[i].begin(), callees[i].end());
      bool cyclic = false;
      while (!stack.empty() && !cyclic) {
        int f = stack.back();
        stack.pop_back();
        if (f == static_cast<int>(i))
          cyclic = true;
        else if (!seen[f]) {
          seen[f] = 1;
          stack.insert(stack.end(), callees[f].begin(), callees[f].end());
        }
      }
      if (cyclic)
        diag_.error(m_.fns[i].loc,
                    "fn '" + m_.fns[i].name +
                        "' calls itself (directly or through other fns); fn "
                        "helpers are inlined, so recursion is not allowed");
    }
    auto limit = [&](const Body &b, SourceLoc loc, const std::string &what) {
      Cost c;
      if (bodyCost(b, c) &&
          (c.nodes > kMaxInlinedNodes || c.depth > kMaxInlinedDepth))
        diag_.error(loc, what + " is too large after inlining its fn calls "
                                "(more than " +
                             std::to_string(kMaxInlinedNodes) +
                             " operations or " +
                             std::to_string(kMaxInlinedDepth) +
                             " levels of nesting)");
    };
    for (const Variant &v : m_.variants) {
      if (v.scoreMod.present)
        limit(v.scoreMod.body, v.scoreMod.loc,
              "score_mod of variant '" + v.name + "'");
      if (v.maskMod.present)
        limit(v.maskMod.body, v.maskMod.loc,
              "mask_mod of variant '" + v.name + "'");
    }
  }

  Module &m_;
  DiagnosticEngine &diag_;
  std::vector<Binding> scope_;
  const Variant *variant_ = nullptr; // the variant being checked, if any
  std::vector<bool> done_;
  std::vector<Cost> costs_;
};

} // namespace

bool checkModule(Module &m, DiagnosticEngine &diag) {
  return Checker(m, diag).run();
}

bool parseAndCheck(const SourceFile &file, DiagnosticEngine &diag, Module &m) {
  m = parse(file, diag);
  bool ok = checkModule(m, diag);
  return ok && !diag.hasErrors();
}

} // namespace attnc
