//===- TensorCoreTileSearch.cpp - The tensor-core forward's next tile ----===//
//
// The first KV tile at or after a given one that the work item visits, and
// its class, for the tensor-core forward's loop and the wgmma form's
// producer: tile by tile for closed-form masks, 32 tiles a step of the
// warp (a ballot) for data-dependent ones.
//
//===----------------------------------------------------------------------===//
#include "TensorCoreKernel.h"

using namespace mlir;

namespace attnc::codegen {

/// The first visited KV tile at or after `from` (nKT when none) and its
/// class: empty tiles are skipped with no copy and no barrier, and the
/// class found here is the one the tile's iteration uses (classified once).
std::pair<Value, Value> TensorCoreKernel::nextVisited(Value from, Value nKT,
                                                      IRMapping &inv) {
  Type i8 = b_.getI8Type();
  if (mask_.kind == rt::MaskKind::Data &&
      (L.qInRegisters || (L.wgmma && D <= 128))) {
    // Tile `from` first, alone (one class load, as before: a dense mask
    // visits it, and its loop keeps its length); past an empty one, the
    // warp's search. Not where mma.sync reads Q from shared memory per
    // tile (Dqk > 128, two m-tiles), nor wgmma beyond D=128: those kernels
    // are at the register file's limit and the search's values spill
    // (mma.sync document_mask D=256, 4 bytes).
    Value empty = arith::ConstantOp::create(b_, b_.getI8IntegerAttr(abi::kEmpty));
    Value inRange = cmp(arith::CmpIPredicate::ult, from, nKT);
    Value cls = blockMaskClass(from, inRange, inv);
    Value miss = arith::XOrIOp::create(
        b_, andI(inRange, cmp(arith::CmpIPredicate::ne, cls, empty)),
        arith::ConstantOp::create(b_, b_.getBoolAttr(true)));
    SmallVector<Value> r = ifYield(miss, ValueRange{from, cls}, [&] {
      auto [j, c] = nextVisitedByWarp(nextTile(from), nKT, inv);
      return SmallVector<Value>{j, c};
    });
    return {r[0], r[1]};
  }
  // Past nKT the class is never read; kFull keeps it a constant where
  // every tile is full (no mask_mod).
  Value none = arith::ConstantOp::create(b_, b_.getI8IntegerAttr(abi::kFull));
  auto w = scf::WhileOp::create(b_, TypeRange{i32_, i8}, ValueRange{from, none});
  {
    OpBuilder::InsertionGuard guard(b_);
    SmallVector<Location> locs(2, b_.getLoc());
    Block *before = b_.createBlock(&w.getBefore(), {}, {i32_, i8}, locs);
    Value j = before->getArgument(0);
    Value inRange = cmp(arith::CmpIPredicate::ult, j, nKT);
    // Classify only tiles that exist (a block mask has no entry past nKT).
    auto found = ifYield(inRange, ValueRange{inRange, none}, [&] {
      Tile t = tileAt(
          it, idxOfU32(j), inv);
      return SmallVector<Value>{
          arith::XOrIOp::create(
              b_, t.visit, arith::ConstantOp::create(b_, b_.getBoolAttr(true))),
          t.cls};
    });
    scf::ConditionOp::create(b_, andI(inRange, found[0]),
                             ValueRange{j, found[1]});
    Block *after = b_.createBlock(&w.getAfter(), {}, {i32_, i8}, locs);
    scf::YieldOp::create(
        b_, ValueRange{nextTile(after->getArgument(0)), after->getArgument(1)});
  }
  return {w.getResult(0), w.getResult(1)};
}

/// nextVisited for a data-dependent mask: the block mask's classes are
/// loads, and a tile at a time each waits for the one before (a document
/// mask at 4% density searched ~60 empty tiles serially per query tile).
/// Each lane classifies one of 32 tiles at once; a ballot finds the first
/// visited one and a shuffle brings its class from the lane that read it.
std::pair<Value, Value> TensorCoreKernel::nextVisitedByWarp(Value from, Value nKT,
                                                            IRMapping &inv) {
  Type i8 = b_.getI8Type();
  Value lane32 = u32OfIdx(lane);
  Value all = cI32(-1);
  auto w = scf::WhileOp::create(b_, TypeRange{i32_, i32_, i32_},
                                ValueRange{from, cI32(0), cI32(0)});
  {
    OpBuilder::InsertionGuard guard(b_);
    SmallVector<Location> locs(3, b_.getLoc());
    Block *before = b_.createBlock(&w.getBefore(), {}, {i32_, i32_, i32_}, locs);
    Value j0 = before->getArgument(0);
    Value j = arith::AddIOp::create(b_, j0, lane32);
    Value inRange = cmp(arith::CmpIPredicate::ult, j, nKT);
    Value none = arith::ConstantOp::create(b_, b_.getI8IntegerAttr(abi::kEmpty));
    Value cls = blockMaskClass(j, inRange, inv);
    Value visit = arith::CmpIOp::create(b_, arith::CmpIPredicate::ne, cls, none);
    Value found = NVVM::VoteSyncOp::create(b_, i32_, all, visit,
                                           NVVM::VoteSyncKind::ballot);
    Value next = arith::AddIOp::create(b_, j0, cI32(32));
    Value more = andI(cmp(arith::CmpIPredicate::eq, found, cI32(0)),
                      cmp(arith::CmpIPredicate::ult, next, nKT));
    scf::ConditionOp::create(
        b_, more,
        ValueRange{j0, found, arith::ExtUIOp::create(b_, i32_, cls)});
    Block *after = b_.createBlock(&w.getAfter(), {}, {i32_, i32_, i32_}, locs);
    scf::YieldOp::create(
        b_, ValueRange{arith::AddIOp::create(b_, after->getArgument(0), cI32(32)),
                       after->getArgument(1), after->getArgument(2)});
  }
  Value j0 = w.getResult(0), found = w.getResult(1), cls = w.getResult(2);
  // 32 when none (llvm.cttz with zero defined; math.cttz has no NVVM
  // lowering).
  Value first =
      LLVM::CallIntrinsicOp::create(
          b_, i32_, b_.getStringAttr("llvm.cttz.i32"),
          ValueRange{found, arith::ConstantOp::create(b_, b_.getBoolAttr(false))})
          .getResult(0);
  Value at = arith::MinUIOp::create(b_, first, cI32(31));
  Value clsAt = gpu::ShuffleOp::create(b_, cls, at, cI32(32),
                                       gpu::ShuffleMode::IDX)
                    .getShuffleResult();
  Value any = cmp(arith::CmpIPredicate::ne, found, cI32(0));
  Value j = select(any, arith::AddIOp::create(b_, j0, first), nKT);
  Value full = arith::ConstantOp::create(b_, b_.getI8IntegerAttr(abi::kFull));
  return {j, select(any, arith::TruncIOp::create(b_, i8, clsAt), full)};
}

} // namespace attnc::codegen
