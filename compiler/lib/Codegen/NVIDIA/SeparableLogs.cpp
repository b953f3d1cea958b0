//===- SeparableLogs.cpp - A log of a query's value times a key's ---------===//
//
// The analysis that finds score_mod's separable logs and the pieces the
// tensor-core kernels build them from (SeparableLogs.h says when).
//
//===----------------------------------------------------------------------===//
#include "SeparableLogs.h"

#include "ProgramBuilder.h"
#include "SpecialFunctions.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"

using namespace mlir;

namespace attnc::codegen {

SmallVector<SeparableLog> separableLogs(Block &block) {
  // score_mod's arguments: score, b, h, q, kv.
  llvm::DenseSet<Value> ofRow = ProgramBuilder::uniformValues(block, {0, 4}),
                        ofColumn = ProgramBuilder::uniformValues(block, {0, 3});
  auto rowOnly = [&](Value v) {
    return ofRow.contains(v) && !ofColumn.contains(v);
  };
  auto columnOnly = [&](Value v) {
    return ofColumn.contains(v) && !ofRow.contains(v);
  };
  SmallVector<SeparableLog> out;
  for (Operation &op : block.without_terminator()) {
    auto log = dyn_cast<math::LogOp>(op);
    if (!log || !log.getType().isF32())
      continue;
    Operation *arg = log.getOperand().getDefiningOp();
    if (!arg || !isa<arith::MulFOp, arith::DivFOp>(arg))
      continue;
    Value a = arg->getOperand(0), c = arg->getOperand(1);
    bool div = isa<arith::DivFOp>(arg);
    if (rowOnly(a) && columnOnly(c))
      out.push_back({log, a, c, 1.0f, div ? -1.0f : 1.0f});
    else if (columnOnly(a) && rowOnly(c))
      out.push_back({log, c, a, div ? -1.0f : 1.0f, 1.0f});
  }
  return out;
}

Value lg2Flushing(OpBuilder &b, Location loc, Value x) {
  return LLVM::CallIntrinsicOp::create(
             b, loc, b.getF32Type(),
             b.getStringAttr("llvm.nvvm.lg2.approx.ftz.f"), ValueRange{x})
      .getResult(0);
}

Value inLogRange(OpBuilder &b, Location loc, Value x) {
  auto bound = [&](arith::CmpFPredicate p, float c) {
    return arith::CmpFOp::create(
        b, loc, p, x, arith::ConstantOp::create(b, loc, b.getF32FloatAttr(c)));
  };
  return arith::AndIOp::create(b, loc,
                               bound(arith::CmpFPredicate::OGE, 0x1p-62f),
                               bound(arith::CmpFPredicate::OLE, 0x1p62f));
}

Value queryLogTerm(OpBuilder &b, Location loc, const SeparableLog &l,
                   Value x) {
  return arith::MulFOp::create(
      b, loc, lg2Flushing(b, loc, x),
      arith::ConstantOp::create(b, loc, b.getF32FloatAttr(l.rowSign * kLn2)));
}

Value pairLog(OpBuilder &b, Location loc, const SeparableLog &l, Value lg2y,
              Value queryTerm) {
  return math::FmaOp::create(
      b, loc, lg2y,
      arith::ConstantOp::create(b, loc, b.getF32FloatAttr(l.columnSign * kLn2)),
      queryTerm);
}

} // namespace attnc::codegen
