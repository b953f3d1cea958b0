//===- attnc.cpp - The attnc command-line driver -------------------------===//
//
//   attnc compile FILE.attn [--variant NAME] [--emit=ast|attn] [-o OUT]
//   attnc --help | --version
//
// Each subcommand parses its own options; a new stage is a new --emit value.
//
//===----------------------------------------------------------------------===//
#include "attnc/Frontend/Parser.h"
#include "attnc/Frontend/Sema.h"
#include "attnc/MLIRGen/MLIRGen.h"

#include "attn/AttnDialect.h"

#include "mlir/IR/Verifier.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Transforms/Passes.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

namespace {

const char *kUsage = R"(attnc - the attention-variant compiler

usage:
  attnc compile FILE.attn [options]   compile variants and print a stage
  attnc --help                        show this help
  attnc --version                     show the version

compile options:
  --emit=STAGE      what to print: ast (typed syntax tree) or attn (the attn
                    dialect, verified and canonicalized; the default)
  --variant NAME    only this variant (default: every variant in the file)
  -o FILE           write to FILE instead of standard output
  -O0               do not canonicalize the attn IR
  --debug-locs      print source locations in the IR

FILE may be '-' to read standard input. Errors are reported as
file:line:col: error: message, with the source line and a caret, and the
exit status is 1.
)";

int usageError(const std::string &msg) {
  std::cerr << "attnc: error: " << msg << "\n"
            << "run 'attnc --help' for usage\n";
  return 2;
}

bool readFile(const std::string &path, std::string &out, std::string &err) {
  if (path == "-") {
    std::ostringstream ss;
    ss << std::cin.rdbuf();
    out = ss.str();
    return true;
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    err = "cannot read '" + path + "': " + std::strerror(errno);
    return false;
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  out = ss.str();
  return true;
}

struct CompileOptions {
  std::string input;
  std::string emit = "attn";
  std::string variant;
  std::string output;
  bool canonicalize = true;
  bool debugLocs = false;
};

int runCompile(const std::vector<std::string> &args) {
  CompileOptions o;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string &a = args[i];
    auto value = [&](const std::string &flag, std::string &dst) -> bool {
      if (a.rfind(flag + "=", 0) == 0) {
        dst = a.substr(flag.size() + 1);
        return true;
      }
      if (a == flag && i + 1 < args.size()) {
        dst = args[++i];
        return true;
      }
      return false;
    };
    if (value("--emit", o.emit) || value("--variant", o.variant) ||
        value("-o", o.output))
      continue;
    if (a == "-O0")
      o.canonicalize = false;
    else if (a == "--debug-locs")
      o.debugLocs = true;
    else if (a == "--help" || a == "-h") {
      std::cout << kUsage;
      return 0;
    } else if (!a.empty() && a[0] == '-' && a != "-")
      return usageError("unknown option '" + a + "' for 'compile'");
    else if (o.input.empty())
      o.input = a;
    else
      return usageError("more than one input file ('" + o.input + "' and '" +
                        a + "')");
  }
  if (o.input.empty())
    return usageError("'compile' needs an input file");
  if (o.emit != "ast" && o.emit != "attn")
    return usageError("unknown --emit stage '" + o.emit +
                      "' (expected ast or attn)");

  std::string text, err;
  if (!readFile(o.input, text, err)) {
    std::cerr << "attnc: error: " << err << "\n";
    return 1;
  }
  std::string name = o.input == "-" ? "<stdin>" : o.input;
  attnc::SourceFile file(name, std::move(text));
  attnc::DiagnosticEngine diag(file);
  attnc::Module module;
  if (!attnc::parseAndCheck(file, diag, module)) {
    diag.print(std::cerr);
    return 1;
  }
  if (!o.variant.empty() && !module.findVariant(o.variant)) {
    std::string names;
    for (const attnc::Variant &v : module.variants)
      names += (names.empty() ? "" : ", ") + v.name;
    std::cerr << "attnc: error: no variant named '" << o.variant << "' in '"
              << name << "'"
              << (names.empty() ? " (it defines none)"
                                : " (it defines: " + names + ")")
              << "\n";
    return 1;
  }

  std::ofstream fileOut;
  std::ostream *os = &std::cout;
  if (!o.output.empty() && o.output != "-") {
    fileOut.open(o.output, std::ios::binary);
    if (!fileOut) {
      std::cerr << "attnc: error: cannot write '" << o.output
                << "': " << std::strerror(errno) << "\n";
      return 1;
    }
    os = &fileOut;
  }

  if (o.emit == "ast") {
    if (!o.variant.empty()) {
      attnc::Module one;
      for (attnc::Variant &v : module.variants)
        if (v.name == o.variant)
          one.variants.push_back(std::move(v));
      attnc::printAST(one, *os);
    } else {
      attnc::printAST(module, *os);
    }
    return 0;
  }

  mlir::MLIRContext ctx;
  auto ir = attnc::emitAttn(ctx, module, name, o.variant);
  if (!ir || mlir::failed(mlir::verify(*ir))) {
    std::cerr << "attnc: error: internal error: the generated attn IR does "
                 "not verify\n";
    return 1;
  }
  if (o.canonicalize) {
    mlir::PassManager pm(&ctx);
    pm.addPass(mlir::createCanonicalizerPass());
    pm.addPass(mlir::createCSEPass());
    if (mlir::failed(pm.run(*ir))) {
      std::cerr << "attnc: error: internal error: canonicalization failed\n";
      return 1;
    }
  }
  mlir::OpPrintingFlags flags;
  if (o.debugLocs)
    flags.enableDebugInfo(/*enable=*/true, /*prettyForm=*/true);
  std::string printed;
  llvm::raw_string_ostream rso(printed);
  ir->print(rso, flags);
  *os << printed;
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty()) {
    std::cerr << kUsage;
    return 2;
  }
  const std::string &cmd = args[0];
  if (cmd == "--help" || cmd == "-h" || cmd == "help") {
    std::cout << kUsage;
    return 0;
  }
  if (cmd == "--version") {
    std::cout << "attnc " << ATTNC_VERSION << " (LLVM/MLIR "
              << ATTNC_LLVM_VERSION << ")\n";
    return 0;
  }
  std::vector<std::string> rest(args.begin() + 1, args.end());
  if (cmd == "compile")
    return runCompile(rest);
  return usageError("unknown command '" + cmd + "'");
}
