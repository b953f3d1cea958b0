//===- Lexer.h - Tokens of the .attn language ------------------*- C++ -*-===//
#ifndef ATTNC_FRONTEND_LEXER_H
#define ATTNC_FRONTEND_LEXER_H

#include "attnc/Frontend/Diagnostics.h"

#include <string>
#include <vector>

namespace attnc {

enum class Tok {
  Eof,
  Error, // a malformed token; the lexer has already reported it
  Ident,
  IntLit,
  FloatLit,
  // keywords
  KwFn,
  KwVariant,
  KwScoreMod,
  KwMaskMod,
  KwLet,
  KwReturn,
  KwTrue,
  KwFalse,
  KwInf,
  // punctuation
  LParen,
  RParen,
  LBrace,
  RBrace,
  LBracket,
  RBracket,
  Comma,
  Colon,
  Semi,
  Question,
  Arrow, // ->
  Assign,
  Plus,
  Minus,
  Star,
  Slash,
  Percent,
  Bang,
  AndAnd,
  OrOr,
  Lt,
  Le,
  Gt,
  Ge,
  EqEq,
  NotEq,
  Amp,   // &   (bitwise on i32, logical on bool)
  Pipe,  // |
  Caret, // ^
  Tilde, // ~
  Shl,   // <<
  Shr,   // >>
};

/// A human-readable spelling of a token kind, for "expected X" messages.
const char *tokSpelling(Tok k);

struct Token {
  Tok kind = Tok::Eof;
  SourceLoc loc;
  std::string text; // identifier name or literal spelling
  int64_t intValue = 0;
  double floatValue = 0.0;
};

/// Splits a whole file into tokens. Errors (stray characters, unterminated
/// block comments, out-of-range literals) are reported to `diag` and become
/// `Tok::Error` tokens, so the parser can go on and report more.
std::vector<Token> lex(const SourceFile &file, DiagnosticEngine &diag);

} // namespace attnc

#endif
