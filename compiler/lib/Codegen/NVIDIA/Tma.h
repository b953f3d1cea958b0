//===- Tma.h - TMA loads completed on mbarriers, as inline PTX --*- C++ -*-===//
//
// What the sm_90a wgmma form emits to bring K and V tiles in through the
// Tensor Memory Accelerator: mbarrier objects in shared memory (one per
// stage, one arrival per phase), the issuing thread's expect-tx arrival and
// 3-D tiled loads through a tensor map passed as a grid-constant kernel
// parameter, and every thread's wait for a phase by its parity. Inline PTX
// so the instructions are exactly these forms (the emulator executes them;
// tma_probe.py compares their layouts with a device's).
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_CODEGEN_NVIDIA_TMA_H
#define ATTNC_CODEGEN_NVIDIA_TMA_H

#include "mlir/IR/ImplicitLocOpBuilder.h"

namespace attnc::codegen {

class TmaEmitter {
public:
  explicit TmaEmitter(mlir::ImplicitLocOpBuilder &b) : b_(b) {}

  /// mbarrier.init of the object at shared address `bar` (i32) for `count`
  /// arrivals per phase.
  void init(mlir::Value bar, int64_t count);
  /// The calling thread arrives on `bar`, expecting `bytes` of transactions.
  void arriveExpectTx(mlir::Value bar, int64_t bytes);
  /// Waits until the phase of `bar` with parity `parity` (i32, 0 or 1) has
  /// completed (try_wait in a loop).
  void waitParity(mlir::Value bar, mlir::Value parity);
  /// The box at coordinates `x`, `y`, `z` (i32, innermost first) of the
  /// 3-D tensor map at generic address `map` (i64) into shared address
  /// `dst` (i32), completing its bytes on `bar`.
  void load3d(mlir::Value dst, mlir::Value map, mlir::Value x, mlir::Value y,
              mlir::Value z, mlir::Value bar);

private:
  mlir::ImplicitLocOpBuilder &b_;
};

} // namespace attnc::codegen

#endif
