//===- MLIRGen.h - From the checked AST to the attn dialect ----*- C++ -*-===//
#ifndef ATTNC_MLIRGEN_MLIRGEN_H
#define ATTNC_MLIRGEN_MLIRGEN_H

#include "attnc/Frontend/AST.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/OwningOpRef.h"

#include <string>

namespace attnc {

/// Emits one `attn.variant` per variant of `m` (or only `onlyVariant` when
/// non-empty) into a new module. fn helpers are inlined at each call; every
/// op carries the `file:line:col` of the expression it came from. `m` must
/// have passed Sema. Returns null if `onlyVariant` names no variant.
mlir::OwningOpRef<mlir::ModuleOp> emitAttn(mlir::MLIRContext &ctx,
                                           const Module &m,
                                           const std::string &fileName,
                                           const std::string &onlyVariant = "");

} // namespace attnc

#endif
