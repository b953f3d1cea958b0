//===- AttnDialect.h - The attn dialect -------------------------*- C++ -*-===//
#ifndef ATTN_ATTNDIALECT_H
#define ATTN_ATTNDIALECT_H

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/ControlFlowInterfaces.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "attn/AttnDialect.h.inc"

#define GET_ATTRDEF_CLASSES
#include "attn/AttnAttrs.h.inc"

#define GET_OP_CLASSES
#include "attn/AttnOps.h.inc"

namespace mlir::attn {
/// Calls `fn` on every value `op` reads from outside itself: its operands
/// and, for an op with a body (attn.sum), what the body reads from the
/// enclosing regions. Analyses that ask "does this depend on kv?" use it.
void forEachValueRead(Operation *op, llvm::function_ref<void(Value)> fn);
} // namespace mlir::attn

#endif
