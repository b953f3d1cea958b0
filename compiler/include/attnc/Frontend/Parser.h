//===- Parser.h - Recursive-descent parser for .attn -----------*- C++ -*-===//
#ifndef ATTNC_FRONTEND_PARSER_H
#define ATTNC_FRONTEND_PARSER_H

#include "attnc/Frontend/AST.h"

namespace attnc {

/// Parses a whole file. Syntax errors go to `diag`; the parser resynchronizes
/// at the next declaration or modifier so that one run reports them all.
/// Nesting deeper than `kMaxNesting` is an error, never a stack overflow.
Module parse(const SourceFile &file, DiagnosticEngine &diag);

constexpr int kMaxNesting = 256;

} // namespace attnc

#endif
