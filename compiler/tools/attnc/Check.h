//===- Check.h - `attnc check`, `bench` and `tune` ----------------*- C++ -*-===//
#ifndef ATTNC_TOOLS_CHECK_H
#define ATTNC_TOOLS_CHECK_H

#include <string>
#include <vector>

namespace attnc::tools {

int runCheck(const std::vector<std::string> &args);
int runBench(const std::vector<std::string> &args);
int runTune(const std::vector<std::string> &args);

} // namespace attnc::tools

#endif
