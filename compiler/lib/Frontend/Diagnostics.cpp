//===- Diagnostics.cpp - Rendering of located errors ---------------------===//
#include "attnc/Frontend/Diagnostics.h"

#include <algorithm>

namespace attnc {

std::string_view SourceFile::lineAt(SourceLoc loc) const {
  std::string_view t = text_;
  size_t off = loc.offset > t.size() ? t.size() : loc.offset;
  size_t begin = t.rfind('\n', off == 0 ? 0 : off - 1);
  begin = (begin == std::string_view::npos || off == 0) ? 0 : begin + 1;
  if (off > 0 && t[off - 1] == '\n')
    begin = off;
  size_t end = t.find('\n', begin);
  if (end == std::string_view::npos)
    end = t.size();
  return t.substr(begin, end - begin);
}

void DiagnosticEngine::error(SourceLoc loc, std::string message) {
  if (diags_.size() >= kMaxErrors) {
    if (!truncated_) {
      truncated_ = true;
      diags_.push_back({loc, "too many errors; stopping"});
    }
    return;
  }
  diags_.push_back({loc, std::move(message)});
}

std::string DiagnosticEngine::render(const Diagnostic &d) const {
  std::string out = file_.name() + ":" + std::to_string(d.loc.line) + ":" +
                    std::to_string(d.loc.col) + ": error: " + d.message + "\n";
  std::string_view line = file_.lineAt(d.loc);
  // Keep very long lines readable: show at most 200 bytes around the caret.
  size_t caret = d.loc.col - 1;
  size_t start = 0;
  if (line.size() > 200 && caret > 100)
    start = caret - 100;
  std::string_view shown = line.substr(start, 200);
  // Control and non-ASCII bytes would garble a terminal (and shift the
  // caret); show each as one '?'.
  for (char c : shown) {
    unsigned char u = static_cast<unsigned char>(c);
    out += (u < 0x20 && c != '\t') || u >= 0x7f ? '?' : c;
  }
  out += "\n";
  for (size_t i = start; i < caret && i < line.size(); ++i)
    out += line[i] == '\t' ? '\t' : ' ';
  out += "^\n";
  return out;
}

void DiagnosticEngine::print(std::ostream &os) const {
  // Lexer, parser and Sema report in separate passes; show them in source
  // order, as a reader scans the file.
  std::vector<const Diagnostic *> order;
  for (const Diagnostic &d : diags_)
    order.push_back(&d);
  std::stable_sort(order.begin(), order.end(),
                   [](const Diagnostic *a, const Diagnostic *b) {
                     return a->loc.offset < b->loc.offset;
                   });
  for (const Diagnostic *d : order)
    os << render(*d);
}

} // namespace attnc
