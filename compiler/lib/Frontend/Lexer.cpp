//===- Lexer.cpp - Tokenizer for the .attn language ----------------------===//
#include "attnc/Frontend/Lexer.h"

#include <cctype>
#include <cerrno>
#include <cmath>
#include <charconv>
#include <cstdlib>
#include <unordered_map>

namespace attnc {

const char *tokSpelling(Tok k) {
  switch (k) {
  case Tok::Eof: return "end of file";
  case Tok::Error: return "invalid token";
  case Tok::Ident: return "identifier";
  case Tok::IntLit: return "integer literal";
  case Tok::FloatLit: return "float literal";
  case Tok::KwFn: return "'fn'";
  case Tok::KwVariant: return "'variant'";
  case Tok::KwScoreMod: return "'score_mod'";
  case Tok::KwMaskMod: return "'mask_mod'";
  case Tok::KwLet: return "'let'";
  case Tok::KwReturn: return "'return'";
  case Tok::KwTrue: return "'true'";
  case Tok::KwFalse: return "'false'";
  case Tok::KwInf: return "'inf'";
  case Tok::LParen: return "'('";
  case Tok::RParen: return "')'";
  case Tok::LBrace: return "'{'";
  case Tok::RBrace: return "'}'";
  case Tok::LBracket: return "'['";
  case Tok::RBracket: return "']'";
  case Tok::Comma: return "','";
  case Tok::Colon: return "':'";
  case Tok::Semi: return "';'";
  case Tok::Question: return "'?'";
  case Tok::Arrow: return "'->'";
  case Tok::Assign: return "'='";
  case Tok::Plus: return "'+'";
  case Tok::Minus: return "'-'";
  case Tok::Star: return "'*'";
  case Tok::Slash: return "'/'";
  case Tok::Percent: return "'%'";
  case Tok::Bang: return "'!'";
  case Tok::AndAnd: return "'&&'";
  case Tok::OrOr: return "'||'";
  case Tok::Amp: return "'&'";
  case Tok::Pipe: return "'|'";
  case Tok::Caret: return "'^'";
  case Tok::Tilde: return "'~'";
  case Tok::Shl: return "'<<'";
  case Tok::Shr: return "'>>'";
  case Tok::Lt: return "'<'";
  case Tok::Le: return "'<='";
  case Tok::Gt: return "'>'";
  case Tok::Ge: return "'>='";
  case Tok::EqEq: return "'=='";
  case Tok::NotEq: return "'!='";
  }
  return "token";
}

namespace {

class Lexer {
public:
  Lexer(const SourceFile &file, DiagnosticEngine &diag)
      : src_(file.text()), diag_(diag) {}

  std::vector<Token> run() {
    std::vector<Token> toks;
    while (true) {
      skipTrivia();
      Token t = next();
      toks.push_back(std::move(t));
      if (toks.back().kind == Tok::Eof)
        return toks;
    }
  }

private:
  char peek(size_t ahead = 0) const {
    return pos_ + ahead < src_.size() ? src_[pos_ + ahead] : '\0';
  }
  bool atEnd() const { return pos_ >= src_.size(); }
  void advance() {
    if (atEnd())
      return;
    if (src_[pos_] == '\n') {
      ++loc_.line;
      loc_.col = 1;
    } else {
      ++loc_.col;
    }
    ++pos_;
    loc_.offset = static_cast<uint32_t>(pos_);
  }

  void skipTrivia() {
    while (!atEnd()) {
      char c = peek();
      if (c == ' ' || c == '\t' || c == '\r' || c == '\n') {
        advance();
      } else if (c == '/' && peek(1) == '/') {
        while (!atEnd() && peek() != '\n')
          advance();
      } else if (c == '/' && peek(1) == '*') {
        SourceLoc start = loc_;
        advance();
        advance();
        bool closed = false;
        while (!atEnd()) {
          if (peek() == '*' && peek(1) == '/') {
            advance();
            advance();
            closed = true;
            break;
          }
          advance();
        }
        if (!closed)
          diag_.error(start, "unterminated comment: '/*' has no matching '*/'");
      } else {
        return;
      }
    }
  }

  Token make(Tok k, SourceLoc at, size_t len) {
    Token t;
    t.kind = k;
    t.loc = at;
    for (size_t i = 0; i < len; ++i)
      advance();
    return t;
  }

