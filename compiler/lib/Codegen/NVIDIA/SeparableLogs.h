//===- SeparableLogs.h - A log of a query's value times a key's -----------===//
//
// score_mod's logarithms of a product or quotient of a query's value x (of
// b, h, q) and a key's value y (of b, h, kv), which vary with both
// (synaptic's log(qamp[b, h, q] * key_factor[b, h, kv])). Where x and y are
// in [2^-62, 2^62], log(x y) = log x + log y and log(x / y) = log x - log y
// within f32's rounding of the product (2^-24 relative): ln x once per
// query, lg2 y once per key and one FMA per pair, where the product, a lg2
// with its subnormal scaling and a multiply per pair took five or six
// instructions. The tensor-core kernels, forward (TensorCoreOps.cpp) and
// backward (MmaSyncBackward*.cpp), take that form in the tiles whose warp
// has every factor in range (one vote), and the per-pair log elsewhere,
// with f32's product (0, inf, negative, NaN and a product past f32's range
// as the language has them).
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_CODEGEN_NVIDIA_SEPARABLELOGS_H
#define ATTNC_CODEGEN_NVIDIA_SEPARABLELOGS_H

#include "mlir/IR/Builders.h"
#include "llvm/ADT/SmallVector.h"

namespace attnc::codegen {

struct SeparableLog {
  mlir::Operation *log;
  mlir::Value row, column; // x (a query's), y (a key's)
  float rowSign, columnSign; // log(x y): +1, +1; log(x / y): +1, -1;
                             // log(y / x): -1, +1
};

/// The separable logs at the top level of score_mod's block (a sum's body
/// has an index of its own).
llvm::SmallVector<SeparableLog> separableLogs(mlir::Block &scoreBlock);

/// lg2 on the special-function unit, subnormals flushed (exact enough for
/// the normal x the range check admits: one MUFU).
mlir::Value lg2Flushing(mlir::OpBuilder &b, mlir::Location loc, mlir::Value x);

/// x in [2^-62, 2^62] (false for NaN).
mlir::Value inLogRange(mlir::OpBuilder &b, mlir::Location loc, mlir::Value x);

/// A query's term of log `l`: rowSign ln x.
mlir::Value queryLogTerm(mlir::OpBuilder &b, mlir::Location loc,
                         const SeparableLog &l, mlir::Value x);

/// The pair's log: lg2 y (columnSign ln 2) + `queryTerm`, one FMA.
mlir::Value pairLog(mlir::OpBuilder &b, mlir::Location loc,
                    const SeparableLog &l, mlir::Value lg2y,
                    mlir::Value queryTerm);

} // namespace attnc::codegen

#endif
