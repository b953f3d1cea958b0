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

#include "attnc/Frontend/AST.h"
#include "attnc/Frontend/Diagnostics.h"

#include "mlir/IR/BuiltinOps.h"

#include <string>

namespace attnc {

/// Runs the pipeline on `module` (without the canonicalizer and CSE when
/// `simplify` is false: attnc's -O0). On failure `error` says which step.
mlir::LogicalResult runAttnPipeline(mlir::ModuleOp module, bool simplify,
                                    std::string &error);

/// The most operations a variant's score_mod or mask_mod may keep after
/// the pipeline simplified it. Each one is emitted once per score element
/// a thread evaluates (16 per tile in the tensor-core kernels), so a
/// kernel's compile time grows with it: up to ~20 s at the limit for one GPU
/// kernel on a 2-core machine (LLVM stays superlinear on programs that do not
/// fold: 330 terms `kv < q * i` took 18 s). Programs that fold (30,000 `let`s of a
/// causal chain) stay within it whatever their source size.
constexpr int64_t kMaxModifierOps = 1024;

/// Reports, at the modifier's location in `ast`, every score_mod and
/// mask_mod of `module` (after runAttnPipeline) beyond kMaxModifierOps;
/// false if there was one.
bool checkModifierSizes(mlir::ModuleOp module, const Module &ast,
                        DiagnosticEngine &diag);

} // namespace attnc

#endif
