//===- WarpTileSearch.cpp - A warp's search for the next visited tile -----===//
//
// firstVisitedByWarp (WarpTileSearch.h): 32 candidate tiles classified at
// once, a ballot and a shuffle.
//
//===----------------------------------------------------------------------===//
#include "WarpTileSearch.h"

#include "attnc/runtime/KernelABI.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

using namespace mlir;
namespace abi = attnc::rt::abi;

namespace attnc::codegen {

std::pair<Value, Value>
firstVisitedByWarp(ImplicitLocOpBuilder &b, Value lane32, Value from, Value n,
                   function_ref<Value(Value j, Value inRange)> classOf) {
  Type i32 = b.getI32Type(), i8 = b.getI8Type();
  auto c32 = [&](int64_t v) {
    return arith::ConstantOp::create(b, b.getI32IntegerAttr(v)).getResult();
  };
  auto ult = [&](Value x, Value y) {
    return arith::CmpIOp::create(b, arith::CmpIPredicate::ult, x, y)
        .getResult();
  };
  auto w = scf::WhileOp::create(b, TypeRange{i32, i32, i32},
                                ValueRange{from, c32(0), c32(0)});
  {
    OpBuilder::InsertionGuard guard(b);
    SmallVector<Location> locs(3, b.getLoc());
    Block *before = b.createBlock(&w.getBefore(), {}, {i32, i32, i32}, locs);
    Value j0 = before->getArgument(0);
    Value j = arith::AddIOp::create(b, j0, lane32);
    Value cls = classOf(j, ult(j, n));
    Value empty = arith::ConstantOp::create(b, b.getI8IntegerAttr(abi::kEmpty));
    Value visit =
        arith::CmpIOp::create(b, arith::CmpIPredicate::ne, cls, empty);
    Value found = NVVM::VoteSyncOp::create(b, i32, c32(-1), visit,
                                           NVVM::VoteSyncKind::ballot);
    Value next = arith::AddIOp::create(b, j0, c32(32));
    Value more = arith::AndIOp::create(
        b, arith::CmpIOp::create(b, arith::CmpIPredicate::eq, found, c32(0)),
        ult(next, n));
    scf::ConditionOp::create(
        b, more, ValueRange{j0, found, arith::ExtUIOp::create(b, i32, cls)});
    Block *after = b.createBlock(&w.getAfter(), {}, {i32, i32, i32}, locs);
    scf::YieldOp::create(
        b, ValueRange{arith::AddIOp::create(b, after->getArgument(0), c32(32)),
                      after->getArgument(1), after->getArgument(2)});
  }
  Value j0 = w.getResult(0), found = w.getResult(1), cls = w.getResult(2);
  // 32 when none (llvm.cttz with zero defined; math.cttz has no NVVM
  // lowering).
  Value first =
      LLVM::CallIntrinsicOp::create(
          b, i32, b.getStringAttr("llvm.cttz.i32"),
          ValueRange{found, arith::ConstantOp::create(b, b.getBoolAttr(false))})
          .getResult(0);
  Value at = arith::MinUIOp::create(b, first, c32(31));
  Value clsAt =
      gpu::ShuffleOp::create(b, cls, at, c32(32), gpu::ShuffleMode::IDX)
          .getShuffleResult();
  Value any = arith::CmpIOp::create(b, arith::CmpIPredicate::ne, found, c32(0));
  Value j =
      arith::SelectOp::create(b, any, arith::AddIOp::create(b, j0, first), n);
  Value full = arith::ConstantOp::create(b, b.getI8IntegerAttr(abi::kFull));
  return {j, arith::SelectOp::create(
                 b, any, arith::TruncIOp::create(b, i8, clsAt), full)};
}

} // namespace attnc::codegen
