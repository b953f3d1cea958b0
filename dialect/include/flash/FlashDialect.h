//===- FlashDialect.h - The flash dialect (tiled flash attention) -*- C++ -*-===//
#ifndef FLASH_FLASHDIALECT_H
#define FLASH_FLASHDIALECT_H

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/IR/RegionKindInterface.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/ControlFlowInterfaces.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "flash/FlashDialect.h.inc"

#define GET_TYPEDEF_CLASSES
#include "flash/FlashTypes.h.inc"

#define GET_OP_CLASSES
#include "flash/FlashOps.h.inc"

#endif
