//===- LoadVariants.h - The input file of check and bench -------*- C++ -*-===//
#ifndef ATTNC_TOOLS_LOADVARIANTS_H
#define ATTNC_TOOLS_LOADVARIANTS_H

#include "Options.h"

#include "attnc/Driver/Session.h"

#include <memory>
#include <string>
#include <vector>

namespace attnc::tools {

/// Loads the one input file and picks the variants to run (--variant, or
/// all). On failure prints the diagnostics or the error and returns false.
bool loadVariants(const Options &o, std::unique_ptr<Session> &session,
                  std::vector<std::string> &variants);

} // namespace attnc::tools

#endif
