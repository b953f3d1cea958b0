//===- WgmmaProducer.cpp - The warp-specialized form's producer warpgroup ===//
//
// The sm_90a form's producer (TensorCoreLayout::producerWarps): after
// lowering its register budget it walks the item's visited tiles with the
// consumers' own search and fills stage after stage once the consumers
// have released it (`empty`): one lane issues K's and V's TMA boxes with an
// expect-tx arrival on `full` where the call's tensor maps are usable
// (contiguous K/V, or pages of a multiple of the tile's rows), else
// the warpgroup copies by cp.async, fences for the async proxy, meets its
// own barrier and arrives once. And the consumers' zeroing of a TMA-fed
// tail tile's rows past the sequence.
//
//===----------------------------------------------------------------------===//
#include "TensorCoreKernel.h"

using namespace mlir;

namespace attnc::codegen {

void TensorCoreKernel::produce(ArrayRef<Value> maps) {
  // TMA: the first producer warp (its lanes search the data mask's tiles
  // together), one lane issuing; the other three warps have nothing to do.
  // Each case walks the block's items itself (one loop of tiles in each).
  auto items = [&](bool byTma, bool pages) {
    if (persistent_) {
      forEachItem([&] { produceTiles(byTma, maps, pages); });
    } else {
      ringStage = ringPhases = cI32(0); // (each case's own loop)
      produceTiles(byTma, maps, pages);
    }
  };
  ifThenElse(
      useTma,
      [&] {
        ifThen(cmp(arith::CmpIPredicate::eq, warp, cIdx(L.warps)), [&] {
          ifThenElse(
              paged, [&] { items(true, /*pages=*/true); },
              [&] { items(true, /*pages=*/false); });
        });
      },
      [&] { items(false, /*pages=*/false); });
}

void TensorCoreKernel::produceTiles(bool byTma, ArrayRef<Value> maps,
                                    bool pages) {
  Value nKT32 = u32OfIdx(nKT);
  // The item's first row in each map's view: chunk (base % P) / 64, row
  // base / P, P the sequence stride. Paged, the KV head's: base h s1 (the
  // runtime checked that the page stride s0 is a multiple of P, and the
  // page size of the tile's rows: page p's rows start p s0 / P rows on).
  SmallVector<Value> chunk, row0, pageRows;
  if (byTma)
    for (int64_t m = 0; m < 2; ++m) {
      ArrayRef<Value> st = m ? e.vs : e.ks;
      Value base = pages ? mul(it.kvh, st[1]) : m ? it.vBase : it.kBase;
      chunk.push_back(u32OfIdx(divu(arith::RemUIOp::create(b_, base, st[2]), 64)));
      row0.push_back(arith::DivUIOp::create(b_, base, st[2]));
      if (pages)
        pageRows.push_back(arith::DivUIOp::create(b_, st[0], st[2]));
      else
        row0.back() = u32OfIdx(row0.back());
    }
  Value first = nextVisited(
      u32OfIdx(it.jlo), nKT32, inv).first;
  // (j, the stage's index, the `empty` phases' parities: a bit per stage;
  // the ring goes on from the previous item's)
  OpBuilder::InsertionGuard guard(b_);
  auto [w, after] = tileLoop(ValueRange{first, ringStage, ringPhases}, nKT32);
  ringStage = w.getResult(1);
  ringPhases = w.getResult(2);
  Value j32 = after[0], s = after[1], ph = after[2];
  // The stage's previous tile is released (its first use waits for the
  // phase before the barrier's first, which counts as complete).
  Value bit = arith::AndIOp::create(b_, arith::ShRUIOp::create(b_, ph, s), cI32(1));
  tma.waitParity(emptyBar(s), arith::XOrIOp::create(b_, bit, cI32(1)));
  Value base32 = arith::MulIOp::create(b_, s, cI32(L.stageElems));
  if (byTma) {
    ifThen(cmp(arith::CmpIPredicate::eq, lane, cIdx(0)), [&] {
      Value bar = fullBar(s);
      tma.arriveExpectTx(bar, BN * (D + DV) * 2);
      Value dst = arith::AddIOp::create(
          b_, smemAddr, arith::MulIOp::create(b_, base32, cI32(2)));
      Value row = arith::MulIOp::create(b_, j32, cI32(BN));
      // Paged: the tile is rows [row % pageSize, + BN) of one page.
      Value page, inPage;
      if (pages) {
        Value key = idxOfU32(row);
        page = pageOf(it, key);
        inPage = arith::RemUIOp::create(b_, key, ipAt(abi::kPageSize));
      }
      // K's tile, then V's, each one box: its 64-element chunks land as
      // the stage's atom columns (BN rows of 128 bytes, swizzled).
      for (int64_t m = 0; m < 2; ++m) {
        Value first =
            pages ? u32OfIdx(add(add(mul(page, pageRows[m]), row0[m]), inPage))
                  : arith::AddIOp::create(b_, row0[m], row);
        tma.load3d(arith::AddIOp::create(b_, dst, cI32(m ? L.vOffset * 2 : 0)),
                   maps[m], cI32(0), first, chunk[m], bar);
      }
    });
    tma.syncWarp();
  } else {
    // Every producer thread's copies, landed and fenced for the async
    // proxy (wgmma reads them there) before the producers' own barrier;
    // then one arrival for them all.
    loadTile(idxOfU32(j32), idxOfU32(base32), sub(tid, cIdx(TH)),
             L.producerWarps * 32);
    NVVM::CpAsyncCommitGroupOp::create(b_);
    NVVM::CpAsyncWaitGroupOp::create(b_, 0);
    wg.proxyFence();
    tma.namedBarrier(kProducerBarrier, L.producerWarps * 32);
    ifThen(cmp(arith::CmpIPredicate::eq, tid, cIdx(TH)),
           [&] { tma.arrive(fullBar(s)); });
    tma.syncWarp();
  }
  Value next = nextVisited(nextTile(j32), nKT32, inv).first;
  scf::YieldOp::create(
      b_, ValueRange{next,
                     nextStage(s),
                     arith::XOrIOp::create(b_, ph, arith::ShLIOp::create(
                                                       b_, cI32(1), s))});
}

void TensorCoreKernel::zeroTail(Value j32, Value base32) {
  // The stage is (Dqk + Dv) / 64 atom columns of BN rows of 64 elements;
  // a row past the sequence is zeroed in each, 16 bytes at a time (a whole
  // row: the swizzle only permutes chunks within it).
  Value j = idxOfU32(j32);
  Value live = sub(it.kvLen, mul(j, cIdx(BN)));
  Value base = idxOfU32(base32);
  auto vec = VectorType::get({8}, elem_);
  Value zeros = arith::ConstantOp::create(b_, vec, b_.getZeroAttr(vec));
  const int64_t units = (D + DV) / 64 * BN * 8;
  loop0(tid, cIdx(units), cIdx(TH), [&](Value u) {
    Value row = remu(divu(u, 8), BN);
    ifThen(cmp(arith::CmpIPredicate::uge, row, live), [&] {
      Value at = add(base, add(mul(divu(u, BN * 8), cIdx(BN * 64)),
                               add(mul(row, cIdx(64)), mul(remu(u, 8), cIdx(8)))));
      vector::StoreOp::create(b_, zeros, smem, ValueRange{at},
                              /*nontemporal=*/false, llvm::Align(16));
    });
  });
}

} // namespace attnc::codegen
