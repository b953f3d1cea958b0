//===- MmaFragments.h - mma.sync m16n8k16 operands and products -*- C++ -*-===//
//
// What the mma.sync forms (MmaSyncKernel.cpp, MmaSyncBackwardKernel.cpp)
// emit for one warp: operand pairs of f16/bf16, the MMA itself with f32
// accumulators, ldmatrix x4 from shared memory, and the xor shuffle among a
// row's four lanes.
//
// Fragment layouts (PTX ISA, m16n8k16, g = lane / 4, t = lane % 4):
//   A (16 x 16, row): pairs (g, 2t), (g + 8, 2t), (g, 2t + 8), (g + 8, 2t + 8)
//   B (16 x 8, col):  pairs (k = 2t, n = g), (k = 2t + 8, n = g)
//   C (16 x 8, f32):  (g, 2t), (g, 2t + 1), (g + 8, 2t), (g + 8, 2t + 1)
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_CODEGEN_NVIDIA_MMAFRAGMENTS_H
#define ATTNC_CODEGEN_NVIDIA_MMAFRAGMENTS_H

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/NVGPU/IR/NVGPUDialect.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/ImplicitLocOpBuilder.h"

namespace attnc::codegen {

class MmaFragments {
public:
  /// Four registers of an mma.sync operand or accumulator.
  using Frag = mlir::SmallVector<mlir::Value, 4>;

  /// Operands of element type `elem` (f16 or bf16), built with `b`.
  MmaFragments(mlir::ImplicitLocOpBuilder &b, mlir::Type elem)
      : b_(b), elem_(elem) {}

  /// An mma.sync operand pair: vector<2xf16> for f16, an i32 for bf16.
  mlir::Value asOperand(mlir::Value pair);
  mlir::Value packPair(mlir::Value x0, mlir::Value x1);
  /// Two f32 values rounded to the element type, as one operand pair.
  mlir::Value packF32Pair(mlir::Value x0, mlir::Value x1);
  /// D = A B + C on mma.sync m16n8k16 (A row-major, B column-major, f32 C).
  Frag mma(mlir::ArrayRef<mlir::Value> a, mlir::ArrayRef<mlir::Value> b,
           mlir::ArrayRef<mlir::Value> c);
  /// ldmatrix x4 at element `idx` of the shared buffer `smem`: lane l
  /// addresses row l % 8 of matrix l / 8; the four matrices' pairs.
  Frag ldMatrix(mlir::Value smem, mlir::Value idx, bool trans);
  /// gpu.shuffle xor by `off` across the warp.
  mlir::Value shflXor(mlir::Value x, int64_t off);

private:
  mlir::ImplicitLocOpBuilder &b_;
  mlir::Type elem_;
};

} // namespace attnc::codegen

#endif
