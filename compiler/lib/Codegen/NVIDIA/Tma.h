//===- Tma.h - TMA loads, mbarriers and warp roles, as inline PTX -*- C++ -*-===//
//
// What the sm_90a wgmma form emits to bring K and V tiles in through the
// Tensor Memory Accelerator and hand them between its warp roles: mbarrier
// objects in shared memory (a stage's `full` and `empty`), arrivals (with
// an expected transaction count for the TMA issuer), 3-D tiled loads
// through a tensor map passed as a grid-constant kernel parameter, waits
// for a phase by its parity; and the warp-specialized kernel's named
// barriers over the consumer threads and register budgets per warpgroup.
// Inline PTX so the instructions are exactly these forms (the emulator
// executes them; tma_probe.py compares their layouts with a device's).
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
  /// The calling thread arrives on `bar` (release: its writes before, and
  /// its completed wgmma reads, happen before the phase completes).
  void arrive(mlir::Value bar);
  /// Waits until the phase of `bar` with parity `parity` (i32, 0 or 1) has
  /// completed (try_wait in a loop).
  void waitParity(mlir::Value bar, mlir::Value parity);
  /// The box at coordinates `x`, `y`, `z` (i32, innermost first) of the
  /// 3-D tensor map at generic address `map` (i64) into shared address
  /// `dst` (i32), completing its bytes on `bar`.
  void load3d(mlir::Value dst, mlir::Value map, mlir::Value x, mlir::Value y,
              mlir::Value z, mlir::Value bar);

  /// bar.sync `id`, `threads`: a hardware barrier over `threads` threads
  /// (a multiple of 32; id 0 is the CTA's __syncthreads). NVVM's
  /// convergent intrinsic: LLVM never duplicates it into branches.
  void namedBarrier(int64_t id, int64_t threads);
  /// The same with the id in a register (i32, uniform over the warp).
  void namedBarrier(mlir::Value id, int64_t threads);
  /// bar.arrive `id` (i32, uniform over the warp), `threads`: counts the
  /// calling warp's threads on the barrier without waiting (a producer's
  /// half of a handshake).
  void namedArrive(mlir::Value id, int64_t threads);
  /// bar.warp.sync: the warp's lanes reconverge (after one lane's
  /// arrival or loads, before the warp's next .aligned instruction).
  void syncWarp();
  /// setmaxnreg.{inc,dec}: this warpgroup's register budget becomes
  /// `count` (a multiple of 8 in 24..256; every warp of the warpgroup).
  void setMaxRegisters(bool increase, int64_t count);

private:
  mlir::ImplicitLocOpBuilder &b_;
};

} // namespace attnc::codegen

#endif
