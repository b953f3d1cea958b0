//===- MmaSyncBackwardKernel.cpp - The GPU backward on tensor cores -------===//
//
// The tensor-core form of the GPU backward (f16/bf16, mma.sync m16n8k16,
// f32 accumulators), for head dims that are multiples of 16. A block has
// R / 16 warps over R rows (R = blockM = blockN: 64, 32 or 16, the most
// whose four tiles fit the target's dynamic shared memory); each warp owns
// 16 of them. Tiles are row-major in shared memory with a pitch of width +
// 8 elements (rows 16-byte aligned for ldmatrix, 8 rows on 8 bank groups).
// Each kernel's streamed tiles (K and V in _bwd_q; Q, dO and their rows'
// values in _bwd_kv) go through a ring of two stages where a third pair
// of tiles fits (spec.stages, the name's s2): the next visited tile's
// copies are issued before this one's are waited for
// (GpuBackwardBuilder::forVisitedTilesStaged); else one stage (s1).
//
//   <name>_bwd_q   items (b, head, Q tile): Q and dO stay in shared memory;
//                  per visited KV tile (K, V staged) a warp's rows get
//                  S = Q K^T and dP = dO V^T (B from ldmatrix), dX per
//                  element (BackwardBuilder::pairValues), then
//                  dQ += dX K (dX in registers as A, K by ldmatrix.trans).
//   <name>_bwd_kv  items (b, KV head, KV tile): K and V stay in shared
//                  memory; per query head of the group and visited Q tile
//                  (Q, dO, LSE and delta staged) a warp's keys get S^T =
//                  K Q^T and dP^T = V dO^T, P and dX per element, then
//                  dV += P^T dO and dK += dX^T Q; score_grad's accumulates
//                  summed in registers where their element reads no query
//                  (added once per query head), else atomic adds per kept
//                  pair.
//
// Both kernels take a tile's R columns C = 16 at a time: S, dP, P and dX
// of one chunk are live at once beside the accumulators, not of all R
// (at D = 64, R = 64: _bwd_q 242 -> 168 registers, and the spills of
// _bwd_kv gone but for synaptic's; it costs a third more ldmatrix, the
// first products' A fragments reloaded per chunk).
// Tiles are staged by 16-byte cp.async (the thread's share unrolled, rows
// past the end zero-filled without a read) where the tensor's rows are
// contiguous and 16-byte aligned (checked once per block), else element by
// element; the H100 (2026-11-26) showed the element-by-element staging to
// be most of the backward's time at D=128 (docs/kernels.md).
// An exact tile (full, every row and key in range: every pair kept, every
// row's LSE finite) runs its pair terms without keep flags or selects; P
// is on ex2.approx.ftz (GpuBackwardBuilder::probability), and dX leaves
// out `scale`, which dK and dQ take once at their store (static model,
// sm_80 bf16, full D=64: _bwd_kv 1022 -> 635 instructions per tile,
// _bwd_q 722 -> 432).
// P and dX are rounded to the element type as the second products' A
// operands, as FlashAttention-2 rounds P and dS; everything else is f32.
// The operands, items and the order of the two kernels are the SIMT form's
// (GpuBackwardBuilder.h). This file: the builder's staging and fragment
// helpers and `_bwd_q`, and the form's registry entry; `_bwd_kv` is
// MmaSyncBackwardKeyValue.cpp, what the pair terms read computed ahead
// and the gradient sums MmaSyncBackwardPairs.cpp, the builder's class
// MmaSyncBackward.h.
//
//===----------------------------------------------------------------------===//
#include "attnc/Codegen/KernelForm.h"
#include "attnc/Codegen/TileConfigTable.h"
#include "MmaSyncBackward.h"

using namespace mlir;

