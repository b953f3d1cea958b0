//===- AST.h - Syntax tree of the .attn language ---------------*- C++ -*-===//
//
// The parser builds it; Sema annotates every expression with its type and
// resolves names and calls in place; MLIRGen and the AST printer read it.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_FRONTEND_AST_H
#define ATTNC_FRONTEND_AST_H

#include "attnc/Frontend/Diagnostics.h"
#include "attnc/Frontend/Lexer.h"

#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

namespace attnc {

/// Types of expressions. `Error` marks a subtree that already failed to
/// type-check, so one mistake is reported once.
enum class Type { Error, I32, F32, Bool };
const char *typeName(Type t);

/// Element types a captured tensor may hold.
enum class ElemType { F32, F16, BF16, I32, I64, Bool };
const char *elemTypeName(ElemType t);
/// The type a gather from a tensor of this element type yields:
/// f16/bf16 widen to f32, i64 narrows to i32.
Type computeType(ElemType t);

enum class Builtin {
  None,
  Exp, Exp2, Log, Log2, Sqrt, Rsqrt, Tanh, Sigmoid, Floor, Ceil, // f32 -> f32
  Sin, Cos, Tan, Log1p, Expm1, Erf,                              // f32 -> f32
  Pow,                      // (f32, f32) -> f32
  Abs, Sign,                // i32 -> i32, f32 -> f32
  Min, Max,
  Clamp,
  FloorDiv, FloorMod,       // Python's // and %: i32 or f32
  Where,                    // where(c, a, b) = c ? a : b
  IsNan, IsInf,             // f32 -> bool
  CastF32, CastI32,
};
/// Looks a builtin up by its spelling; Builtin::None if not one.
Builtin lookupBuiltin(const std::string &name);
const char *builtinName(Builtin b);
/// Every builtin's spelling (for "did you mean" suggestions).
std::vector<std::string> builtinNames();

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

/// What a name in an expression refers to (filled by Sema). Size: a problem
/// size (B, H, HKV, Q, KV) or a free dimension of a capture, inside a
/// variant's modifiers.
enum class RefKind { Unresolved, ModParam, Let, FnParam, Scalar, Tensor, Size,
                     SumIndex };

struct Expr {
  /// Sum: `sum(i < N: term)`; `name` is the index, operands are (N, term),
  /// `varLoc` where the index is named.
  enum class Kind { IntLit, FloatLit, BoolLit, InfLit, Name, Unary, Binary,
                    Ternary, Call, Index, Sum };
  Kind kind;
  SourceLoc loc;   // the operator, callee or literal: where errors point
  SourceLoc begin; // the first token of the whole expression
  Type type = Type::Error;   // Sema
  int64_t intValue = 0;      // IntLit
  double floatValue = 0.0;   // FloatLit
  bool boolValue = false;    // BoolLit
  std::string name;          // Name, Call (callee), Index (tensor), Sum (index)
  SourceLoc varLoc;          // Sum
  Tok op = Tok::Eof;         // Unary, Binary
  std::vector<ExprPtr> operands;
  // Sema's resolution.
  RefKind ref = RefKind::Unresolved; // Name, Index
  int refIndex = -1;                 // index of the param / capture / let
  Builtin builtin = Builtin::None;   // Call of a builtin
  int fnIndex = -1;                  // Call of a user fn
  int depth = 1;                     // height of this subtree (parser)

  Expr(Kind k, SourceLoc l) : kind(k), loc(l), begin(l) {}
};

struct LetStmt {
  std::string name;
  SourceLoc loc;
  ExprPtr value;
};

/// `= expr` or `{ let ...; return expr }`.
struct Body {
  SourceLoc loc;
  std::vector<LetStmt> lets;
  ExprPtr result; // null if the block had no `return` (an error)
};

struct NamedLoc {
  std::string name;
  SourceLoc loc;
};

struct FnParam {
  std::string name;
  SourceLoc loc;
  Type type;
};

struct FnDecl {
  std::string name;
  SourceLoc loc;
  std::vector<FnParam> params;
  Type returnType = Type::Error;
  Body body;
};

/// One dimension of a captured tensor: a symbol (B, H, HKV, Q, KV or a free
/// name bound at run time) or a positive integer literal.
struct Dim {
  std::string symbol; // empty for a literal
  int64_t value = 0;
  SourceLoc loc;
};

struct VariantParam {
  std::string name;
  SourceLoc loc;
  bool isTensor = false;
  ElemType elem = ElemType::F32; // tensors
  std::vector<Dim> dims;         // tensors
  bool rank0 = false;            // `f32[]`: one element, dims = [1], read
                                 // by its bare name
  Type scalarType = Type::Error; // scalars: F32 or I32
};

struct Modifier {
  bool present = false;
  SourceLoc loc;
  std::vector<NamedLoc> params; // score_mod: 5, mask_mod: 4
  Body body;
};

struct Variant {
  std::string name;
  SourceLoc loc;
  std::vector<VariantParam> params;
  Modifier scoreMod;
  Modifier maskMod;
};

struct Module {
  std::vector<FnDecl> fns;
  std::vector<Variant> variants;
  const Variant *findVariant(const std::string &name) const;
};

/// A readable, indented dump with every expression's type (`--emit=ast`).
void printAST(const Module &m, std::ostream &os);

} // namespace attnc

#endif
