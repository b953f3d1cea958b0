//===- Canonicalize.h - Canonicalization with bounded locations -*- C++ -*-===//
//
// MLIR's canonicalization patterns give the op they create the fusion of
// the locations of the ops they replace. Along a chain (x + 1 + 1 + ...,
// one `let` per line) each rewrite fuses the previous fusion again, so the
// locations grow with the chain and compile time and memory grow with its
// square. attnc canonicalizes through this pass instead: whenever a rewrite
// leaves an op with more than a few fused locations, it keeps the first and
// the last few (enough to find the source) and drops the middle.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_CODEGEN_CANONICALIZE_H
#define ATTNC_CODEGEN_CANONICALIZE_H

#include "mlir/Pass/Pass.h"

#include <memory>

namespace attnc {

/// At most this many locations survive in a fused location.
constexpr unsigned kMaxFusedLocations = 8;

/// The canonicalizer with fused locations kept to kMaxFusedLocations.
std::unique_ptr<mlir::Pass> createCanonicalizer();

} // namespace attnc

#endif