  Token next() {
    SourceLoc at = loc_;
    if (atEnd())
      return make(Tok::Eof, at, 0);
    char c = peek();
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_')
      return identifier(at);
    if (std::isdigit(static_cast<unsigned char>(c)) ||
        (c == '.' && std::isdigit(static_cast<unsigned char>(peek(1)))))
      return number(at);
    switch (c) {
    case '(': return make(Tok::LParen, at, 1);
    case ')': return make(Tok::RParen, at, 1);
    case '{': return make(Tok::LBrace, at, 1);
    case '}': return make(Tok::RBrace, at, 1);
    case '[': return make(Tok::LBracket, at, 1);
    case ']': return make(Tok::RBracket, at, 1);
    case ',': return make(Tok::Comma, at, 1);
    case ':': return make(Tok::Colon, at, 1);
    case ';': return make(Tok::Semi, at, 1);
    case '?': return make(Tok::Question, at, 1);
    case '+': return make(Tok::Plus, at, 1);
    case '*': return make(Tok::Star, at, 1);
    case '/': return make(Tok::Slash, at, 1);
    case '%': return make(Tok::Percent, at, 1);
    case '-': return peek(1) == '>' ? make(Tok::Arrow, at, 2)
                                    : make(Tok::Minus, at, 1);
    case '=': return peek(1) == '=' ? make(Tok::EqEq, at, 2)
                                    : make(Tok::Assign, at, 1);
    case '!': return peek(1) == '=' ? make(Tok::NotEq, at, 2)
                                    : make(Tok::Bang, at, 1);
    case '<': return peek(1) == '=' ? make(Tok::Le, at, 2)
                     : peek(1) == '<' ? make(Tok::Shl, at, 2)
                                      : make(Tok::Lt, at, 1);
    case '>': return peek(1) == '=' ? make(Tok::Ge, at, 2)
                     : peek(1) == '>' ? make(Tok::Shr, at, 2)
                                      : make(Tok::Gt, at, 1);
    case '&': return peek(1) == '&' ? make(Tok::AndAnd, at, 2)
                                    : make(Tok::Amp, at, 1);
    case '|': return peek(1) == '|' ? make(Tok::OrOr, at, 2)
                                    : make(Tok::Pipe, at, 1);
    case '^': return make(Tok::Caret, at, 1);
    case '~': return make(Tok::Tilde, at, 1);
    default:
      break;
    }
    unsigned char uc = static_cast<unsigned char>(c);
    if (uc >= 0x20 && uc < 0x7f)
      diag_.error(at, std::string("unexpected character '") + c + "'");
    else {
      static const char *hex = "0123456789abcdef";
      diag_.error(at, std::string("unexpected byte 0x") + hex[uc >> 4] +
                          hex[uc & 15] + " (only ASCII source is accepted)");
    }
    return make(Tok::Error, at, 1);
  }

  Token identifier(SourceLoc at) {
    size_t begin = pos_;
    while (std::isalnum(static_cast<unsigned char>(peek())) || peek() == '_')
      advance();
    Token t;
    t.loc = at;
    t.text = std::string(src_.substr(begin, pos_ - begin));
    static const std::unordered_map<std::string, Tok> keywords = {
        {"fn", Tok::KwFn},           {"variant", Tok::KwVariant},
        {"score_mod", Tok::KwScoreMod}, {"mask_mod", Tok::KwMaskMod},
        {"let", Tok::KwLet},         {"return", Tok::KwReturn},
        {"true", Tok::KwTrue},       {"false", Tok::KwFalse},
        {"inf", Tok::KwInf}};
    auto it = keywords.find(t.text);
    t.kind = it == keywords.end() ? Tok::Ident : it->second;
    return t;
  }

  Token number(SourceLoc at) {
    size_t begin = pos_;
    bool isFloat = false;
    while (std::isdigit(static_cast<unsigned char>(peek())))
      advance();
    if (peek() == '.') {
      isFloat = true;
      advance();
      while (std::isdigit(static_cast<unsigned char>(peek())))
        advance();
    }
    if ((peek() == 'e' || peek() == 'E') &&
        (std::isdigit(static_cast<unsigned char>(peek(1))) ||
         ((peek(1) == '+' || peek(1) == '-') &&
          std::isdigit(static_cast<unsigned char>(peek(2)))))) {
      isFloat = true;
      advance();
      if (peek() == '+' || peek() == '-')
        advance();
      while (std::isdigit(static_cast<unsigned char>(peek())))
        advance();
    }
    Token t;
    t.loc = at;
    t.text = std::string(src_.substr(begin, pos_ - begin));
    if (std::isalpha(static_cast<unsigned char>(peek())) || peek() == '_') {
      diag_.error(loc_, "invalid suffix on numeric literal '" + t.text + "'");
      while (std::isalnum(static_cast<unsigned char>(peek())) || peek() == '_')
        advance();
      t.kind = Tok::Error;
      return t;
    }
    if (isFloat) {
      t.kind = Tok::FloatLit;
      errno = 0;
      t.floatValue = std::strtod(t.text.c_str(), nullptr);
      // Float literals are f32: one that overflows to infinity or rounds to
      // zero from a nonzero value is an error, not a silent change.
      float f = static_cast<float>(t.floatValue);
      if (std::isinf(f) || (errno == ERANGE && t.floatValue > 1.0)) {
        diag_.error(at, "float literal '" + t.text +
                            "' is out of the f32 range (at most 3.4028235e38; "
                            "write 'inf' for infinity)");
        t.kind = Tok::Error;
      } else if (f == 0.0f && t.floatValue != 0.0) {
        diag_.error(at, "float literal '" + t.text +
                            "' is too small for f32 (it would be 0; the "
                            "smallest is 1.4e-45)");
        t.kind = Tok::Error;
      }
      return t;
    }
    t.kind = Tok::IntLit;
    const char *b = t.text.data();
    auto [ptr, ec] = std::from_chars(b, b + t.text.size(), t.intValue);
    // i32 is the language's integer type; 2147483648 is allowed so that
    // `-2147483648` can be written.
    if (ec != std::errc() || ptr != b + t.text.size() ||
        t.intValue > 2147483648LL) {
      diag_.error(at, "integer literal '" + t.text +
                          "' does not fit in i32");
      t.kind = Tok::Error;
    }
    return t;
  }

  std::string_view src_;
  DiagnosticEngine &diag_;
  size_t pos_ = 0;
  SourceLoc loc_;
};

} // namespace

std::vector<Token> lex(const SourceFile &file, DiagnosticEngine &diag) {
  return Lexer(file, diag).run();
}

} // namespace attnc
