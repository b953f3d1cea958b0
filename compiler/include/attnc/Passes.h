//===- Passes.h - The compiler's stages as passes ---------------*- C++ -*-===//
//
// Declared in Passes.td (summaries, options, dependent dialects); each
// pass is implemented beside the stage it runs. registerAttncPasses()
// registers them all (attn-opt).
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_PASSES_H
#define ATTNC_PASSES_H

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/NVGPU/IR/NVGPUDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "flash/FlashDialect.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

#include <memory>

namespace attnc {

#define GEN_PASS_DECL
#include "attnc/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "attnc/Passes.h.inc"

} // namespace attnc

#endif
