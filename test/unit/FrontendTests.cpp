// Unit tests for the .attn front end: lexer, parser, type checker, and
// the diagnostics' format.
#include "attnc/Frontend/Parser.h"
#include "attnc/Frontend/Sema.h"

#include <catch2/catch.hpp>

#include <sstream>

using namespace attnc;

namespace {

struct Result {
  bool ok;
  Module module;
  std::vector<Diagnostic> diags;
  std::string rendered;
};

Result compile(const std::string &src) {
  SourceFile file("t.attn", src);
  DiagnosticEngine diag(file);
  Result r;
  r.ok = parseAndCheck(file, diag, r.module);
  r.diags = diag.diagnostics();
  std::ostringstream os;
  diag.print(os);
  r.rendered = os.str();
  return r;
}

/// True if some diagnostic contains `text`.
bool hasError(const Result &r, const std::string &text) {
  for (const Diagnostic &d : r.diags)
    if (d.message.find(text) != std::string::npos)
      return true;
  return false;
}

std::vector<Tok> kinds(const std::string &src) {
  SourceFile f("t.attn", src);
  DiagnosticEngine d(f);
  std::vector<Tok> out;
  for (const Token &t : lex(f, d))
    out.push_back(t.kind);
  return out;
}

const char *kSynaptic = R"(
variant synaptic(qamp: f32[B, H, Q], key_factor: f32[B, H, KV], barrier: f32) {
  score_mod(score, b, h, q, kv) = score + log(qamp[b, h, q] * key_factor[b, h, kv]) - barrier * abs(q - kv)
  mask_mod(b, h, q, kv) = q >= kv
}
)";

} // namespace

// ---- lexer ----

TEST_CASE("lexer splits operators greedily", "[lexer]") {
  auto k = kinds("a->b<=c>=d==e!=f&&g||h");
  std::vector<Tok> want = {Tok::Ident, Tok::Arrow, Tok::Ident, Tok::Le,
                           Tok::Ident, Tok::Ge,    Tok::Ident, Tok::EqEq,
                           Tok::Ident, Tok::NotEq, Tok::Ident, Tok::AndAnd,
                           Tok::Ident, Tok::OrOr,  Tok::Ident, Tok::Eof};
  CHECK(k == want);
}

TEST_CASE("lexer recognizes keywords but not prefixes of identifiers",
          "[lexer]") {
  auto k = kinds("fn fnx variant score_mod mask_mod let return true false inf");
  std::vector<Tok> want = {Tok::KwFn,      Tok::Ident,   Tok::KwVariant,
                           Tok::KwScoreMod, Tok::KwMaskMod, Tok::KwLet,
                           Tok::KwReturn,  Tok::KwTrue,  Tok::KwFalse,
                           Tok::KwInf,     Tok::Eof};
  CHECK(k == want);
}

TEST_CASE("lexer reads integer and float literals", "[lexer]") {
  SourceFile f("t.attn", "42 3.5 1e3 .25 2.5e-2");
  DiagnosticEngine d(f);
  auto toks = lex(f, d);
  REQUIRE(toks.size() == 6);
  CHECK(toks[0].kind == Tok::IntLit);
  CHECK(toks[0].intValue == 42);
  CHECK(toks[1].floatValue == 3.5);
  CHECK(toks[2].kind == Tok::FloatLit);
  CHECK(toks[2].floatValue == 1000.0);
  CHECK(toks[3].floatValue == 0.25);
  CHECK(toks[4].floatValue == Approx(0.025));
  CHECK_FALSE(d.hasErrors());
}

TEST_CASE("lexer tracks line and column across comments", "[lexer]") {
  SourceFile f("t.attn", "// line one\n/* two\n three */ x\n  y");
  DiagnosticEngine d(f);
  auto toks = lex(f, d);
  REQUIRE(toks.size() == 3);
  CHECK(toks[0].loc.line == 3);
  CHECK(toks[0].loc.col == 11);
  CHECK(toks[1].loc.line == 4);
  CHECK(toks[1].loc.col == 3);
}

