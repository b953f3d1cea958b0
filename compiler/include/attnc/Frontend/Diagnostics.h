//===- Diagnostics.h - Located errors for .attn sources --------*- C++ -*-===//
//
// A SourceFile owns the text of one input; a DiagnosticEngine collects
// `file:line:col: error: message` records and renders each one with its
// source line and a caret, the way clang does.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_FRONTEND_DIAGNOSTICS_H
#define ATTNC_FRONTEND_DIAGNOSTICS_H

#include <cstdint>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

namespace attnc {

/// A position in a source file; line and col are 1-based, offset 0-based.
struct SourceLoc {
  uint32_t offset = 0;
  uint32_t line = 1;
  uint32_t col = 1;
};

class SourceFile {
public:
  SourceFile(std::string name, std::string text)
      : name_(std::move(name)), text_(std::move(text)) {}
  const std::string &name() const { return name_; }
  std::string_view text() const { return text_; }
  /// The full line holding `loc`, without its newline.
  std::string_view lineAt(SourceLoc loc) const;

private:
  std::string name_;
  std::string text_;
};

struct Diagnostic {
  SourceLoc loc;
  std::string message;
};

class DiagnosticEngine {
public:
  explicit DiagnosticEngine(const SourceFile &file) : file_(file) {}

  /// Records an error. After `kMaxErrors` further errors are dropped and a
  /// single "too many errors" note is kept, so hostile inputs stay cheap.
  void error(SourceLoc loc, std::string message);
  bool hasErrors() const { return !diags_.empty(); }
  size_t errorCount() const { return diags_.size(); }
  const std::vector<Diagnostic> &diagnostics() const { return diags_; }
  const SourceFile &file() const { return file_; }

  /// `file:line:col: error: msg`, the source line, and a caret under col.
  std::string render(const Diagnostic &d) const;
  void print(std::ostream &os) const;

  static constexpr size_t kMaxErrors = 50;

private:
  const SourceFile &file_;
  std::vector<Diagnostic> diags_;
  bool truncated_ = false;
};

} // namespace attnc

#endif
