//===- LoadVariants.cpp - The input file of check and bench --------------===//
#include "LoadVariants.h"

#include <algorithm>
#include <iostream>

namespace attnc::tools {

bool loadVariants(const Options &o, std::unique_ptr<Session> &session,
                  std::vector<std::string> &variants) {
  std::string diags;
  if (rt::Status s = Session::load(o.positional[0], diags, session); !s) {
    std::cerr << (diags.empty() ? "attnc: error: " + s.message() + "\n" : diags);
    return false;
  }
  variants = session->variants();
  if (!o.variant.empty()) {
    if (std::find(variants.begin(), variants.end(), o.variant) ==
        variants.end()) {
      std::cerr << "attnc: error: no variant named '" << o.variant << "'\n";
      return false;
    }
    variants = {o.variant};
  }
  if (variants.empty()) {
    std::cerr << "attnc: error: '" << o.positional[0]
              << "' defines no variant\n";
    return false;
  }
  return true;
}

} // namespace attnc::tools
