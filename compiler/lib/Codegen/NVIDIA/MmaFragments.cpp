//===- MmaFragments.cpp - mma.sync m16n8k16 operands and products ---------===//
//
// MmaFragments.h says what each emits and the fragment layouts.
//
//===----------------------------------------------------------------------===//
#include "MmaFragments.h"

#include "mlir/Dialect/Arith/IR/Arith.h"

using namespace mlir;

namespace attnc::codegen {

Value MmaFragments::asOperand(Value pair) {
  if (elem_.isF16())
    return pair;
  Value v = vector::BitCastOp::create(b_, VectorType::get({1}, b_.getI32Type()),
                                      pair);
  return vector::ExtractOp::create(b_, v, ArrayRef<int64_t>{0});
}

Value MmaFragments::packPair(Value x0, Value x1) {
  return asOperand(vector::FromElementsOp::create(
      b_, VectorType::get({2}, elem_), ValueRange{x0, x1}));
}

Value MmaFragments::packF32Pair(Value x0, Value x1) {
  return packPair(arith::TruncFOp::create(b_, elem_, x0),
                  arith::TruncFOp::create(b_, elem_, x1));
}

MmaFragments::Frag MmaFragments::mma(ArrayRef<Value> a, ArrayRef<Value> bOp,
                                     ArrayRef<Value> c) {
  Type f32 = b_.getF32Type();
  Type accTy =
      LLVM::LLVMStructType::getLiteral(b_.getContext(), {f32, f32, f32, f32});
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

MmaFragments::Frag MmaFragments::ldMatrix(Value smem, Value idx, bool trans) {
  Value m = nvgpu::LdMatrixOp::create(b_, VectorType::get({4, 2}, elem_), smem,
                                      ValueRange{idx}, trans, 4);
  Frag regs;
  for (int64_t k = 0; k < 4; ++k)
    regs.push_back(
        asOperand(vector::ExtractOp::create(b_, m, ArrayRef<int64_t>{k})));
  return regs;
}

Value MmaFragments::shflXor(Value x, int64_t off) {
  auto i32 = [&](int64_t v) {
    return arith::ConstantOp::create(b_, b_.getI32IntegerAttr(int32_t(v)));
  };
  return gpu::ShuffleOp::create(b_, x, i32(off), i32(32), gpu::ShuffleMode::XOR)
      .getShuffleResult();
}

} // namespace attnc::codegen