namespace attnc::codegen {

gpu::GPUFuncOp TensorCoreBackward::begin(gpu::GPUModuleOp module,
                                         StringRef name, Entry &e, Extra &x,
                                         int64_t tilePairs, int64_t rowStages) {
  gpu::GPUFuncOp fn = createEntry(
      module, name,
      {{tilePairs * R * (ldQ + ldO), elem_}, {rowStages * 3 * R, f32_}}, e, x,
      /*dynamic=*/true);
  fn.setKnownBlockSizeAttr(b_.getDenseI32ArrayAttr({int32_t(TH), 1, 1}));
  smem = shared_[0];
  fs = shared_[1];
  tid = gpu::ThreadIdOp::create(b_, gpu::Dimension::x);
  Value lane = laneId = arith::RemUIOp::create(b_, tid, cIdx(32));
  warp = arith::DivUIOp::create(b_, tid, cIdx(32));
  g = arith::DivUIOp::create(b_, lane, cIdx(4));
  tig2 = mul(arith::RemUIOp::create(b_, lane, cIdx(4)), cIdx(2));
  Value mat = arith::DivUIOp::create(b_, lane, cIdx(8));
  Value r8 = arith::RemUIOp::create(b_, lane, cIdx(8));
  Value lo = arith::RemUIOp::create(b_, mat, cIdx(2)),
        hi = arith::DivUIOp::create(b_, mat, cIdx(2));
  // ldmatrix x4: lane l gives the address of row l % 8 of matrix l / 8.
  // A (16 x 16 at the warp's rows): matrices (rows 0-7 | 8-15) x (k 0-7 |
  // 8-15), rows first. B (n x k rows): (n 0-7, k 0-7), (n 0-7, k 8-15),
  // (n 8-15, k 0-7), (n 8-15, k 8-15). B.trans (k x n rows): (k 0-7 | 8-15)
  // x (n 0-7 | 8-15), k first: A's pattern without the warp's offset.
  aLane = add(add(mul(warp, cIdx(16)), mul(lo, cIdx(8))), r8);
  aCol = mul(hi, cIdx(8));
  bLane = add(mul(hi, cIdx(8)), r8);
  bCol = mul(lo, cIdx(8));
  tLane = add(mul(lo, cIdx(8)), r8);
  zeroE = arith::ConstantOp::create(b_, b_.getZeroAttr(elem_));
  vectorsQO = arith::AndIOp::create(b_, rowsInVectors(e.q, e.qs, 8, 16),
                                    rowsInVectors(e.o, e.os, 8, 16));
  vectorsKV = arith::AndIOp::create(b_, rowsInVectors(e.k, e.ks, 8, 16),
                                    rowsInVectors(e.v, e.vs, 8, 16));
  return fn;
}

void TensorCoreBackward::stage(int64_t base, int64_t ld, int64_t width,
                               Value count,
                               function_ref<Value(Value, Value)> at,
                               Value baseOff) {
  stageRows(smem, R, width, count, tid, TH, at, [&](Value r, Value d) {
    Value b = baseOff ? add(baseOff, cIdx(base)) : cIdx(base);
    return add(b, add(mul(r, cIdx(ld)), d));
  });
}

void TensorCoreBackward::stageTile(int64_t base, int64_t ld, int64_t width,
                                   Value count, Value src, Value dStride,
                                   Value vectors, const RowPlace &rows,
                                   Value baseOff) {
  const int64_t chunks = width / 8, total = R * chunks;
  // `live` null: a row of a full tile, copied whole.
  auto copy = [&](Value dst, Value from, Value live) {
    nvgpu::DeviceAsyncCopyOp::create(
        b_, nvgpu::DeviceAsyncTokenType::get(ctx_), smem, ValueRange{dst}, src,
        ValueRange{from}, b_.getIndexAttr(8),
        live ? select(live, cIdx(8), cIdx(0)) : cIdx(8), b_.getUnitAttr());
  };
  auto slt = [&](Value a, Value c) {
    return arith::CmpIOp::create(b_, arith::CmpIPredicate::slt, a, c);
  };
  // Which rows exist, in i32: the row count is at most R (and above -2^31:
  // positions are below 2^30) and a row index below R, so the compares are
  // exact where 64-bit ones took two instructions each and kept the rows'
  // high words live across the tile loop. A full tile (every tile but the
  // sequence's last) takes its copies without them: its own version, as
  // the forward's copies have.
  auto i32Of = [&](Value x) { return arith::IndexCastOp::create(b_, i32_, x); };
  Value count32 = i32Of(count);
  auto versions = [&](function_ref<void(bool tail)> copies) {
    ifThenElse(
        arith::CmpIOp::create(b_, arith::CmpIPredicate::eq, count32, cI32(R)),
        [&] { copies(false); }, [&] { copies(true); });
  };
  auto liveRow = [&](bool tail, Value row) {
    return tail ? slt(i32Of(row), count32) : Value();
  };
  auto elementWise = [&](function_ref<Value(Value, Value)> read) {
    stage(base, ld, width, count, read, baseOff);
  };
  if (rows.stride && TH % chunks == 0) {
    // Affine rows and whole rows per pass of the threads: copy i is the
    // thread's first moved down i * rowStep rows (same chunk).
    const int64_t rowStep = TH / chunks;
    ifThenElse(
        vectors,
        [&] {
          Value row = arith::DivUIOp::create(b_, tid, cIdx(chunks));
          Value ch8 = mul(arith::RemUIOp::create(b_, tid, cIdx(chunks)), cIdx(8));
          Value first = add(add(rows.first, mul(row, rows.stride)), ch8);
          Value step = mul(rows.stride, cIdx(rowStep));
          Value to = add(mul(row, cIdx(ld)), ch8);
          if (baseOff)
            to = add(to, baseOff);
          versions([&](bool tail) {
            Value from = first;
            for (int64_t i = 0; i * TH < total; ++i) {
              Value at = add(to, cIdx(base + i * rowStep * ld));
              Value live = liveRow(tail, add(row, cIdx(i * rowStep)));
              if ((i + 1) * TH <= total)
                copy(at, from, live);
              else
                ifThen(slt(add(tid, cIdx(i * TH)), cIdx(total)),
                       [&] { copy(at, from, live); });
              from = add(from, step);
            }
          });
        },
        [&] {
          elementWise([&](Value r, Value d) {
            return load(src, add(add(rows.first, mul(r, rows.stride)),
                                 mul(d, dStride)));
          });
        });
    return;
  }
  ifThenElse(
      vectors,
      [&] {
        versions([&](bool tail) {
          for (int64_t i = 0; i * TH < total; ++i) {
            Value c = add(tid, cIdx(i * TH));
            auto issue = [&] {
              Value row = arith::DivUIOp::create(b_, c, cIdx(chunks));
              Value ch8 =
                  mul(arith::RemUIOp::create(b_, c, cIdx(chunks)), cIdx(8));
              Value b = baseOff ? add(baseOff, cIdx(base)) : cIdx(base);
              copy(add(b, add(mul(row, cIdx(ld)), ch8)),
                   add(rows.start(row), ch8), liveRow(tail, row));
            };
            if ((i + 1) * TH <= total)
              issue();
            else
              ifThen(slt(c, cIdx(total)), issue);
          }
        });
      },
      [&] {
        elementWise([&](Value r, Value d) {
          return load(src, add(rows.start(r), mul(d, dStride)));
        });
      });
}

void TensorCoreBackward::stageQueryTile(
    const Entry &e, int64_t qS, int64_t oS, Value rows,
    function_ref<Value(ArrayRef<Value>, Value)> rowOffset,
    function_ref<std::pair<Value, Value>(Value)> lseDelta, bool affine,
    Value off, Value fsOff) {
  for (auto [at, width, src, st] :
       {std::tuple{qS, D, e.q, &e.qs}, std::tuple{oS, DV, e.o, &e.os}}) {
    auto start = [&](Value r) { return rowOffset(*st, r); };
    RowPlace place{start, affine ? start(cIdx(0)) : Value(),
                   affine ? (*st)[2] : Value()};
    stageTile(at, at == qS ? ldQ : ldO, width, rows, src, (*st)[3], vectorsQO,
              place, off);
  }
  ifThen(arith::CmpIOp::create(b_, arith::CmpIPredicate::slt, tid, cIdx(R)), [&] {
    Value in = arith::CmpIOp::create(b_, arith::CmpIPredicate::slt, tid, rows);
    std::pair<Value, Value> ld = lseDelta(minI(tid, sub(rows, cIdx(1))));
    Value lse = select(in, ld.first, e.ninf);
    Value row = fsOff ? add(fsOff, tid) : tid;
    store(lse, fs, row);
    store(select(in, ld.second, e.zeroF), fs, add(row, cIdx(R)));
    store(arith::MulFOp::create(b_, lse, e.log2e), fs, add(row, cIdx(2 * R)));
  });
}

TensorCoreBackward::Frags
TensorCoreBackward::rowsByCols(int64_t aBase, int64_t lda, int64_t kSteps,
                               int64_t bBase, int64_t ldb, int64_t n,
                               Value bOff) {
  Frags acc(n / 8, Frag(4, cF32(0.0)));
  // A: (aLane, aCol + 16 ks); B: (bLane + 16 nt2, bCol + 16 ks).
  Value aAt = add(cIdx(aBase), add(mul(aLane, cIdx(lda)), aCol));
  Value bAt = add(cIdx(bBase), add(mul(bLane, cIdx(ldb)), bCol));
  if (bOff)
    bAt = add(bOff, bAt);
  for (int64_t ks = 0; ks < kSteps; ++ks) {
    Frag a = ldMatrix(smem, add(aAt, cIdx(16 * ks)), /*trans=*/false);
    for (int64_t nt2 = 0; nt2 < n / 16; ++nt2) {
      Frag regs = ldMatrix(smem, add(bAt, cIdx(16 * nt2 * ldb + 16 * ks)),
                           /*trans=*/false);
      for (int64_t h = 0; h < 2; ++h)
        acc[2 * nt2 + h] =
            mmaSync(a, {regs[2 * h], regs[2 * h + 1]}, acc[2 * nt2 + h]);
    }
  }
  return acc;
}

void TensorCoreBackward::accumulate(Frags &acc, ArrayRef<Value> x,
                                    int64_t kCols, int64_t bBase, int64_t ldb,
                                    int64_t n, Value bOff) {
  // B.trans: (tLane + 16 kk, aCol + 16 dt2).
  Value tAt = add(cIdx(bBase), add(mul(tLane, cIdx(ldb)), aCol));
  if (bOff)
    tAt = add(bOff, tAt);
  // x's accumulator pairs are A's pairs: columns 8 nt + 2 tig (+1) of rows
  // g and g + 8; two n-tiles make one k-step of 16.
  auto pair = [&](int64_t nt, int64_t c) {
    return packF32Pair(x[nt * 4 + c], x[nt * 4 + c + 1]);
  };
  for (int64_t kk = 0; kk < kCols / 16; ++kk) {
    Frag a = {pair(2 * kk, 0), pair(2 * kk, 2), pair(2 * kk + 1, 0),
              pair(2 * kk + 1, 2)};
    for (int64_t dt2 = 0; dt2 < n / 16; ++dt2) {
      Frag regs = ldMatrix(smem, add(tAt, cIdx(16 * kk * ldb + 16 * dt2)),
                           /*trans=*/true);
      for (int64_t h = 0; h < 2; ++h)
        acc[2 * dt2 + h] =
            mmaSync(a, {regs[2 * h], regs[2 * h + 1]}, acc[2 * dt2 + h]);
    }
  }
}

void TensorCoreBackward::storeRows(const Frags &acc, Value dst,
                                   ArrayRef<Value> strides,
                                   function_ref<Value(int64_t)> rowOffset,
                                   ArrayRef<Value> live, Value factor) {
  for (int64_t k = 0; k < 2; ++k)
    ifThen(live[k], [&] {
      Value at = rowOffset(k);
      for (size_t dt = 0; dt < acc.size(); ++dt)
        for (int64_t c = 0; c < 2; ++c) {
          Value d = add(tig2, cIdx(8 * int64_t(dt) + c));
          Value v = acc[dt][2 * k + c];
          if (factor)
            v = arith::MulFOp::create(b_, v, factor);
          store(fromF32(v), dst, add(at, mul(d, strides[3])));
        }
    });
}

LogicalResult TensorCoreBackward::lowerQueryGrads(flash::KernelOp kernel,
                                                  gpu::GPUModuleOp module) {
  FailureOr<PairSection> found = backwardSection(kernel, "bwd_q");
  if (failed(found))
    return failure();
  PairSection sec = *found;
  StringRef name = kernel.getSymName();
  OpBuilder::InsertionGuard guard(b_);
  Entry e;
  Extra x;
  begin(module, name, e, x, 1 + stages_);
  // A query's accumulates' slots (below), in the entry block: LLVM keeps
  // only such private memory in registers (after the staging's branches
  // it stayed in local memory: 13 loads and stores per tile at D = 128).
  SmallVector<attn::AccumulateOp> rowAccs;
  Value rowSums;
  if (sec.dx.getAccumulate() == "query")
    rowAccs = classifyAccumulates(v_).rows;
  if (!rowAccs.empty())
    rowSums = alloca(2 * int64_t(rowAccs.size()));
  Value c1 = cIdx(1);
  const TileLayout l = queryLayout();
  const int64_t qS = l.q, oS = l.dO, kS = l.k, vS = l.v;
  Item it = decodeItem(e, blockItem(x));
  // Q and dO rows; LSE and delta per row, delta formed here and stored for
  // _bwd_kv by the row's own thread.
  stageQueryTile(
      e, qS, oS, it.rows,
      [&](ArrayRef<Value> st, Value r) {
        std::pair<Value, Value> hi = rowCoords(e, it, r);
        return offset4(st, it.b, hi.first, hi.second);
      },
      [&](Value r) {
        std::pair<Value, Value> hi = rowCoords(e, it, r);
        Value delta = rowDelta(e, x, it.b, hi.first, hi.second);
        ifThen(arith::CmpIOp::create(b_, arith::CmpIPredicate::slt, tid,
                                     it.rows),
               [&] {
                 store(delta, x.delta, deltaAt(e, it.b, hi.first, hi.second));
               });
        return std::pair<Value, Value>{
            load(e.lse, offset4(e.ls, it.b, hi.first, hi.second)), delta};
      },
      /*affine=*/false);
  awaitTiles();
  gpu::BarrierOp::create(b_);
  // This thread's rows g and g + 8 of its warp's 16.
  SmallVector<Value> live(2), h(2), i(2), hI32(2), qpos(2), lse(2), delta(2),
      rowLive(2), lseLog2e(2);
  for (int64_t k = 0; k < 2; ++k) {
    Value r = add(add(mul(warp, cIdx(16)), g), cIdx(8 * k));
    live[k] = arith::CmpIOp::create(b_, arith::CmpIPredicate::slt, r, it.rows);
    std::pair<Value, Value> hi = rowCoords(e, it, minI(r, sub(it.rows, c1)));
    h[k] = hi.first;
    i[k] = hi.second;
    hI32[k] = headIndex(h[k]);
    qpos[k] = arith::IndexCastOp::create(b_, i32_, add(it.qpos0, i[k]));
    lse[k] = load(fs, r);
    delta[k] = load(fs, add(r, cIdx(R)));
    lseLog2e[k] = load(fs, add(r, cIdx(2 * R)));
    rowLive[k] =
        arith::CmpFOp::create(b_, arith::CmpFPredicate::ONE, lse[k], e.ninf);
  }

  // score_grad's accumulates of a query (flash.score_grad's "query"):
  // summed per row in slots of rowSums (two per accumulate: rows g and
  // g + 8), added once per item (addRowSums).
  if (!rowAccs.empty()) {
    for (int64_t i = 0; i < 2 * int64_t(rowAccs.size()); ++i)
      store(cF32(0.0), rowSums, cIdx(i));
  }
  auto bindRowSlots = [&](int64_t k) {
    for (auto [i, a] : llvm::enumerate(rowAccs))
      accumulateSlots_[a] = {rowSums, cIdx(2 * int64_t(i) + k)};
  };
  // The rows' values of score_mod and score_grad of (b, h, q) alone, once
  // per item, and whether their factors of score_mod's separable logs are
  // in range.
  beginSides();
  SmallVector<SideValues> rowSide;
  if (hoistsQueries_)
    for (int64_t k = 0; k < 2; ++k)
      rowSide.push_back(queryValues(it.bI32, hI32[k], qpos[k]));
  Value rowLogsInRange =
      separable_.empty()
          ? Value()
          : Value(arith::AndIOp::create(b_, logsInRange(rowSide[0], true),
                                        logsInRange(rowSide[1], true)));
  // The warp's rows' exponents within the FMA's bound: the exact tiles'
  // P is one FMA and an ex2 (probability); else they take the flagged path.
  Value smallRows = smallExponents(lseLog2e);
  IRMapping inv;
  inv.map(v_.getMaskBlock().getArgument(0), it.bI32);
  inv.map(v_.getMaskBlock().getArgument(1), it.hI32);
  materializeMaskInvariants(inv);
  // The diagonal values once per distinct kv - q of the thread's elements
  // (from the position of its row g, unclamped: a row past the item's end
  // is never kept).
  const bool shareDiagonals = diagonalsShared();
  Value row0Pos =
      shareDiagonals
          ? Value(arith::IndexCastOp::create(
                b_, i32_,
                add(it.qpos0,
                    rowCoords(e, it, add(mul(warp, cIdx(16)), g)).second)))
          : Value();
  SmallVector<Value> init(D / 8 * 4, e.zeroF);
  // Tile t's K and V rows into stage `stage` of the ring (off: its first
  // element past stage 0's; null with one stage).
  auto stageKeyValue = [&](const Tile &t, Value off) {
    auto kStart = [&](Value c) {
      return add(it.kBase, mul(add(t.kv0, c), e.ks[2]));
    };
    auto vStart = [&](Value c) {
      return add(it.vBase, mul(add(t.kv0, c), e.vs[2]));
    };
    stageTile(kS, ldQ, D, t.cols, e.k, e.ks[3], vectorsKV,
              {kStart, kStart(cIdx(0)), e.ks[2]}, off);
    stageTile(vS, ldO, DV, t.cols, e.v, e.vs[3], vectorsKV,
              {vStart, vStart(cIdx(0)), e.vs[2]}, off);
  };
  auto stageOffset = [&](Value stage) {
    return mul(arith::IndexCastUIOp::create(b_, b_.getIndexType(), stage),
               cIdx(keyValueStage()));
  };
  // The tile's products on its staged K and V (at `off`); ends with the
  // barrier after which K and V may be refilled.
  auto tileBody = [&](const Tile &t, ValueRange acc, Value off) {
    // On an exact tile (exactTile) without the flags of kept pairs.
    auto chunks = [&](bool exact) {
      Frags dq = unflatten(acc);
      // The exact version's pairs share their diagonal values; the flagged
      // one (the mask's partial tiles, a sequence's last) computes them per
      // pair: with its keep flags, relative_bias's shared gathers made
      // ptxas spill in the D=128 loop (0 -> 4 local-memory instructions).
      diagBase_ = nullptr;
      if (exact && shareDiagonals)
        beginTileDiagonals(
            arith::SubIOp::create(b_, keyPos(t.pos0, tig2), row0Pos), it.bI32,
            hI32[0]);
      // The rows' terms of the separable logs (rowSign ln x), in the exact
      // version, once per tile.
      SmallVector<SmallVector<Value>> rowTerms;
      if (exact && !separable_.empty())
        for (const SideValues &r : rowSide)
          rowTerms.push_back(logTerms(r, true));
      for (int64_t from = 0; from < R; from += C) {
        SmallVector<Value> s =
            flatten(rowsByCols(qS, ldQ, D / 16, kS + from * ldQ, ldQ, C, off));
        SmallVector<Value> dp =
            flatten(rowsByCols(oS, ldO, DV / 16, vS + from * ldO, ldO, C, off));
        SmallVector<Value> kv(s.size()), base(s.size());
        for (size_t at = 0; at < s.size(); ++at) {
          Value col = colOf(from, int64_t(at));
          kv[at] = keyPos(t.pos0, col);
          if (!exact)
            base[at] = arith::AndIOp::create(
                b_, rowLive[(at & 3) >> 1],
                arith::CmpIOp::create(b_, arith::CmpIPredicate::slt, col,
                                      t.cols));
        }
        // One head per item: the rows share h (hI32[0]).
        SmallVector<Value> keep;
        if (!exact)
          keep = keepFlags(
              t, base,
              [&](int64_t at) {
                return std::pair<Value, Value>{qpos[(at & 3) >> 1], kv[at]};
              },
              it.bI32, hI32[0]);
        // The chunk's key columns' values of (b, h, kv) alone: column j =
        // 2 (at / 4) + at % 2 of the thread's (the rows share h).
        SmallVector<SideValues> keySide;
        if (hoistsKeys_)
          for (size_t at : {0, 1, 4, 5})
            keySide.push_back(keyValues(it.bI32, hI32[0], kv[at]));
        // The pairs' diagonal values, before the versions below (both use
        // them).
        SmallVector<std::pair<IRMapping, IRMapping> *> diag(s.size(), nullptr);
        if (diagBase_)
          for (size_t at = 0; at < s.size(); ++at)
            diag[at] = &tileDiagonal(from + 8 * int64_t(at / 4) +
                                     int64_t(at & 1) - 8 * ((at & 3) >> 1));
        // dX of the chunk's pairs; `separated`: with the separable logs
        // from the rows' and key columns' terms.
        auto pairTerms = [&](bool separated) {
          SmallVector<SmallVector<Value>> keyTerms;
          if (separated)
            for (const SideValues &c : keySide)
              keyTerms.push_back(logTerms(c, false));
          SmallVector<Value> dx(s.size());
          for (size_t at = 0; at < s.size(); ++at) {
            int64_t k = (at & 3) >> 1;
            size_t j = 2 * (at / 4) + (at & 1);
            lseLog2e_ = exact ? lseLog2e[k] : Value();
            bindRowSlots(k);
            // (a pair not kept adds 0 to its row's sums)
            accumulateKeep_ = exact ? Value() : keep[at];
            bindPair(rowSide.empty() ? nullptr : &rowSide[k],
                     keySide.empty() ? nullptr : &keySide[j], diag[at],
                     separated ? pairLogs(rowTerms[k], keyTerms[j])
                               : SmallVector<Value>());
            Value g1 = pairValues(sec, e, s[at], dp[at], lse[k], delta[k],
                                  it.bI32, hI32[k], qpos[k], kv[at])
                           .second;
            lseLog2e_ = nullptr;
            accumulateKeep_ = nullptr;
            unbindPair();
            dx[at] = exact ? g1 : select(keep[at], g1, e.zeroF);
          }
          return dx;
        };
        // An exact tile's chunk takes the separable logs where every
        // factor of the warp's rows and key columns is in range (one
        // vote); else the log per pair.
        SmallVector<Value> dx;
        if (!rowTerms.empty()) {
          Value inRange = rowLogsInRange;
          for (const SideValues &c : keySide)
            inRange = arith::AndIOp::create(b_, inRange, logsInRange(c, false));
          dx = ifElseYield(
              NVVM::VoteSyncOp::create(b_, b_.getI1Type(), cI32(-1), inRange,
                                       NVVM::VoteSyncKind::all),
              SmallVector<Type>(s.size(), f32_),
              [&] { return pairTerms(true); },
              [&] { return pairTerms(false); });
        } else {
          dx = pairTerms(false);
        }
        accumulate(dq, dx, C, kS + from * ldQ, ldQ, D, off);
      }
      return flatten(dq);
    };
    SmallVector<Value> next = ifElseYield(
        arith::AndIOp::create(b_, exactTile(t, it.rows), smallRows),
        acc.getTypes(), [&] { return chunks(true); },
        [&] { return chunks(false); });
    // Every warp is done with K and V before the next tile's copy.
    gpu::BarrierOp::create(b_);
    return next;
  };
  Value lane32 = arith::IndexCastUIOp::create(b_, i32_, laneId);
  auto tileOf = [&](Value j, Value cls) { return tileAt(it, j, inv, {}, cls); };
  SmallVector<Value> tiles =
      stages_ == 2
          ? forVisitedTilesStaged(
                it.jlo, it.jhi, init, lane32, tileOf,
                [&](Value, const Tile &t, Value stage) {
                  stageKeyValue(t, stageOffset(stage));
                },
                [&](Value, const Tile &t, Value stage, ValueRange acc) {
                  return tileBody(t, acc, stageOffset(stage));
                })
          : forVisitedTiles(it.jlo, it.jhi, init, lane32, tileOf,
                            [&](Value, const Tile &t, ValueRange acc) {
                              stageKeyValue(t, {});
                              awaitTiles();
                              gpu::BarrierOp::create(b_);
                              return tileBody(t, acc, {});
                            });
  if (!rowAccs.empty())
    addRowSums(rowAccs, rowSums, it.bI32, hI32, qpos, live);
  accumulateSlots_.clear();
  storeRows(
      unflatten(tiles), x.dq, x.dqs,
      [&](int64_t k) { return offset4(x.dqs, it.b, h[k], i[k]); }, live,
      e.scale);
  gpu::ReturnOp::create(b_);
  return success();
}

} // namespace attnc::codegen