TEST_CASE("lexer reports an unterminated block comment", "[lexer]") {
  auto r = compile("variant v() {}\n/* never closed");
  CHECK_FALSE(r.ok);
  CHECK(hasError(r, "unterminated comment"));
  CHECK(r.diags[0].loc.line == 2);
}

TEST_CASE("lexer rejects integer literals that do not fit in i32",
          "[lexer]") {
  auto r = compile("variant v() { mask_mod(b,h,q,kv) = q < 99999999999 }");
  CHECK(hasError(r, "does not fit in i32"));
}

TEST_CASE("lexer reports stray characters and non-ASCII bytes", "[lexer]") {
  auto r = compile("variant v() { mask_mod(b,h,q,kv) = q # kv }");
  CHECK(hasError(r, "unexpected character '#'"));
  auto r2 = compile("variant v() { mask_mod(b,h,q,kv) = q \xc3\xa9 kv }");
  CHECK(hasError(r2, "unexpected byte 0xc3"));
}

TEST_CASE("a single & between comparisons says how to write it", "[parser]") {
  // & binds tighter than comparisons (Python's rule), so this chains them.
  auto r = compile("variant v() { mask_mod(b,h,q,kv) = q > 0 & kv > 0 }");
  CHECK(hasError(r, "comparisons cannot be chained; use '&&' to combine them, "
                    "or parenthesize each comparison around '&'"));
  auto ok = compile("variant v() { mask_mod(b,h,q,kv) = (q > 0) & (kv > 0) }");
  CHECK(ok.ok);
}

// ---- parser ----

TEST_CASE("parser accepts the synaptic variant", "[parser]") {
  auto r = compile(kSynaptic);
  INFO(r.rendered);
  REQUIRE(r.ok);
  REQUIRE(r.module.variants.size() == 1);
  const Variant &v = r.module.variants[0];
  CHECK(v.name == "synaptic");
  REQUIRE(v.params.size() == 3);
  CHECK(v.params[0].isTensor);
  CHECK(v.params[0].dims.size() == 3);
  CHECK(v.params[0].dims[2].symbol == "Q");
  CHECK_FALSE(v.params[2].isTensor);
  CHECK(v.params[2].scalarType == Type::F32);
  CHECK(v.scoreMod.present);
  CHECK(v.maskMod.present);
  CHECK(v.scoreMod.body.result->type == Type::F32);
  CHECK(v.maskMod.body.result->type == Type::Bool);
}

TEST_CASE("parser gives * precedence over + and binds ?: loosest",
          "[parser]") {
  auto r = compile("fn f(a: i32, b: i32, c: i32) -> i32 = a + b * c\n"
                   "fn g(a: i32) -> i32 = a > 0 || a < -5 ? 1 : 2");
  REQUIRE(r.ok);
  const Expr &add = *r.module.fns[0].body.result;
  CHECK(add.op == Tok::Plus);
  CHECK(add.operands[1]->op == Tok::Star);
  const Expr &sel = *r.module.fns[1].body.result;
  CHECK(sel.kind == Expr::Kind::Ternary);
  CHECK(sel.operands[0]->op == Tok::OrOr);
}

TEST_CASE("parser accepts block bodies with lets and semicolons",
          "[parser]") {
  auto r = compile("variant v() {\n score_mod(s, b, h, q, kv) {\n"
                   "  let d = kv - q;\n  let e = d * 2\n  return s + e;\n }\n}");
  INFO(r.rendered);
  REQUIRE(r.ok);
  CHECK(r.module.variants[0].scoreMod.body.lets.size() == 2);
}

TEST_CASE("parser allows omitting either modifier", "[parser]") {
  auto r = compile("variant a() {}\nvariant b() { mask_mod(b,h,q,kv) = true }");
  REQUIRE(r.ok);
  CHECK_FALSE(r.module.variants[0].scoreMod.present);
  CHECK_FALSE(r.module.variants[0].maskMod.present);
  CHECK_FALSE(r.module.variants[1].scoreMod.present);
  CHECK(r.module.variants[1].maskMod.present);
}

