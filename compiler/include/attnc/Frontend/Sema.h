//===- Sema.h - Name resolution and type checking for .attn ----*- C++ -*-===//
#ifndef ATTNC_FRONTEND_SEMA_H
#define ATTNC_FRONTEND_SEMA_H

#include "attnc/Frontend/AST.h"

namespace attnc {

/// Resolves names and calls, assigns a type to every expression, and checks
/// the language's rules (see docs/language.md). Returns true if no error was
/// found. Annotates `m` in place.
bool checkModule(Module &m, DiagnosticEngine &diag);

/// Upper bound on the size of a modifier after inlining every fn call;
/// beyond it (e.g. helpers that call each other twice, 30 levels deep) the
/// program is rejected instead of blowing up the compiler.
constexpr int64_t kMaxInlinedNodes = 100000;
constexpr int64_t kMaxInlinedDepth = 2000;

/// Convenience: lex, parse and check. Returns true on success.
bool parseAndCheck(const SourceFile &file, DiagnosticEngine &diag, Module &m);

} // namespace attnc

#endif
