//===- Wgmma.cpp - sm_90a's warpgroup MMA, as inline PTX ------------------===//
#include "Wgmma.h"
#include "InlinePtx.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

#include <string>

using namespace mlir;

namespace attnc::codegen {

Value WgmmaEmitter::descriptor(Value base, int64_t offset, int64_t lbo,
                               int64_t sbo, bool swizzle128) {
  Type i32 = b_.getI32Type();
  auto c = [&](int64_t v) {
    return arith::ConstantOp::create(b_, b_.getI32IntegerAttr(int32_t(v)));
  };
  // Bits 0-13: address >> 4; 16-29: lbo >> 4; 32-45: sbo >> 4; 62-63: 1
  // (128-byte swizzle) or 0 (none); base offset 0 (atoms start on
  // 1024-byte boundaries).
  Value lo = arith::AddIOp::create(
      b_, arith::ShRUIOp::create(b_, base, c(4)),
      c((offset >> 4) + (((lbo >> 4) & 0x3fff) << 16)));
  Value hi = c(((sbo >> 4) & 0x3fff) | (swizzle128 ? int64_t(1) << 30 : 0));
  Value pair = vector::FromElementsOp::create(
      b_, VectorType::get({2}, i32), ValueRange{lo, hi});
  return LLVM::BitcastOp::create(b_, b_.getI64Type(), pair);
}

void WgmmaEmitter::fence() {
  inlinePtx(b_, {}, {}, "wgmma.fence.sync.aligned;", "~{memory}");
}

void WgmmaEmitter::commit() {
  inlinePtx(b_, {}, {}, "wgmma.commit_group.sync.aligned;", "~{memory}");
}

void WgmmaEmitter::proxyFence() {
  inlinePtx(b_, {}, {}, "fence.proxy.async.shared::cta;", "~{memory}");
}

SmallVector<Value> WgmmaEmitter::asmF32(const std::string &text,
                                        const std::string &constraints,
                                        ValueRange operands, int64_t results) {
  SmallVector<Type> types(static_cast<size_t>(results), b_.getF32Type());
  LLVM::InlineAsmOp op = inlinePtx(b_, types, operands, text, constraints);
  SmallVector<Value> out;
  if (results == 1) {
    out.push_back(op.getResult(0));
    return out;
  }
  for (int64_t i = 0; i < results; ++i)
    out.push_back(LLVM::ExtractValueOp::create(b_, op.getResult(0), i));
  return out;
}

SmallVector<Value> WgmmaEmitter::mma(ArrayRef<Value> acc, Value aDesc,
                                     ArrayRef<Value> aRegs, Value bDesc,
                                     int64_t n, bool bf16, bool transB,
                                     bool accumulate) {
  const int64_t N = 2 * n;
  std::string text = "wgmma.mma_async.sync.aligned.m64n" + std::to_string(N) +
                     "k16.f32." + (bf16 ? "bf16.bf16" : "f16.f16") + " {";
  std::string cons;
  for (int64_t i = 0; i < n; ++i) {
    text += (i ? ", $" : "$") + std::to_string(i);
    cons += (i ? ",=f" : "=f");
  }
  text += "}, ";
  SmallVector<Value> operands;
  int64_t next = n;
  if (aDesc) {
    text += "$" + std::to_string(next++) + ", ";
    cons += ",l";
    operands.push_back(aDesc);
  } else {
    text += "{";
    for (size_t i = 0; i < aRegs.size(); ++i) {
      text += (i ? ", $" : "$") + std::to_string(next++);
      cons += ",r";
      Value r = aRegs[i];
      if (r.getType() != b_.getI32Type())
        r = LLVM::BitcastOp::create(b_, b_.getI32Type(), r);
      operands.push_back(r);
    }
    text += "}, ";
  }
  text += "$" + std::to_string(next++) + ", ";
  cons += ",l";
  operands.push_back(bDesc);
  // scale-d (1: D += A B), scale-a, scale-b, [trans-a,] trans-b.
  text += std::string(accumulate ? "1" : "0") + ", 1, 1, " +
          (aDesc ? "0, " : "") + (transB ? "1" : "0") + ";";
  if (accumulate)
    for (int64_t i = 0; i < n; ++i) {
      cons += "," + std::to_string(i);
      operands.push_back(acc[static_cast<size_t>(i)]);
    }
  return asmF32(text, cons, operands, n);
}

SmallVector<Value> WgmmaEmitter::wait(int64_t pending, ArrayRef<Value> acc,
                                      ArrayRef<Value> held) {
  const size_t n = acc.size(), all = n + held.size();
  std::string cons;
  SmallVector<Type> types;
  SmallVector<Value> operands(acc.begin(), acc.end());
  for (size_t i = 0; i < all; ++i) {
    cons += std::string(i ? "," : "") + (i < n ? "=f" : "=r");
    types.push_back(i < n ? Type(b_.getF32Type()) : Type(b_.getI32Type()));
  }
  for (Value h : held)
    operands.push_back(h.getType() == b_.getI32Type()
                           ? h
                           : Value(LLVM::BitcastOp::create(b_, b_.getI32Type(), h)));
  for (size_t i = 0; i < all; ++i)
    cons += "," + std::to_string(i);
  cons += ",~{memory}";
  LLVM::InlineAsmOp op =
      inlinePtx(b_, types, operands,
                "wgmma.wait_group.sync.aligned " + std::to_string(pending) + ";",
                cons);
  SmallVector<Value> out;
  if (all == 1 && n == 1)
    out.push_back(op.getResult(0));
  else if (all > 1)
    for (size_t i = 0; i < n; ++i)
      out.push_back(LLVM::ExtractValueOp::create(b_, op.getResult(0), i));
  return out;
}

} // namespace attnc::codegen