TEST_CASE("parser reports a missing return", "[parser]") {
  auto r = compile("variant v() { score_mod(s,b,h,q,kv) { let x = 1 } }");
  CHECK(hasError(r, "missing 'return'"));
}

TEST_CASE("parser rejects chained comparisons", "[parser]") {
  auto r = compile("variant v() { mask_mod(b,h,q,kv) = 0 < q < kv }");
  CHECK(hasError(r, "comparisons cannot be chained"));
}

TEST_CASE("parser reports several errors in one run", "[parser]") {
  auto r = compile("variant a() { mask_mod(b,h,q,kv) = q >= }\n"
                   "variant b() { score_mod(s,b,h,q,kv) = s + }\n"
                   "fn (x: i32) -> i32 = x\n");
  CHECK(r.diags.size() >= 3);
}

TEST_CASE("parser rejects duplicate modifiers", "[parser]") {
  auto r = compile("variant v() { mask_mod(b,h,q,kv) = true\n"
                   "mask_mod(b,h,q,kv) = false }");
  CHECK(hasError(r, "duplicate mask_mod"));
}

TEST_CASE("parser bounds nesting depth instead of overflowing the stack",
          "[parser]") {
  std::string deep = "variant v() { mask_mod(b,h,q,kv) = " +
                     std::string(100000, '(') + "true" +
                     std::string(100000, ')') + " }";
  auto r = compile(deep);
  CHECK(hasError(r, "too deeply nested"));
  std::string longChain = "variant v() { score_mod(s,b,h,q,kv) = s";
  for (int i = 0; i < 50000; ++i)
    longChain += " + s";
  longChain += " }";
  auto r2 = compile(longChain);
  CHECK(hasError(r2, "too deeply nested"));
  std::string negs = "variant v() { score_mod(s,b,h,q,kv) = " +
                     std::string(100000, '-') + "s }";
  CHECK(hasError(compile(negs), "too deeply nested"));
}

TEST_CASE("parser survives random bytes", "[parser]") {
  // A fixed pseudo-random sequence: deterministic, and never a crash.
  uint32_t x = 12345;
  for (int round = 0; round < 200; ++round) {
    std::string s;
    for (int i = 0; i < 300; ++i) {
      x = x * 1664525u + 1013904223u;
      const char alphabet[] = "variant fn score_mod mask_mod let return(){}[],:;"
                              "?->=+-*/%!&|<>qkvbh0123.e f32 i32 bool\n\t";
      s += alphabet[(x >> 16) % (sizeof(alphabet) - 1)];
    }
    compile(s);
  }
  SUCCEED("no crash");
}

// ---- sema ----

TEST_CASE("sema reports unknown names with a suggestion", "[sema]") {
  auto r = compile("variant v(window: i32) { mask_mod(b,h,q,kv) = q - kv < windw }");
  CHECK(hasError(r, "unknown name 'windw'; did you mean 'window'?"));
}

TEST_CASE("sema checks builtin arity", "[sema]") {
  CHECK(hasError(compile("variant v() { score_mod(s,b,h,q,kv) = max(s) }"),
                 "'max' takes 2 argument(s), got 1"));
  CHECK(hasError(compile("variant v() { score_mod(s,b,h,q,kv) = clamp(s, 0) }"),
                 "'clamp' takes 3 argument(s), got 2"));
}

TEST_CASE("sema checks fn arity and argument types", "[sema]") {
  const char *fn = "fn w(q: i32, kv: i32) -> bool = q >= kv\n";
  CHECK(hasError(compile(std::string(fn) +
                         "variant v() { mask_mod(b,h,q,kv) = w(q) }"),
                 "takes 2 argument(s), got 1"));
  CHECK(hasError(compile(std::string(fn) +
                         "variant v() { mask_mod(b,h,q,kv) = w(q, 1.5) }"),
                 "must be i32, got f32"));
}

