//===- Options.h - Command-line options shared by check and bench -*- C++ -*-===//
#ifndef ATTNC_TOOLS_OPTIONS_H
#define ATTNC_TOOLS_OPTIONS_H

#include "Problem.h"

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace attnc::tools {

struct Options {
  std::vector<std::string> positional;
  std::string variant, backend = "cpu", output;
  Shape shape;
  std::map<std::string, double> sets;
  std::map<std::string, std::string> inputs;
  bool suite = false, matrix = false, checked = false, help = false, json = false;
  bool backward = false; // attnc check: the backward pass's gradients
  int threads = 0;
  int warmup = 3, iters = 10;
  int64_t blockM = 0, blockN = 0; // 0: the kernel's defaults
  int64_t warps = 0;              // GPU tensor-core form (0: the table's)
  bool baseline = true;
  /// The shape options given (--dtype, --mode, ...), in order: a case list
  /// (--suite, --matrix) refuses them rather than ignore them.
  std::vector<std::string> shapeOptions;
  /// Parses `args`; on error, `err` says which option and why.
  bool parse(const std::vector<std::string> &args, std::string &err);
};

/// Prints `<command>: error: <msg>` and a hint to run `<command> --help`
/// (command: "attnc check", "attnc-run", ...); returns 2.
int usage(const char *command, const std::string &msg);

} // namespace attnc::tools

#endif
