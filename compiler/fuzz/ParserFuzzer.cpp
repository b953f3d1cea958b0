//===- ParserFuzzer.cpp - libFuzzer target for the .attn front end -------===//
//
// Feeds arbitrary bytes through lex -> parse -> check -> diagnostics
// rendering. Any crash, hang, leak or sanitizer report is a bug: no input
// may take the compiler down.
//
//===----------------------------------------------------------------------===//
#include "attnc/Frontend/Parser.h"
#include "attnc/Frontend/Sema.h"

#include <cstddef>
#include <cstdint>
#include <sstream>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  attnc::SourceFile file("fuzz.attn",
                         std::string(reinterpret_cast<const char *>(data), size));
  attnc::DiagnosticEngine diag(file);
  attnc::Module m;
  bool ok = attnc::parseAndCheck(file, diag, m);
  std::ostringstream os;
  diag.print(os);
  if (ok)
    attnc::printAST(m, os);
  return 0;
}