TEST_CASE("sema checks gather rank and index types", "[sema]") {
  const char *hdr = "variant v(t: f32[H, KV]) { score_mod(s,b,h,q,kv) = ";
  CHECK(hasError(compile(std::string(hdr) + "s + t[h] }"),
                 "'t' has 2 dimension(s) but is indexed with 1"));
  CHECK(hasError(compile(std::string(hdr) + "s + t[h, s] }"),
                 "index 2 of 't' must be i32, got f32"));
  CHECK(hasError(compile(std::string(hdr) + "s + t }"), "'t' is a tensor"));
}

TEST_CASE("sema rejects indexing a scalar", "[sema]") {
  auto r = compile("variant v(c: f32) { score_mod(s,b,h,q,kv) = s + c[h] }");
  CHECK(hasError(r, "'c' is not a tensor"));
}

TEST_CASE("sema promotes mixed int/float arithmetic to f32", "[sema]") {
  auto r = compile("variant v(c: f32) { score_mod(s,b,h,q,kv) = (q - kv) * c }");
  REQUIRE(r.ok);
  const Expr &mul = *r.module.variants[0].scoreMod.body.result;
  CHECK(mul.type == Type::F32);
  CHECK(mul.operands[0]->type == Type::I32);
}

TEST_CASE("sema keeps integer arithmetic in i32", "[sema]") {
  auto r = compile("fn f(a: i32, b: i32) -> i32 = a / b + a % b");
  REQUIRE(r.ok);
  CHECK(r.module.fns[0].body.result->type == Type::I32);
}

TEST_CASE("sema requires score_mod to yield f32 and mask_mod bool", "[sema]") {
  CHECK(hasError(compile("variant v() { score_mod(s,b,h,q,kv) = q > kv }"),
                 "score_mod must yield f32, but this is bool"));
  CHECK(hasError(compile("variant v() { mask_mod(b,h,q,kv) = q - kv }"),
                 "mask_mod must yield bool, but this is i32"));
  // An i32 score is promoted, as in any mixed arithmetic.
  CHECK(compile("variant v() { score_mod(s,b,h,q,kv) = q - kv }").ok);
}

TEST_CASE("sema rejects bool arithmetic and numeric logic", "[sema]") {
  CHECK(hasError(compile("variant v() { score_mod(s,b,h,q,kv) = s + (q > kv) }"),
                 "needs numbers, got f32 and bool"));
  CHECK(hasError(compile("variant v() { mask_mod(b,h,q,kv) = q && kv }"),
                 "needs bool operands"));
  CHECK(hasError(compile("variant v() { mask_mod(b,h,q,kv) = !q }"),
                 "'!' needs a bool"));
}

TEST_CASE("sema checks ?: conditions and branch types", "[sema]") {
  CHECK(hasError(compile("variant v() { score_mod(s,b,h,q,kv) = q ? s : 0.0 }"),
                 "condition of '?:' must be bool"));
  CHECK(hasError(compile("variant v() { score_mod(s,b,h,q,kv) = q > kv ? s : true }"),
                 "incompatible types"));
  auto r = compile("variant v() { score_mod(s,b,h,q,kv) = q > kv ? s : 0 }");
  REQUIRE(r.ok);
  CHECK(r.module.variants[0].scoreMod.body.result->type == Type::F32);
}

TEST_CASE("sema rejects duplicate names", "[sema]") {
  CHECK(hasError(compile("variant v(a: f32, a: i32) {}"),
                 "redefinition of parameter 'a'"));
  CHECK(hasError(compile("variant v() { mask_mod(b,h,q,q) = true }"),
                 "redefinition of parameter 'q'"));
  CHECK(hasError(compile("variant v() {}\nvariant v() {}"),
                 "redefinition of variant 'v'"));
  CHECK(hasError(compile("fn f(x: i32) -> i32 = x\nfn f(x: i32) -> i32 = x"),
                 "redefinition of fn 'f'"));
  CHECK(hasError(compile("variant v() { score_mod(s,b,h,q,kv) { let d = 1\n"
                         "let d = 2\n return s } }"),
                 "redefinition of let binding 'd'"));
}

TEST_CASE("sema rejects redefining a builtin", "[sema]") {
  CHECK(hasError(compile("fn exp(x: f32) -> f32 = x"), "is a builtin"));
}

