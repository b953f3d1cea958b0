//===- AttnPipeline.h - The attn module the later stages start from -*- C++ -*-===//
//
// MLIRGen's module becomes what every later stage (mask analysis, kernels,
// the modifier program, packages) reads: canonicalized and CSE'd, then
// each variant's score_grad region built (-attn-differentiate) and
// simplified the same way (left empty, so that only the backward is
// refused, for a score_mod the pass cannot differentiate). `attnc compile` and Session both run it, so
// what `--emit=attn` prints is what the kernels are built from.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_CODEGEN_ATTNPIPELINE_H
#define ATTNC_CODEGEN_ATTNPIPELINE_H

#include "mlir/IR/BuiltinOps.h"

#include <string>

namespace attnc {

/// Runs the pipeline on `module` (without the canonicalizer and CSE when
/// `simplify` is false: attnc's -O0). On failure `error` says which step.
mlir::LogicalResult runAttnPipeline(mlir::ModuleOp module, bool simplify,
                                    std::string &error);

} // namespace attnc

#endif
