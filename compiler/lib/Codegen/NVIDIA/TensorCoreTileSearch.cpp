//===- TensorCoreTileSearch.cpp - The tensor-core forward's next tile ----===//
//
// The first KV tile at or after a given one that the work item visits, and
// its class, for the tensor-core forward's loop and the wgmma form's
// producer: tile by tile for closed-form masks, 32 tiles a step of the
// warp (a ballot, WarpTileSearch.h) for data-dependent ones.
//
//===----------------------------------------------------------------------===//
#include "TensorCoreKernel.h"
#include "WarpTileSearch.h"

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
/// loads, 32 tiles a step of the warp (WarpTileSearch.h).
std::pair<Value, Value> TensorCoreKernel::nextVisitedByWarp(Value from, Value nKT,
                                                            IRMapping &inv) {
  return firstVisitedByWarp(
      b_, u32OfIdx(lane), from, nKT,
      [&](Value j, Value inRange) { return blockMaskClass(j, inRange, inv); });
}

} // namespace attnc::codegen
