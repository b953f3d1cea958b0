//===- VariantInfo.h - The runtime's view of a compiled variant -*- C++ -*-===//
#ifndef ATTNC_CODEGEN_VARIANTINFO_H
#define ATTNC_CODEGEN_VARIANTINFO_H

#include "attnc/Analysis/MaskAnalysis.h"

#include <string>

namespace attnc {

/// Prints the variant's signature, mask kind and modifier program in the
/// text form the runtime parses (runtime/include/attnc/runtime/Variant.h).
std::string printVariantInfo(mlir::attn::VariantOp v, const MaskAnalysis &m);

} // namespace attnc

#endif