TEST_CASE("sema checks modifier parameter counts", "[sema]") {
  CHECK(hasError(compile("variant v() { score_mod(s,b,h,q) = s }"),
                 "score_mod takes 5 parameters"));
  CHECK(hasError(compile("variant v() { mask_mod(s,b,h,q,kv) = true }"),
                 "mask_mod takes 4 parameters"));
}

TEST_CASE("sema checks fn return types", "[sema]") {
  CHECK(hasError(compile("fn f(x: i32) -> bool = x + 1"),
                 "declared to return bool but its body is i32"));
  CHECK(compile("fn f(x: i32) -> f32 = x + 1").ok); // i32 promotes to f32
}

TEST_CASE("sema rejects recursion among fn helpers", "[sema]") {
  auto r = compile("fn a(x: i32) -> i32 = b(x)\nfn b(x: i32) -> i32 = a(x)\n"
                   "fn c(x: i32) -> i32 = c(x)");
  CHECK(hasError(r, "fn 'a' calls itself"));
  CHECK(hasError(r, "fn 'c' calls itself"));
}

TEST_CASE("sema bounds the size of inlined helpers", "[sema]") {
  std::string src = "fn h0(x: f32) -> f32 = x\n";
  for (int i = 1; i < 40; ++i)
    src += "fn h" + std::to_string(i) + "(x: f32) -> f32 = h" +
           std::to_string(i - 1) + "(x) + h" + std::to_string(i - 1) +
           "(x)\n";
  src += "variant v() { score_mod(s,b,h,q,kv) = h39(s) }";
  CHECK(hasError(compile(src), "too large after inlining"));
}

TEST_CASE("sema: fn bodies cannot see variant parameters", "[sema]") {
  auto r = compile("fn f(q: i32) -> bool = q < w\n"
                   "variant v(w: i32) { mask_mod(b,h,q,kv) = f(q) }");
  CHECK(hasError(r, "unknown name 'w'"));
}

TEST_CASE("sema rejects bad variant parameter types", "[sema]") {
  CHECK(hasError(compile("variant v(x: f16) {}"),
                 "scalar parameters are f32, i32 or bool"));
  CHECK(hasError(compile("variant v(x: f8[H]) {}"),
                 "unknown tensor element type 'f8'"));
  CHECK(hasError(compile("variant v(x: f32[0]) {}"), "must be positive"));
}

TEST_CASE("gathers from narrow and wide tensors compute in f32 / i32",
          "[sema]") {
  auto r = compile("variant v(a: bf16[H], c: i64[KV], m: bool[KV]) {\n"
                   " score_mod(s,b,h,q,kv) = s + a[h] + c[kv]\n"
                   " mask_mod(b,h,q,kv) = m[kv] }");
  INFO(r.rendered);
  REQUIRE(r.ok);
}

// ---- diagnostics ----

TEST_CASE("diagnostics render file:line:col, the line, and a caret",
          "[diag]") {
  auto r = compile("variant v() {\n  mask_mod(b, h, q, kv) = q >= kvv\n}\n");
  REQUIRE(r.diags.size() == 1);
  CHECK(r.rendered ==
        "t.attn:2:32: error: unknown name 'kvv'; did you mean 'kv'?\n"
        "  mask_mod(b, h, q, kv) = q >= kvv\n"
        "                               ^\n");
}

TEST_CASE("diagnostics are printed in source order", "[diag]") {
  auto r = compile("variant v() { mask_mod(b,h,q,kv) = zz }\n/* open");
  REQUIRE(r.diags.size() == 2);
  auto first = r.rendered.find("unknown name");
  auto second = r.rendered.find("unterminated comment");
  CHECK(first < second);
}

TEST_CASE("diagnostics stop after a bounded number of errors", "[diag]") {
  std::string src;
  for (int i = 0; i < 500; ++i)
    src += "variant v" + std::to_string(i) + "() { mask_mod(b,h,q,kv) = x }\n";
  auto r = compile(src);
  CHECK(r.diags.size() == DiagnosticEngine::kMaxErrors + 1);
  CHECK(r.diags.back().message == "too many errors; stopping");
}
