//===- Wgmma.h - sm_90a's warpgroup MMA, as inline PTX ----------*- C++ -*-===//
//
// What the wgmma kernel form (MmaSyncKernel.cpp with TensorCoreLayout::wgmma)
// emits for one warpgroup: shared-memory matrix descriptors of 128-byte
// swizzled operands, wgmma.fence, wgmma.mma_async m64nNk16 with f32
// accumulators (A from a descriptor or from registers, B from a
// descriptor), commit and wait, and fence.proxy.async. MLIR's
// nvvm.wgmma.mma_async takes descriptors only, so every instruction is
// inline PTX: one form, one place.
//
// Operands in shared memory are "atoms" of 8 rows x 128 bytes (64 16-bit
// elements): element k of row r of a region whose rows are 64 elements of
// one atom at a time lives at atom (k / 64), row r, chunk ((k % 64) / 8)
// xor (r % 8). K-major operands (Q, K: rows are M or N, K contiguous) and
// MN-major ones (V: rows are K, N contiguous) are both stored so; their
// descriptors differ (PTX ISA, "matrix descriptor").
//
// The accumulators pass through the wait as tied operands, so nothing reads
// them while the MMA is in flight (the emulator poisons them until then).
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_CODEGEN_NVIDIA_WGMMA_H
#define ATTNC_CODEGEN_NVIDIA_WGMMA_H

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/IR/ImplicitLocOpBuilder.h"

namespace attnc::codegen {

class WgmmaEmitter {
public:
  explicit WgmmaEmitter(mlir::ImplicitLocOpBuilder &b) : b_(b) {}

  /// The 64-bit descriptor of a 128B-swizzled operand starting at shared
  /// byte address `base` + `offset` (base: an i32 multiple of 16, offset a
  /// constant multiple of 16: an atom plus 32 bytes per k-step), `lbo` and
  /// `sbo` in bytes (K-major: sbo 1024 between 8-row groups; MN-major: lbo
  /// between atoms along N, sbo 1024 between 8-row groups). In 32-bit
  /// halves: the low one is (base >> 4) plus a constant, the high one a
  /// constant (shared addresses are below 256 KB: the 14-bit field never
  /// carries), so a k-step's descriptor is one add. Without `swizzle128`,
  /// an operand of 8 x 16-byte core matrices (the sums' ones).
  mlir::Value descriptor(mlir::Value base, int64_t offset, int64_t lbo,
                         int64_t sbo, bool swizzle128 = true);
  void fence();
  void commit();
  void proxyFence();
  /// D (n = N / 2 f32 per thread) = A B (+ D when `accumulate`): m64nNk16,
  /// A from descriptor `aDesc` (K-major) or, when `aDesc` is null, from the
  /// four packed registers `aRegs`; B from `bDesc`, MN-major when `transB`.
  llvm::SmallVector<mlir::Value> mma(llvm::ArrayRef<mlir::Value> acc,
                                     mlir::Value aDesc,
                                     llvm::ArrayRef<mlir::Value> aRegs,
                                     mlir::Value bDesc, int64_t n, bool bf16,
                                     bool transB, bool accumulate);
  /// wgmma.wait_group `pending`, with `acc` tied through it: the values
  /// after the wait. `held` (i32: a register A operand of a wgmma the
  /// wait retires) is tied through it too, so that its registers stay
  /// untouched until then (reusing them earlier is undefined behaviour);
  /// their values after it are not needed.
  llvm::SmallVector<mlir::Value> wait(int64_t pending,
                                      llvm::ArrayRef<mlir::Value> acc,
                                      llvm::ArrayRef<mlir::Value> held = {});

private:
  mlir::ImplicitLocOpBuilder &b_;
  /// An asm statement with side effects returning `results` f32 values.
  llvm::SmallVector<mlir::Value> asmF32(const std::string &text,
                                        const std::string &constraints,
                                        mlir::ValueRange operands,
                                        int64_t results);
};

} // namespace attnc::codegen

#endif
