//===- MmaFragments.cpp - mma.sync m16n8k16 operands and products ---------===//
//
// What the tensor-core forms (the forward's TensorCoreKernel.cpp, the
// backward's TensorCoreBackwardKernel.cpp) emit for one warp: operand pairs
// of f16/bf16, the MMA itself with f32 accumulators, ldmatrix x4 from
// shared memory, and the xor shuffle among a row's four lanes.
//
// Fragment layouts (PTX ISA, m16n8k16, g = lane / 4, t = lane % 4):
//   A (16 x 16, row): pairs (g, 2t), (g + 8, 2t), (g, 2t + 8), (g + 8, 2t + 8)
//   B (16 x 8, col):  pairs (k = 2t, n = g), (k = 2t + 8, n = g)
//   C (16 x 8, f32):  (g, 2t), (g, 2t + 1), (g + 8, 2t), (g + 8, 2t + 1)
//
//===----------------------------------------------------------------------===//
#include "ProgramBuilder.h"

using namespace mlir;

namespace attnc::codegen {

Value ProgramBuilder::asMmaOperand(Value pair) {
  if (elem_.isF16())
    return pair;
  Value v = vector::BitCastOp::create(b_, VectorType::get({1}, i32_), pair);
  return vector::ExtractOp::create(b_, v, ArrayRef<int64_t>{0});
}

Value ProgramBuilder::packPair(Value x0, Value x1) {
  return asMmaOperand(vector::FromElementsOp::create(
      b_, VectorType::get({2}, elem_), ValueRange{x0, x1}));
}

Value ProgramBuilder::packF32Pair(Value x0, Value x1) {
  return packPair(arith::TruncFOp::create(b_, elem_, x0),
                  arith::TruncFOp::create(b_, elem_, x1));
}

ProgramBuilder::Frag ProgramBuilder::mmaSync(ArrayRef<Value> a,
                                             ArrayRef<Value> bOp,
                                             ArrayRef<Value> c) {
  Type accTy = LLVM::LLVMStructType::getLiteral(ctx_, {f32_, f32_, f32_, f32_});
  NVVM::MMATypes t = elem_.isF16() ? NVVM::MMATypes::f16 : NVVM::MMATypes::bf16;
  Value d = NVVM::MmaOp::create(
      b_, accTy, a, bOp, c, ArrayRef<int64_t>{16, 8, 16}, std::nullopt,
      std::nullopt, std::array<NVVM::MMATypes, 2>{t, t},
      std::array<NVVM::MMALayout, 2>{NVVM::MMALayout::row,
                                     NVVM::MMALayout::col});
  Frag out;
  for (int64_t k = 0; k < 4; ++k)
    out.push_back(LLVM::ExtractValueOp::create(b_, d, ArrayRef<int64_t>{k}));
  return out;
}

ProgramBuilder::Frag ProgramBuilder::ldMatrix(Value smem, Value idx,
                                              bool trans) {
  Value m = nvgpu::LdMatrixOp::create(b_, VectorType::get({4, 2}, elem_), smem,
                                      ValueRange{idx}, trans, 4);
  Frag regs;
  for (int64_t k = 0; k < 4; ++k)
    regs.push_back(
        asMmaOperand(vector::ExtractOp::create(b_, m, ArrayRef<int64_t>{k})));
  return regs;
}

Value ProgramBuilder::shflXor(Value x, int64_t off) {
  return gpu::ShuffleOp::create(b_, x, cI32(off), cI32(32),
                                gpu::ShuffleMode::XOR)
      .getShuffleResult();
}

} // namespace attnc::codegen
