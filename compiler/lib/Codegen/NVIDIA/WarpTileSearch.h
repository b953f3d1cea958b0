//===- WarpTileSearch.h - A warp's search for the next visited tile -------===//
//
// Where a tile's class is a load (a data-dependent mask's block mask), a
// loop that classifies one tile at a time waits a load's latency per tile;
// at a document mask's 4% density that was ~60 serial loads per visited
// tile. The warp classifies 32 candidates at once instead: each lane one, a
// ballot finds the first visited one and a shuffle brings its class. The
// tensor-core forward (TensorCoreTileSearch.cpp) and both kernels of the
// tensor-core backward (_bwd_q over KV tiles, _bwd_kv over Q tiles) use it.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_CODEGEN_WARPTILESEARCH_H
#define ATTNC_CODEGEN_WARPTILESEARCH_H

#include "mlir/IR/ImplicitLocOpBuilder.h"
#include "mlir/IR/Value.h"
#include "llvm/ADT/STLFunctionalExtras.h"

#include <utility>

namespace attnc::codegen {

/// The first tile index j in [from, n) (i32) whose class (i8, from
/// `classOf(j, inRange)`, called with i32 candidates j = from + lane + 32 k
/// and `inRange` = j < n; it must not read past n where inRange is false)
/// is not empty, and that class; (n, full) where there is none. Every lane
/// of the warp must reach it with the same `from` and `n` (`lane32` is the
/// lane's index, i32).
std::pair<mlir::Value, mlir::Value> firstVisitedByWarp(
    mlir::ImplicitLocOpBuilder &b, mlir::Value lane32, mlir::Value from,
    mlir::Value n,
    llvm::function_ref<mlir::Value(mlir::Value j, mlir::Value inRange)>
        classOf);

} // namespace attnc::codegen

#endif