namespace attnc {
namespace {

/// Dynamic shared memory for R rows: `pairs` pairs of element tiles (Q and
/// dO, K and V; pitch width + 8) and LSE, delta and LSE log2 e per row, as
/// the kernel lays them out. _bwd_kv has two pairs, _bwd_q one per K/V
/// stage besides Q and dO.
int64_t sharedBytes(const rt::KernelSpec &s, int64_t R, int64_t pairs = 2,
                    int64_t rowStages = 1) {
  int64_t elem = rt::dtypeSize(s.dtype);
  return codegen::dynamicSharedBytes(
      {{pairs * R * (s.headDim + 8 + s.vHeadDim + 8), elem},
       {rowStages * 3 * R, 4}});
}
/// _bwd_q's shared memory with the spec's K/V stages.
int64_t querySharedBytes(const rt::KernelSpec &s) {
  return sharedBytes(s, s.blockM, 1 + s.stages);
}
/// _bwd_kv's with the spec's Q/dO stages (and their rows' values).
int64_t keyValueSharedBytes(const rt::KernelSpec &s) {
  return sharedBytes(s, s.blockM, 1 + s.stages, s.stages);
}

/// f16 or bf16, head dims multiples of 16 up to 256.
bool isMmaSyncShape(const rt::KernelSpec &s) {
  return (s.dtype == rt::DType::F16 || s.dtype == rt::DType::BF16) &&
         s.headDim % 16 == 0 && s.vHeadDim % 16 == 0 && s.headDim > 0 &&
         s.vHeadDim > 0 && s.headDim <= 256 && s.vHeadDim <= 256;
}

/// The tensor-core backward: a warp per 16 rows (or keys), R = blockM =
/// blockN of 64, 32 or 16 rows, the most whose four tiles fit the target's
/// opt-in shared memory (dynamic: 227 KB on sm_90, 99 KB on sm_86/sm_89),
/// unless the request names tiles the form builds. At D=128 R went from 32
/// (the 48 KiB of static shared memory) to 64 on every target. _bwd_q's K
/// and V take two stages (spec.stages, the name's s<stages>) where a third
/// pair of tiles fits too (every target at D=64, sm_80 and sm_90 at D=128),
/// else one.
class MmaSyncBackwardForm final : public KernelForm {
public:
  StringRef name() const override { return "mma-sync"; }
  Direction direction() const override { return Direction::Backward; }
  bool runsOn(StringRef target) const override {
    return isGpuTarget(target.str());
  }
  std::optional<rt::KernelSpec> configure(const rt::KernelSpec &request,
                                          StringRef target) const override {
    if (!isMmaSyncShape(request))
      return std::nullopt;
    // The forward's tiles (what a package's request names) are not the
    // backward's: only a request this form builds as given is kept.
    if (!requestsDefaultTiles(request)) {
      rt::KernelSpec r = request;
      if (r.stages == 0) // the tiles named, the stages left to the form
        r.stages = stagesFor(r, target);
      if (accepts(r, target))
        return r;
    }
    rt::KernelSpec s = request;
    s.blockM = 16;
    for (int64_t R : {64, 32})
      if (sharedBytes(s, R) <= gpuSharedOptIn(target.str())) {
        s.blockM = R;
        break;
      }
    s.blockN = s.blockM;
    s.warps = s.blockM / 16;
    // One stage where asked for (an A/B of the ring: --stages 1), else the
    // form's choice.
    s.stages = request.stages == 1 ? 1 : stagesFor(s, target);
    return s;
  }
  /// Two K/V stages for _bwd_q where its three pairs of tiles fit.
  static int64_t stagesFor(const rt::KernelSpec &s, StringRef target) {
    return sharedBytes(s, s.blockM, 3, 2) <= gpuSharedOptIn(target.str()) ? 2
                                                                          : 1;
  }
  bool accepts(const rt::KernelSpec &s, StringRef target) const override {
    return isMmaSyncShape(s) && s.blockM == s.blockN &&
           (s.blockM == 16 || s.blockM == 32 || s.blockM == 64) &&
           s.warps == s.blockM / 16 && (s.stages == 1 || s.stages == 2) &&
           sharedBytes(s, s.blockM) <= gpuSharedOptIn(target.str()) &&
           querySharedBytes(s) <= gpuSharedOptIn(target.str()) &&
           keyValueSharedBytes(s) <= gpuSharedOptIn(target.str());
  }
  /// A query's gradients (qamp[b, h, q]) summed per row in _bwd_q's
  /// registers and added once per item, not an atomic add per pair in
  /// _bwd_kv.
  bool sumsQueryGradsInQueryKernel() const override { return true; }
  rt::TileConfig tileConfig(const rt::KernelSpec &s) const override {
    // s<stages>: _bwd_q's K/V stages.
    return rt::TileConfig{s.blockM, s.blockN, s.blockM / 16, s.stages};
  }
  std::vector<KernelEntry> entries(const rt::KernelSpec &s,
                                   attn::VariantOp variant) const override {
    LaunchFacts l;
    l.threads = s.warps * 32;
    l.dynamicSharedBytes = keyValueSharedBytes(s);
    LaunchFacts lq = l;
    lq.dynamicSharedBytes = querySharedBytes(s);
    // Per 16-column chunk of the tile's R: rowsByCols over Dqk (S) and Dv
    // (dP) give 2 MMAs per k-step; each accumulate gives 2 per 16 columns
    // of its width.
    const int64_t chunks = s.blockM / 16, d = s.headDim, dv = s.vHeadDim;
    rt::TileWork q, kv;
    q.mma = chunks * (d / 8 + dv / 8 + d / 8);
    kv.mma = chunks * (d / 8 + dv / 8 + dv / 8 + d / 8);
    // The streamed tiles' 16-byte copies per thread (K and V in _bwd_q's
    // loop, Q and dO in _bwd_kv's): a thread's share of R rows.
    const int64_t threads = s.warps * 32;
    auto perThread = [&](int64_t n) {
      return (s.blockM * n / 8 + threads - 1) / threads;
    };
    q.asyncCopies = kv.asyncCopies = perThread(d) + perThread(dv);
    // score_grad's accumulates per pair: those it does not sum in registers
    // (one atomic add each; a warp's 16 keys x 16 queries of a chunk are 8
    // pairs per thread). One inside a sum runs a data-dependent number of
    // times: the work is then not stated.
    if (variant) {
      codegen::AccumulateKinds kinds = codegen::classifyAccumulates(variant);
      bool counted = llvm::none_of(kinds.pairs, [](attn::AccumulateOp a) {
        return bool(a->getParentOfType<attn::SumOp>());
      });
      // (a query's are _bwd_q's, once per row: sumsQueryGradsInQueryKernel)
      kv.atomics = chunks * 8 * int64_t(kinds.pairs.size());
      if (!counted)
        kv = rt::TileWork();
    }
    return {KernelEntry{"_bwd_q", lq, q}, KernelEntry{"_bwd_kv", l, kv}};
  }
  LogicalResult lower(flash::KernelOp kernel, const MaskAnalysis &mask,
                      Operation *container) const override {
    kernel->getContext()
        ->loadDialect<gpu::GPUDialect, memref::MemRefDialect, scf::SCFDialect,
                      arith::ArithDialect, math::MathDialect,
                      vector::VectorDialect, NVVM::NVVMDialect,
                      nvgpu::NVGPUDialect, LLVM::LLVMDialect>();
    auto module = cast<gpu::GPUModuleOp>(container);
    codegen::TensorCoreBackward lowering(kernel->getParentOfType<ModuleOp>(),
                                         variantOf(kernel), mask,
                                         configOf(kernel));
    if (failed(kernel.getKind() == "bwd_kv"
                   ? lowering.lowerKeyValueGrads(kernel, module)
                   : lowering.lowerQueryGrads(kernel, module)))
      return failure();
    kernel.erase();
    return success();
  }
};

} // namespace

const KernelForm &mmaSyncBackwardForm() {
  static const MmaSyncBackwardForm form;
  return form;
}

} // namespace attnc
