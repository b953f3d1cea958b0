//===- WgmmaTileLoop.cpp - The sm_90a form's products and overlapped loop -===//
//
// What the warp-specialized wgmma form's consumers do per KV tile beyond
// the algorithm's own ops (MmaSyncKernel.cpp lowers those): wait for the
// stage's `full` phase and release it on `empty`; S = Q K^T and O += P V on
// wgmma in the warpgroup's turn; and, with three stages, the overlapped
// loop (FlashAttention-3's intra-warpgroup overlap):
//
//   front(j0)                           S, softmax, O rescaled, P packed
//   for j in the visited tiles after j0:
//     issue S_j = Q K_j^T, then O += P_prev V_prev    (one turn, two groups)
//     wait for S_j only (wgmma.wait_group 1); front(j)'s softmax runs while
//     P_prev V_prev occupies the tensor cores; O's rescale waits for it
//     (wait_group 0) and releases the previous tile's stage
//   O += P_last V_last
//
// The flash body is lowered as it is: a tile's front is every op before
// the accumulate; the loop carries the rescaled accumulator and P's packed
// registers instead of the accumulate's result.
//
//===----------------------------------------------------------------------===//
#include "TensorCoreKernel.h"

using namespace mlir;

namespace attnc::codegen {

void TensorCoreKernel::consumersStart() {
  // Q has landed for every consumer once they pass the barrier (signed
  // where the scale is negative, after a barrier of its own: a thread flips
  // elements others copied); wgmma reads it through the async proxy.
  NVVM::CpAsyncWaitGroupOp::create(b_, 0);
  if (qSigned) {
    consumerBarrier();
    signSharedQ();
  }
  if (L.onesBytes())
    writeOnes();
  wg.proxyFence();
  consumerBarrier();
  if (pingPong())
    ifThen(arith::XOrIOp::create(b_, firstWarpgroup,
                                 arith::ConstantOp::create(b_, b_.getBoolAttr(true))),
           [&] { tma.namedArrive(cI32(kTurnBarrier), TH); });
}

Value TensorCoreKernel::awaitStage(Value j32, Value s, Value phases) {
  // The producer's loads into the stage have landed: its `full` phase, by
  // parity; then its rows past the sequence zeroed on the tail tile where
  // TMA brought them (the consumers' writes, fenced for the async proxy and
  // published by their barrier; cp.async zero-filled them).
  tma.waitParity(fullBar(s), arith::AndIOp::create(
                                 b_, arith::ShRUIOp::create(b_, phases, s), cI32(1)));
  // The tail: (j + 1) BN > kvLen (kvLen is live anyway; a full-tile count
  // would be one more register across the loop).
  Value end = idxOfU32(arith::MulIOp::create(b_, nextTile(j32), cI32(BN)));
  ifThen(andI(useTma, cmp(arith::CmpIPredicate::ugt, end, it.kvLen)), [&] {
    zeroTail(j32, arith::MulIOp::create(b_, s, cI32(L.stageElems)));
    wg.proxyFence();
    consumerBarrier();
  });
  return arith::XOrIOp::create(b_, phases, arith::ShLIOp::create(b_, cI32(1), s));
}

void TensorCoreKernel::releaseStage(Value s) {
  // A lane per consumer warp: `empty` counts the warps.
  ifThen(cmp(arith::CmpIPredicate::eq, lane, cIdx(0)),
         [&] { tma.arrive(emptyBar(s)); });
  tma.syncWarp();
}

SmallVector<Value> TensorCoreKernel::wgmmaScores(Value kBase) {
  // S = Q K^T for the warpgroup's 64 rows: one m64n{BN}k16 per 16 of Dqk,
  // both operands K-major from their atoms (32 bytes a k-step). The
  // warpgroup's first row: 64 rows of 64 elements into each atom.
  Value qRows = add(cIdx(L.qOffset), mul(warpgroupIdx, cIdx(64 * 64)));
  SmallVector<Value> acc(NT * 4, e.zeroF), aDescs, bDescs, vDescs;
  Value qAt = byteAddress(qRows), kAt = byteAddress(kBase);
  for (int64_t ks = 0; ks < KS; ++ks) {
    int64_t atom = ks / 4, within = (ks % 4) * 32;
    aDescs.push_back(wg.descriptor(qAt, atom * L.atomQ * 2 + within, 16, 1024));
    bDescs.push_back(wg.descriptor(kAt, atom * L.atomK * 2 + within, 16, 1024));
  }
  if (pendingPv)
    vDescs = pvDescriptors(add(stageAt(pendingPv->stage), cIdx(L.vOffset)));
  awaitTurn();
  wg.fence();
  for (int64_t ks = 0; ks < KS; ++ks)
    acc = wg.mma(acc, aDescs[ks], {}, bDescs[ks], NT * 4, elem_.isBF16(),
                 /*transB=*/false, /*accumulate=*/ks > 0);
  wg.commit();
  if (pendingPv) {
    // The previous tile's P V as the newer group: it stays in flight
    // through this tile's softmax.
    pendingPv->acc = issuePv(pendingPv->aRegs, pendingPv->acc, vDescs);
    wg.commit();
  }
  passTurn();
  return wg.wait(pendingPv ? 1 : 0, acc);
}

SmallVector<Value> TensorCoreKernel::pvOperands(ArrayRef<Value> P) {
  // P's accumulator fragments as the register A operand (the mma.sync A
  // layout, per warp): per 16 keys, rows g and g + 8 of keys 2 tig + {0, 1}
  // and of keys 8 + 2 tig + {0, 1}.
  SmallVector<Value> out;
  for (int64_t kk = 0; kk < KP; ++kk)
    for (auto [nt, c] : {std::pair<int64_t, int64_t>{2 * kk, 0},
                         {2 * kk, 2},
                         {2 * kk + 1, 0},
                         {2 * kk + 1, 2}}) {
      Value r = packF32Pair(P[nt * 4 + c], P[nt * 4 + c + 1]);
      if (r.getType() != i32_)
        r = LLVM::BitcastOp::create(b_, i32_, r);
      out.push_back(r);
    }
  return out;
}

SmallVector<Value> TensorCoreKernel::pvDescriptors(Value vBase) {
  // V MN-major from its atoms: 16 keys a k-step (2048 bytes), atoms along
  // Dv `lbo` apart.
  SmallVector<Value> descs;
  Value vAt = byteAddress(vBase);
  for (int64_t kk = 0; kk < KP; ++kk)
    descs.push_back(wg.descriptor(vAt, kk * 16 * 128, L.atomV * 2, 1024));
  // The sums' B, the same ones for every 16 keys: two K-major core
  // matrices 128 bytes apart (whichever of lbo and sbo steps along K).
  if (L.sumsInAccumulator)
    descs.push_back(wg.descriptor(onesAddress(), 0, 128, 128,
                                  /*swizzle128=*/false));
  return descs;
}

Value TensorCoreKernel::onesAddress() {
  return arith::AddIOp::create(b_, smemAddr, cI32(L.onesOffset()));
}

void TensorCoreKernel::writeOnes() {
  // 256 bytes of 1.0 pairs, 16 bytes by each of the first 16 consumer
  // threads (before their proxy fence and barrier: wgmma reads them
  // through the async proxy).
  auto wg =
      gpu::AddressSpaceAttr::get(b_.getContext(), gpu::AddressSpace::Workgroup);
  Value ones =
      memref::ViewOp::create(b_,
                             MemRefType::get({L.onesBytes() / 2}, elem_,
                                             MemRefLayoutAttrInterface(), wg),
                             smemBytes, cIdx(L.onesOffset()), ValueRange{});
  auto vec = VectorType::get({8}, elem_);
  Value v = arith::ConstantOp::create(
      b_, vec, DenseElementsAttr::get(vec, b_.getFloatAttr(elem_, 1.0)));
  ifThen(cmp(arith::CmpIPredicate::ult, tid, cIdx(16)), [&] {
    vector::StoreOp::create(b_, v, ones, ValueRange{mul(tid, cIdx(8))},
                            /*nontemporal=*/false, llvm::Align(16));
  });
}

SmallVector<Value> TensorCoreKernel::issuePv(ArrayRef<Value> aRegs,
                                             ArrayRef<Value> o,
                                             ArrayRef<Value> descs) {
  // O's n-tiles, then (row_sums) the sums' m64n8 with B = ones.
  SmallVector<Value> acc(o.begin(), o.begin() + DT * 4),
      sums(o.begin() + DT * 4, o.end());
  for (int64_t kk = 0; kk < KP; ++kk) {
    acc = wg.mma(acc, Value(), aRegs.slice(kk * 4, 4), descs[kk], DT * 4,
                 elem_.isBF16(), /*transB=*/true, /*accumulate=*/true);
    if (!sums.empty())
      sums = wg.mma(sums, Value(), aRegs.slice(kk * 4, 4), descs[KP], 4,
                    elem_.isBF16(), /*transB=*/false, /*accumulate=*/true);
  }
  acc.append(sums);
  return acc;
}

SmallVector<Value> TensorCoreKernel::wgmmaPv(ArrayRef<Value> aRegs,
                                             ArrayRef<Value> o, Value vBase) {
  // Every A register is packed and every descriptor formed before the one
  // fence: registers written between it and a wgmma that reads them would
  // make ptxas insert a warpgroup.arrive per k-step.
  SmallVector<Value> descs = pvDescriptors(vBase);
  awaitTurn();
  wg.fence(); // P and O were written by the warps' own code
  SmallVector<Value> acc = issuePv(aRegs, o, descs);
  wg.commit();
  passTurn();
  return wg.wait(0, acc, aRegs);
}

bool TensorCoreKernel::overlapFits() {
  if (DV <= 64)
    return true;
  // (score and kv: what varies per element of a row)
  return !gathersVarying(v_.getScoreBlock(), {0, 4});
}

std::optional<std::pair<flash::AccumulateOp, unsigned>>
TensorCoreKernel::overlappable(flash::ForTilesOp loop) {
  Block &body = loop.getBody().front();
  auto yield = cast<flash::YieldOp>(body.getTerminator());
  if (body.getOperations().size() < 2)
    return std::nullopt;
  auto acc = dyn_cast<flash::AccumulateOp>(*std::prev(Block::iterator(yield)));
  if (!acc || acc.getKind() != "pv" || !acc->hasOneUse())
    return std::nullopt;
  std::optional<unsigned> pos;
  for (OpOperand &u : acc->getUses())
    if (u.getOwner() == yield.getOperation())
      pos = u.getOperandNumber();
  if (!pos)
    return std::nullopt;
  // The accumulator added to: the loop's own, rescaled after the product
  // (the rescale is where the previous tile's P V is waited for), that
  // rescale read by the accumulate only.
  auto scale = acc.getAcc().getDefiningOp<flash::ScaleAccOp>();
  Value arg = body.getArgument(1 + *pos);
  if (!scale || scale.getAcc() != arg || !arg.hasOneUse() ||
      !scale->hasOneUse() || scale->getBlock() != &body)
    return std::nullopt;
  bool productFirst = false;
  for (Operation &op : body) {
    if (&op == scale.getOperation())
      break;
    productFirst |= isa<flash::ProductOp>(op);
  }
  if (!productFirst)
    return std::nullopt;
  return std::make_pair(acc, *pos);
}

LogicalResult TensorCoreKernel::lowerOverlappedLoop(flash::ForTilesOp loopOp,
                                                    flash::AccumulateOp acc,
                                                    unsigned accPos) {
  Block &body = loopOp.getBody().front();
  auto yield = cast<flash::YieldOp>(body.getTerminator());
  Value nKT32 = u32OfIdx(nKT);
  Value first = nextVisited(u32OfIdx(it.jlo), nKT32, inv).first;
  consumersStart();

  // The state between two fronts: (the next tile, its stage, the `full`
  // phases' parities, the stage of the tile just done, its rescaled O, its
  // P packed, the other iteration values), all in registers.
  const size_t kLoopState = 4;
  Value accArg = body.getArgument(1 + accPos);
  SmallVector<size_t> widths;
  for (Value v : loopOp.getInits())
    widths.push_back(regs[v].size());
  const size_t oWidth = widths[accPos], pWidth = static_cast<size_t>(KP * 4);
  auto others = [&](auto valueRegs) {
    SmallVector<Value> out;
    for (unsigned k = 0; k < widths.size(); ++k)
      if (k != accPos)
        out.append(valueRegs(k));
    return out;
  };
  LogicalResult result = success();
  // Tile j's front in stage s: the algorithm's ops before the accumulate,
  // with the body's values other than O from `iter`.
  auto front = [&](Value j32, Value s, Value phases,
                   ArrayRef<Value> iter) -> SmallVector<Value> {
    Value ph = awaitStage(j32, s, phases);
    Value next = nextVisited(nextTile(j32), nKT32, inv).first;
    tile = tileAt(it, idxOfU32(j32), inv);
    stageBase = stageAt(s);
    size_t at = 0;
    for (unsigned k = 0; k < widths.size(); ++k)
      if (k != accPos) {
        regs[body.getArgument(1 + k)] =
            SmallVector<Value>(iter.slice(at, widths[k]));
        at += widths[k];
      }
    if (failed(lowerOps(body.begin(), Block::iterator(acc))))
      result = failure();
    SmallVector<Value> out = {next, nextStage(s), ph, s};
    out.append(regs[acc.getAcc()]);
    out.append(pvOperands(regs[acc.getScores()]));
    out.append(others([&](unsigned k) { return regs[yield.getValues()[k]]; }));
    return out;
  };

  // The first visited tile: its products waited for in turn (nothing
  // before it to overlap).
  SmallVector<Value> initOthers =
      others([&](unsigned k) { return regs[loopOp.getInits()[k]]; });
  SmallVector<Value> none = {first, ringStage, ringPhases, ringStage};
  none.append(regs[loopOp.getInits()[accPos]]);
  none.append(SmallVector<Value>(pWidth, cI32(0)));
  none.append(initOthers);
  Value any = cmp(arith::CmpIPredicate::ult, first, nKT32);
  SmallVector<Value> state = ifYield(any, none, [&] {
    regs[accArg] = regs[loopOp.getInits()[accPos]];
    return front(first, ringStage, ringPhases, initOthers);
  });

  scf::WhileOp w;
  {
    OpBuilder::InsertionGuard g(b_);
    ValueRange a;
    std::tie(w, a) = tileLoop(state, nKT32);
    pendingPv = PendingPv{SmallVector<Value>(a.slice(kLoopState, oWidth)),
                          SmallVector<Value>(a.slice(kLoopState + oWidth, pWidth)),
                          a[3], accArg};
    SmallVector<Value> out =
        front(a[0], a[1], a[2],
              SmallVector<Value>(a.drop_front(kLoopState + oWidth + pWidth)));
    if (pendingPv) {
      pendingPv.reset();
      return loopOp.emitOpError("the overlapped loop's accumulator is not "
                                "rescaled after the scores' product");
    }
    scf::YieldOp::create(b_, out);
  }
  // The last tile's P V, in its turn.
  ValueRange fin = w.getResults();
  ringStage = fin[1];
  ringPhases = fin[2];
  SmallVector<Value> o = ifYield(any, fin.slice(kLoopState, oWidth), [&] {
    SmallVector<Value> sum =
        wgmmaPv(SmallVector<Value>(fin.slice(kLoopState + oWidth, pWidth)),
                SmallVector<Value>(fin.slice(kLoopState, oWidth)),
                add(stageAt(fin[3]), cIdx(L.vOffset)));
    releaseStage(fin[3]);
    return sum;
  });
  if (pingPong())
    ifThen(firstWarpgroup, [&] { tma.namedBarrier(kTurnBarrier, TH); });
  size_t at = kLoopState + oWidth + pWidth;
  for (unsigned k = 0; k < widths.size(); ++k) {
    if (k == accPos) {
      regs[loopOp.getResult(k)] = o;
      continue;
    }
    regs[loopOp.getResult(k)] = SmallVector<Value>(fin.slice(at, widths[k]));
    at += widths[k];
  }
  return result;
}

} // namespace attnc::codegen
