//===- SpecialFunctions.h - exp, log and tanh on the GPU's MUFU unit ------===//
//
// The GPU lowering of the f32 special functions and division through the
// hardware's approximations (ex2, lg2, rcp on the multi-function unit)
// instead of the polynomials and IEEE division the CPU uses: a few
// instructions where a polynomial or an IEEE division took 12-40
// (docs/language.md states the error bounds).
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_CODEGEN_NVIDIA_SPECIALFUNCTIONS_H
#define ATTNC_CODEGEN_NVIDIA_SPECIALFUNCTIONS_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Support/LogicalResult.h"

namespace attnc {

/// ln 2 rounded to f32: log(x) is lg2(x) times it (here, and where the
/// tensor-core kernels split a log into a row's and a column's).
constexpr float kLn2 = 0.693147182f;

/// Rewrites math.exp, math.log and math.tanh on f32 in `module` into arith
/// operations and NVVM approximation intrinsics (llvm.nvvm.ex2.approx.f32,
/// llvm.nvvm.lg2.approx.f, llvm.nvvm.rcp.approx.ftz.f), and f32 arith.divf
/// into llvm.nvvm.div.full; other types and functions are left for the
/// polynomial approximations.
mlir::LogicalResult lowerSpecialFunctions(mlir::ModuleOp module);

} // namespace attnc

#endif
