//===- MmaSyncBackwardKeyValue.cpp - The tensor-core _bwd_kv ---------------===//
//
// `_bwd_kv` of the tensor-core GPU backward (MmaSyncBackwardKernel.cpp
// describes the form): items (b, KV head, KV tile), K and V staged once;
// per query head of the group and visited Q tile, Q, dO, LSE, delta and
// LSE log2 e staged; per 16-column chunk of the Q tile, S^T and dP^T on
// the tensor cores, P and dX per pair (exact tiles without keep flags,
// their exponent one FMA where the tile's vote allows, score_mod's and
// score_grad's diagonal values once per kv - q), then dV += P^T dO and
// dK += dX^T Q.
//
//===----------------------------------------------------------------------===//
#include "MmaSyncBackward.h"

using namespace mlir;

namespace attnc::codegen {

void TensorCoreBackward::keyValueChunk(const PairSection &sec,
                                       const Entry &e, const Item &it,
                                       const Tile &t, Value exact, int64_t c0,
                                       ArrayRef<Value> keyLive,
                                       ArrayRef<Value> kv, Value bI32,
                                       Value hI32, Frags &dk, Frags &dv) {
  const TileLayout l = keyValueLayout();
  const int64_t kS = l.k, vS = l.v, qS = l.q, oS = l.dO;
  SmallVector<Value> s =
      flatten(rowsByCols(kS, ldQ, D / 16, qS + c0 * ldQ, ldQ, C, qoOff_));
  SmallVector<Value> dp =
      flatten(rowsByCols(vS, ldO, DV / 16, oS + c0 * ldO, ldO, C, qoOff_));
  SmallVector<Value> qpos(s.size()), lse(s.size()), delta(s.size());
  for (size_t at = 0; at < s.size(); ++at) {
    Value r = colOf(c0, int64_t(at));
    qpos[at] =
        arith::IndexCastOp::create(b_, i32_, add(it.qpos0, add(it.r0, r)));
    lse[at] = load(fs, fsAt(r));
    delta[at] = load(fs, fsAt(add(r, cIdx(R))));
  }
  // The element's diagonal values, at their first use in the tile, before
  // the chunk's two versions (both use them; the next chunk shares two).
  SmallVector<std::pair<IRMapping, IRMapping> *> diag(s.size(), nullptr);
  if (diagBase_)
    for (size_t at = 0; at < s.size(); ++at)
      diag[at] = &tileDiagonal(8 * int64_t((at & 3) >> 1) - c0 -
                               8 * int64_t(at / 4) - int64_t(at & 1));
  // The chunk's query columns' values of (b, h, q) alone: column j = 2
  // (at / 4) + at % 2 of the thread's.
  SmallVector<SideValues> querySide;
  if (hoistsQueries_)
    for (size_t at : {0, 1, 4, 5})
      querySide.push_back(queryValues(bI32, hI32, qpos[at]));
  // Where score_mod has separable logs, an exact chunk takes them (its
  // unflagged path) when every factor of the warp's queries and keys is
  // in range (one vote); else the flagged path, per pair.
  if (!separable_.empty()) {
    Value inRange = keyLogsInRange_;
    for (const SideValues &q : querySide)
      inRange = arith::AndIOp::create(b_, inRange, logsInRange(q, true));
    exact = arith::AndIOp::create(
        b_, exact,
        NVVM::VoteSyncOp::create(b_, b_.getI1Type(), cI32(-1), inRange,
                                 NVVM::VoteSyncKind::all));
  }
  // P and dX of the chunk's pairs, with or without the flags of kept pairs.
  auto pairTerms = [&](bool flagged) {
    // The separable logs' terms, of the chunk's queries (and the keys').
    SmallVector<SmallVector<Value>> queryTerms;
    if (!flagged && !separable_.empty())
      for (const SideValues &q : querySide)
        queryTerms.push_back(logTerms(q, true));
    SmallVector<Value> keep;
    if (flagged) {
      // A query with no key (LSE -inf, also rows past the end) has P = 0
      // everywhere.
      SmallVector<Value> base(s.size());
      for (size_t at = 0; at < s.size(); ++at)
        base[at] = arith::AndIOp::create(
            b_, keyLive[(at & 3) >> 1],
            arith::CmpFOp::create(b_, arith::CmpFPredicate::ONE, lse[at],
                                  e.ninf));
      keep = keepFlags(
          t, base,
          [&](int64_t at) {
            return std::pair<Value, Value>{qpos[at], kv[(at & 3) >> 1]};
          },
          bI32, hI32);
    }
    SmallVector<Value> pdx(2 * s.size());
    for (size_t at = 0; at < s.size(); ++at) {
      int64_t k = (at & 3) >> 1;
      // The pair's key's sums (the item's slots are bound once).
      for (auto [i, a] : llvm::enumerate(kinds_.cols))
        accumulateSlots_[a] = {sums_, cIdx(keySlot(i, k))};
      auto grad = [&] {
        size_t j = 2 * (at / 4) + (at & 1);
        bindPair(querySide.empty() ? nullptr : &querySide[j],
                 keySide_.empty() ? nullptr : &keySide_[k], diag[at],
                 queryTerms.empty() ? SmallVector<Value>()
                                    : pairLogs(queryTerms[j], keyLogTerms_[k]));
        std::pair<Value, Value> pd = pairValues(sec, e, s[at], dp[at], lse[at],
                                                delta[at], bI32, hI32,
                                                qpos[at], kv[k]);
        unbindPair();
        return SmallVector<Value>{pd.first, pd.second};
      };
      SmallVector<Value> pd;
      if (!flagged) { // every pair kept: its accumulates too
        // Its exponent one FMA (the tile's rows passed smallExponents).
        lseLog2e_ = load(fs, fsAt(add(colOf(c0, int64_t(at)), cIdx(2 * R))));
        pd = grad();
        lseLog2e_ = nullptr;
      } else if (!kinds_.pairs.empty() || !kinds_.rows.empty()) {
        // Only kept pairs add into the gradient buffer.
        pd = ifYield(keep[at], ValueRange{e.zeroF, e.zeroF}, grad);
      } else {
        // Sums (if any) add 0 for a pair not kept: no branch per pair.
        accumulateKeep_ = keep[at];
        pd = grad();
        accumulateKeep_ = nullptr;
        pd = {select(keep[at], pd[0], e.zeroF),
              select(keep[at], pd[1], e.zeroF)};
      }
      pdx[at] = pd[0];
      pdx[s.size() + at] = pd[1];
    }
    return pdx;
  };
  SmallVector<Type> f32s(2 * s.size(), f32_);
  SmallVector<Value> pdx = ifElseYield(
      exact, f32s, [&] { return pairTerms(false); },
      [&] { return pairTerms(true); });
  ArrayRef<Value> p = ArrayRef<Value>(pdx).take_front(s.size()),
                  dx = ArrayRef<Value>(pdx).drop_front(s.size());
  accumulate(dv, p, C, oS + c0 * ldO, ldO, DV, qoOff_);
  accumulate(dk, dx, C, qS + c0 * ldQ, ldQ, D, qoOff_);
}

LogicalResult TensorCoreBackward::lowerKeyValueGrads(flash::KernelOp kernel,
                                                     gpu::GPUModuleOp module) {
  FailureOr<PairSection> found = backwardSection(kernel, "bwd_kv");
  if (failed(found))
    return failure();
  PairSection sec = *found;
  StringRef name = kernel.getSymName();
  OpBuilder::InsertionGuard guard(b_);
  Entry e;
  Extra x;
  begin(module, name, e, x, 1 + stages_, stages_);
  if (accumulates()) {
    kinds_ = classifyAccumulates(v_);
    // A query's accumulates are _bwd_q's where its score_grad says so.
    if (sec.dx.getAccumulate() == "others")
      kinds_.rows.clear();
    if (int64_t n = keySlot(kinds_.cols.size(), 0))
      sums_ = alloca(n);
    for (auto [i, a] : llvm::enumerate(kinds_.item))
      accumulateSlots_[a] = {sums_, cIdx(int64_t(i))};
  }
  const bool shareDiagonals = diagonalsShared();
  beginSides();
  Value c0 = cIdx(0), c1 = cIdx(1);
  const TileLayout l = keyValueLayout();
  const int64_t kS = l.k, vS = l.v, qS = l.q, oS = l.dO;
  KeyTile kt = decodeKeyTile(blockItem(x));
  ifThen(arith::CmpIOp::create(b_, arith::CmpIPredicate::sgt, kt.cols, c0), [&] {
    Item first = queryItem(e, kt, mul(kt.kvh, e.G), c0);
    auto keyRow = [&](Value base, Value stride, Value c) {
      return add(base, mul(add(kt.kv0, c), stride));
    };
    auto kStart = [&](Value c) { return keyRow(first.kBase, e.ks[2], c); };
    auto vStart = [&](Value c) { return keyRow(first.vBase, e.vs[2], c); };
    stageTile(kS, ldQ, D, kt.cols, e.k, e.ks[3], vectorsKV,
              {kStart, kStart(cIdx(0)), e.ks[2]});
    stageTile(vS, ldO, DV, kt.cols, e.v, e.vs[3], vectorsKV,
              {vStart, vStart(cIdx(0)), e.vs[2]});
    // Landed before any Q tile's barrier publishes them (and before the
    // block exits when it visits none).
    awaitTiles();
    // This thread's keys g and g + 8 of its warp's 16.
    SmallVector<Value> keyLive(2), key(2), kv(2);
    for (int64_t k = 0; k < 2; ++k) {
      Value c = add(add(mul(warp, cIdx(16)), g), cIdx(8 * k));
      keyLive[k] = arith::CmpIOp::create(b_, arith::CmpIPredicate::slt, c, kt.cols);
      key[k] = add(kt.kv0, minI(c, sub(kt.cols, c1)));
      kv[k] = keyPos(kt.kvpos0, key[k]);
    }
    const int64_t nK = D / 8 * 4;
    SmallVector<Value> init((D + DV) / 8 * 4, e.zeroF);
    scf::ForOp heads = loop(c0, e.G, 1, init, [&](Value gi, ValueRange acc0) {
      Value h = add(mul(kt.kvh, e.G), gi);
      Value hI32 = headIndex(h);
      Value bI32 = arith::IndexCastOp::create(b_, i32_, kt.b);
      IRMapping inv = maskInvariants(kt, hI32);
      if (sums_)
        zeroSums();
      // The keys' values of (b, h, kv) alone, for the head's tiles.
      keySide_.clear();
      keyLogTerms_.clear();
      if (hoistsKeys_)
        for (int64_t k = 0; k < 2; ++k)
          keySide_.push_back(keyValues(bI32, hI32, kv[k]));
      // Their separable logs' lg2 y, and whether every y is in range.
      if (!separable_.empty()) {
        keyLogsInRange_ =
            arith::AndIOp::create(b_, logsInRange(keySide_[0], false),
                                  logsInRange(keySide_[1], false));
        for (const SideValues &k : keySide_)
          keyLogTerms_.push_back(logTerms(k, false));
      }
      // The class is the block's: the barriers are reached by all or none.
      Item it; // the tile's, from its tileOf (the last one called)
      // Q tile `it`'s Q, dO, LSE and delta into the stage at (off, fsOff).
      auto stageQuery = [&](Value off, Value fsOff) {
        stageQueryTile(
            e, qS, oS, it.rows,
            [&](ArrayRef<Value> st, Value r) {
              return offset4(st, kt.b, h, add(it.r0, r));
            },
            [&](Value r) {
              Value row = add(it.r0, r);
              return std::pair<Value, Value>{
                  load(e.lse, offset4(e.ls, kt.b, h, row)),
                  load(x.delta, deltaAt(e, kt.b, h, row))};
            },
            /*affine=*/true, off, fsOff);
      };
      // The tile's products on its staged rows (qoOff_, fsOff_).
      auto tileBody = [&](const Tile &t, ValueRange acc) {
        Frags dk = unflatten(acc.take_front(nK)),
              dv = unflatten(acc.drop_front(nK));
        // Exact, and the Q tile's exponents within the FMA's bound (one
        // vote over its rows' LSE log2 e, the same in every warp): the
        // chunks' unflagged path (else the flagged one, for every tile).
        SmallVector<Value> rowsL;
        for (int64_t j = 0; j < R; j += 32)
          rowsL.push_back(load(
              fs,
              fsAt(add(minI(add(laneId, cIdx(j)), cIdx(R - 1)), cIdx(2 * R)))));
        Value exact = arith::AndIOp::create(b_, exactTile(t, it.rows),
                                            smallExponents(rowsL));
        // The tile's diagonal values, from key g's kv - q at column 2 tig.
        diagBase_ = nullptr;
        if (shareDiagonals)
          beginTileDiagonals(
              arith::SubIOp::create(
                  b_, kv[0],
                  arith::IndexCastOp::create(b_, i32_,
                                             add(it.qpos0, add(it.r0, tig2)))),
              bI32, hI32);
        for (int64_t from = 0; from < R; from += C)
          keyValueChunk(sec, e, it, t, exact, from, keyLive, kv, bI32, hI32, dk,
                        dv);
        SmallVector<Value> next = flatten(dk);
        next.append(flatten(dv));
        return next;
      };
      Value lane32 = arith::IndexCastUIOp::create(b_, i32_, laneId);
      auto tileOf = [&](Value qt, Value cls) {
        it = queryItem(e, kt, h, qt, &first);
        return tileAt(it, kt.kt, inv, {}, cls);
      };
      auto offsets = [&](Value stage) {
        Value st = arith::IndexCastUIOp::create(b_, b_.getIndexType(), stage);
        return std::pair<Value, Value>{mul(st, cIdx(keyValueStage())),
                                       mul(st, cIdx(3 * R))};
      };
      SmallVector<Value> qtiles =
          stages_ == 2
              ? forVisitedTilesStaged(
                    c0, e.nQT, acc0, lane32, tileOf,
                    [&](Value, const Tile &, Value stage) {
                      auto [off, fsOff] = offsets(stage);
                      stageQuery(off, fsOff);
                    },
                    [&](Value, const Tile &t, Value stage, ValueRange acc) {
                      std::tie(qoOff_, fsOff_) = offsets(stage);
                      SmallVector<Value> next = tileBody(t, acc);
                      qoOff_ = fsOff_ = nullptr;
                      // Every warp is done with the stage before it is
                      // refilled.
                      gpu::BarrierOp::create(b_);
                      return next;
                    })
              : forVisitedTiles(c0, e.nQT, acc0, lane32, tileOf,
                                [&](Value, const Tile &t, ValueRange acc) {
                                  // Every warp is done with the previous Q
                                  // tile.
                                  gpu::BarrierOp::create(b_);
                                  stageQuery({}, {});
                                  awaitTiles();
                                  gpu::BarrierOp::create(b_);
                                  return tileBody(t, acc);
                                });
      if (sums_)
        addSums(bI32, hI32, kv, keyLive);
      return qtiles;
    });
    accumulateSlots_.clear();
    ValueRange fin = heads.getResults();
    storeRows(unflatten(fin.take_front(nK)), x.dk, x.dks,
              [&](int64_t k) { return offset4(x.dks, kt.b, kt.kvh, key[k]); },
              keyLive, e.scale);
    storeRows(unflatten(fin.drop_front(nK)), x.dv, x.dvs,
              [&](int64_t k) { return offset4(x.dvs, kt.b, kt.kvh, key[k]); },
              keyLive);
  });
  // Keys past this sequence's length (up to the K/V capacity) get 0.
  ifThen(arith::CmpIOp::create(b_, arith::CmpIPredicate::slt, tid, cIdx(R)),
         [&] { zeroKeyPastLength(kt, x, tid); });
  gpu::ReturnOp::create(b_);
  return success();
}

} // namespace attnc::codegen
