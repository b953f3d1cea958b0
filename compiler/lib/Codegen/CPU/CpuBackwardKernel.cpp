//===- CpuBackwardKernel.cpp - The CPU form of the backward pass ------------===//
//
// Two funcs over work items, FlashAttention-2's backward split so that no
// two threads write the same row of dQ, dK or dV:
//
//   <name>_bwd_kv  items (b, kv head, T KV tiles): for each tile, each
//                  query head of the group and each Q tile that is not
//                  empty, recompute S = Q K^T, P = exp(score_mod(scale S)
//                  - LSE), dP = dO V^T, dS = P (dP - delta) and dX = scale
//                  score_grad(dS), and add P^T dO into dV and dX^T Q into
//                  dK (stack tiles, written once); score_grad's accumulates
//                  go to the thread's own parameter-gradient buffer. When
//                  T covers every KV tile (the launcher's choice when there
//                  are at least as many (b, kv head) pairs as threads), the
//                  item owns the dQ rows of its group's heads and adds
//                  dX K into them too, and _bwd_q is not launched.
//   <name>_bwd_q   items (b, head, Q tile), as the forward's: the same
//                  recomputation over the visited KV tiles, dQ += dX K.
//
// Operands: the forward kernel's (KernelABI.h; dO in O's place, the
// forward's LSE in LSE's), then delta [B, Hq, Lq] (rowsum(dO * O)), dq
// [B, Hq, Lq, Dqk], dk [B, Hkv, Lkv, Dqk], dv [B, Hkv, Lkv, Dv] (f32,
// contiguous) and the thread's gradient buffer (f32: each float parameter
// dense in declaration order, a scalar one element), then the item range.
// Matrix products use the forward's register-blocked micro-kernel.
//
//===----------------------------------------------------------------------===//
#include "attnc/Codegen/KernelForm.h"
#include "BackwardBuilder.h"

using namespace mlir;
namespace abi = attnc::rt::abi;

namespace attnc::codegen {
namespace {

class CpuBackwardBuilder : public BackwardBuilder {
public:
  using BackwardBuilder::BackwardBuilder;

  /// The lowering of a bwd_kv / bwd_q flash.kernel.
  LogicalResult lowerKeyValueGrads(flash::KernelOp kernel);
  LogicalResult lowerQueryGrads(flash::KernelOp kernel);

private:
  /// The backward operands after the forward's.
  struct Extra {
    Value delta, dq, dk, dv, grads;
  };
  /// The stack tiles both kernels use: a Q tile's rows, dO rows, LSE and
  /// delta; a KV tile's K^T and V^T; S = Q K^T and dP = dO V^T.
  struct Tiles {
    Value Qs, dOs, Lse, Delta, Kt, Vt, S, DP;
  };
  /// A func with the backward's operands: sets the entry values and the
  /// item range, and allocates the shared tiles.
  Tiles createEntry(StringRef name, Entry &e, Extra &x, Value &begin,
                    Value &end);
  /// Qs [BM][D] and dOs [BM][DV] (zero past the item's rows), and per row
  /// its LSE and delta.
  void loadQueryTile(const Entry &e, const Extra &x, const Item &it, Value Qs,
                     Value dOs, Value Lse, Value Delta);
  /// Kt [D][BN] and Vt [DV][BN] (transposed) and, if given, Ks [BN][D] of
  /// KV tile `kv0` (zero past `cols`).
  void loadKeyTile(const Entry &e, const Item &it, Value kv0, Value cols,
                   Value Kt, Value Vt, Value Ks);
  /// C[rows][cols] (+)= A[rows][depth] . B[depth][cols], f32 stack tiles.
  void matmul(Value C, Value A, Value B, int64_t rows, int64_t cols,
              int64_t depth, bool accumulate);
  /// From S = Q K^T and dP = dO V^T of a (Q tile, KV tile) pair: P and dX
  /// (dS through score_mod, times scale) per element, 0 where masked or
  /// out of range, into P and DX ([BN][BM] when `transposed`, else
  /// [BM][BN]); with `accumulate`, score_grad's parameter gradients too.
  /// With `dxRows` (a [BM][BN] tile), dX is also stored there row-major.
  void scoreTile(const PairSection &sec, const Entry &e, const Item &it,
                 const Tile &t, Value S, Value DP, Value Lse, Value Delta,
                 Value P, Value DX, bool transposed, Value dxRows = nullptr);
  void zero(Value tile, int64_t n);

  /// score_grad's accumulates whose element does not depend on the key (a
  /// row's, e.g. qamp[b, h, q] or barrier[]) or on the query (a column's,
  /// e.g. key_factor[b, h, kv]) are summed in stack slots and added to the
  /// gradient buffer once per row or per tile, instead of a read-add-write
  /// of the buffer per pair; the others (e.g. bias[h, q - kv], or inside
  /// a sum) stay per pair.
  struct AccumulateSinks {
    SmallVector<attn::AccumulateOp> rows, cols;
    bool perPair = false; // some accumulate stays per pair
    Value rowAcc, colAcc; // [rows], [cols][BN]
  } sinks_;
  void classifyAccumulates();
};

void CpuBackwardBuilder::classifyAccumulates() {
  // (a row's include those of neither q nor kv)
  AccumulateKinds kinds = codegen::classifyAccumulates(v_);
  sinks_.rows = kinds.item;
  sinks_.rows.append(kinds.rows);
  sinks_.cols = kinds.cols;
  sinks_.perPair = !kinds.pairs.empty();
  if (!sinks_.rows.empty())
    sinks_.rowAcc = alloca(int64_t(sinks_.rows.size()));
  if (!sinks_.cols.empty())
    sinks_.colAcc = alloca(int64_t(sinks_.cols.size()) * BN);
}

CpuBackwardBuilder::Tiles CpuBackwardBuilder::createEntry(StringRef name, Entry &e,
                                                   Extra &x, Value &begin,
                                                   Value &end) {
  SmallVector<Type> args = kernelArgs();
  args.pop_back(); // the forward's first item
  auto dyn = MemRefType::get({ShapedType::kDynamic}, f32_);
  unsigned first = args.size();
  args.append(5, dyn);
  args.push_back(i64_);
  args.push_back(i64_);
  auto fn = func::FuncOp::create(b_, name, b_.getFunctionType(args, {}));
  Block *entry = fn.addEntryBlock();
  b_.setInsertionPointToStart(entry);
  e = loadEntry(fn.getArguments());
  x = {fn.getArgument(first), fn.getArgument(first + 1),
       fn.getArgument(first + 2), fn.getArgument(first + 3),
       fn.getArgument(first + 4)};
  bindGradients(x.grads, /*atomic=*/false);
  begin = toIdx(fn.getArgument(fn.getNumArguments() - 2));
  end = toIdx(fn.getArgument(fn.getNumArguments() - 1));
  return {alloca(BM * D),  alloca(BM * DV), alloca(BM),
          alloca(BM),      alloca(D * BN),  alloca(DV * BN),
          alloca(BM * BN), alloca(BM * BN)};
}

void CpuBackwardBuilder::zero(Value tile, int64_t n) {
  Value z = cF32(0.0);
  loop0(cIdx(0), cIdx(n), 1, [&](Value i) { store(z, tile, i); });
}

void CpuBackwardBuilder::loadQueryTile(const Entry &e, const Extra &x,
                                    const Item &it, Value Qs, Value dOs,
                                    Value Lse, Value Delta) {
  zero(Qs, BM * D);
  zero(dOs, BM * DV);
  loop0(cIdx(0), it.rows, 1, [&](Value r) {
    Value i = add(it.r0, r);
    Value qRow = add(add(mul(it.b, e.qs[0]), mul(it.h, e.qs[1])),
                     mul(i, e.qs[2]));
    loop0(cIdx(0), cIdx(D), 1, [&](Value d) {
      store(toF32(load(e.q, add(qRow, mul(d, e.qs[3])))), Qs,
            add(mul(r, cIdx(D)), d));
    });
    Value oRow = add(add(mul(it.b, e.os[0]), mul(it.h, e.os[1])),
                     mul(i, e.os[2]));
    loop0(cIdx(0), cIdx(DV), 1, [&](Value d) {
      store(toF32(load(e.o, add(oRow, mul(d, e.os[3])))), dOs,
            add(mul(r, cIdx(DV)), d));
    });
    store(load(e.lse, add(add(mul(it.b, e.ls[0]), mul(it.h, e.ls[1])),
                          mul(i, e.ls[2]))),
          Lse, r);
    Value row = add(mul(add(mul(it.b, e.Hq), it.h), e.Lq), i);
    store(load(x.delta, row), Delta, r);
  });
}

void CpuBackwardBuilder::loadKeyTile(const Entry &e, const Item &it, Value kv0,
                                  Value cols, Value Kt, Value Vt, Value Ks) {
  loop0(cIdx(0), cIdx(BN), 1, [&](Value c) {
    Value inRange =
        arith::CmpIOp::create(b_, arith::CmpIPredicate::slt, c, cols);
    Value row = minI(add(kv0, c), sub(add(kv0, cols), cIdx(1)));
    forTileRow(e.k, add(it.kBase, mul(row, e.ks[2])), e.ks[3], D, inRange,
               [&](Value d, Value k) {
                 store(k, Kt, add(mul(d, cIdx(BN)), c));
                 if (Ks)
                   store(k, Ks, add(mul(c, cIdx(D)), d));
               });
    forTileRow(e.v, add(it.vBase, mul(row, e.vs[2])), e.vs[3], DV, inRange,
               [&](Value d, Value v) {
                 store(v, Vt, add(mul(d, cIdx(BN)), c));
               });
  });
}

void CpuBackwardBuilder::matmul(Value C, Value A, Value B, int64_t rows,
                             int64_t cols, int64_t depth, bool accumulate) {
  int64_t W = VW == 16 && cols % 16 == 0 ? 16 : 8; // cols: multiples of 8
  int64_t cap = VW == 16 ? 4 : 2, cb = 1;
  for (int64_t c : {4, 2, 1})
    if (c <= cap && (cols / W) % c == 0) {
      cb = c;
      break;
    }
  int64_t rb = rows % 4 == 0 ? 4 : 1;
  VectorType vt = VectorType::get({W}, f32_);
  loop0(cIdx(0), cIdx(rows), rb, [&](Value r) {
    loop0(cIdx(0), cIdx(cols), W * cb, [&](Value c0) {
      auto at = [&](int64_t i, int64_t j) {
        return add(mul(add(r, cIdx(i)), cIdx(cols)), add(c0, cIdx(j * W)));
      };
      Value zeroV =
          arith::ConstantOp::create(b_, DenseElementsAttr::get(vt, 0.0f));
      SmallVector<Value> init;
      for (int64_t i = 0; i < rb; ++i)
        for (int64_t j = 0; j < cb; ++j)
          init.push_back(accumulate ? Value(vector::LoadOp::create(
                                          b_, vt, C, ValueRange{at(i, j)}))
                                    : zeroV);
      SmallVector<Value> acc =
          outerProduct(A, depth, B, cols, r, c0, depth, rb, cb, vt, init);
      for (int64_t i = 0; i < rb; ++i)
        for (int64_t j = 0; j < cb; ++j)
          vector::StoreOp::create(b_, acc[i * cb + j], C, ValueRange{at(i, j)});
    });
  });
}

void CpuBackwardBuilder::scoreTile(const PairSection &sec, const Entry &e,
                                   const Item &it, const Tile &t, Value S,
                                   Value DP, Value Lse, Value Delta, Value P,
                                   Value DX, bool transposed, Value dxRows) {
  PairSection pairs = sec;
  bool accumulate = pairs.dx.getAccumulate().has_value();
  // Without accumulates to the buffer per pair the per-key work has no
  // side effect: it is computed for every key and the masked ones selected
  // away (a branch-free loop LLVM can vectorize; the slots' sums add 0 for
  // them); with them, it runs only for kept keys.
  bool pure = !accumulate || !sinks_.perPair;
  Block &grad = *v_.getGradBlock();
  bool rowSums = accumulate && !sinks_.rows.empty(),
       colSums = accumulate && !sinks_.cols.empty();
  // A slot's sum into the gradient buffer: the accumulate's element at
  // (b, h) and the row's q or the column's kv (score_grad's argument `at`).
  auto addSum = [&](attn::AccumulateOp a, unsigned at, Value pos, Value sum) {
    IRMapping m;
    m.map(grad.getArgument(1), it.bI32);
    m.map(grad.getArgument(2), it.hI32);
    m.map(grad.getArgument(at), pos);
    m.map(a.getValue(), sum);
    addToGradients(a, m);
  };
  if (colSums)
    zero(sinks_.colAcc, int64_t(sinks_.cols.size()) * BN);
  // mask_mod only where the tile is not full (or has a tail): two copies of
  // the key loop, chosen once per tile.
  Value needMask = arith::XOrIOp::create(
      b_, t.skipMask, arith::ConstantOp::create(b_, b_.getBoolAttr(true)));
  auto rows = [&](bool withMask) {
  loop0(cIdx(0), it.rows, 1, [&](Value r) {
    Value qpos = arith::IndexCastOp::create(b_, i32_,
                                            add(it.qpos0, add(it.r0, r)));
    Value lse = load(Lse, r), delta = load(Delta, r);
    // A row with no key (LSE -inf) has P = 0 everywhere.
    Value rowLive =
        arith::CmpFOp::create(b_, arith::CmpFPredicate::ONE, lse, e.ninf);
    if (rowSums)
      zero(sinks_.rowAcc, int64_t(sinks_.rows.size()));
    loop0(cIdx(0), cIdx(BN), 1, [&](Value c) {
      Value kv = keyPos(t.pos0, c);
      Value keep =
          arith::CmpIOp::create(b_, arith::CmpIPredicate::slt, c, t.cols);
      if (withMask)
        keep = keptByMask(keep, it.bI32, it.hI32, qpos, kv);
      keep = arith::AndIOp::create(b_, keep, rowLive);
      Value at = add(mul(r, cIdx(BN)), c);
      Value dp = load(DP, at);
      Value zeroF = cF32(0.0);
      if (accumulate) {
        for (auto [k, a] : llvm::enumerate(sinks_.rows))
          accumulateSlots_[a] = {sinks_.rowAcc, cIdx(int64_t(k))};
        for (auto [k, a] : llvm::enumerate(sinks_.cols))
          accumulateSlots_[a] = {sinks_.colAcc, add(cIdx(int64_t(k) * BN), c)};
        accumulateKeep_ = keep;
      }
      auto perKey = [&] {
        auto [p, dx] = pairValues(pairs, e, load(S, at), dp, lse, delta,
                                  it.bI32, it.hI32, qpos, kv);
        return SmallVector<Value>{p, dx};
      };
      SmallVector<Value> pd;
      if (pure) {
        pd = perKey();
        pd[0] = select(keep, pd[0], zeroF);
        pd[1] = select(keep, pd[1], zeroF);
      } else {
        pd = ifYield(keep, ValueRange{zeroF, zeroF}, perKey);
      }
      Value out = transposed ? add(mul(c, cIdx(BM)), r) : at;
      store(pd[0], P, out);
      store(pd[1], DX, out);
      if (dxRows)
        store(pd[1], dxRows, at);
    });
    // The row's sums, into the gradient buffer.
    if (rowSums)
      for (auto [k, a] : llvm::enumerate(sinks_.rows))
        addSum(a, /*q*/ 3, qpos, load(sinks_.rowAcc, cIdx(int64_t(k))));
  });
  };
  ifThenElse(needMask, [&] { rows(true); }, [&] { rows(false); });
  accumulateSlots_.clear();
  accumulateKeep_ = nullptr;
  // The tile's column sums, into the gradient buffer.
  if (colSums)
    loop0(cIdx(0), t.cols, 1, [&](Value c) {
      Value kv = keyPos(t.pos0, c);
      for (auto [k, a] : llvm::enumerate(sinks_.cols))
        addSum(a, /*kv*/ 4, kv,
               load(sinks_.colAcc, add(cIdx(int64_t(k) * BN), c)));
    });
}

/// The kernel body's ops other than its loop must be these, once each
/// (the tiled program's order is the lowering's).
static LogicalResult expectOps(flash::KernelOp kernel,
                               ArrayRef<StringRef> names) {
  SmallVector<StringRef> want(names.begin(), names.end());
  for (Operation &op : kernel.getBlock()) {
    StringRef n = op.getName().getStringRef();
    auto at = llvm::find(want, n);
    if (at == want.end())
      return op.emitOpError("is not lowered by the CPU backward form");
    want.erase(at);
  }
  if (!want.empty())
    return kernel.emitOpError("lacks ") << want.front();
  return success();
}

LogicalResult CpuBackwardBuilder::lowerKeyValueGrads(flash::KernelOp kernel) {
  if (failed(expectOps(kernel, {"flash.work_item", "flash.kv_tile_of",
                                "flash.load_kv", "flash.zero_acc",
                                "flash.zero_acc", "flash.for_query_tiles",
                                "flash.store_grad", "flash.store_grad"})))
    return failure();
  flash::ForQueryTilesOp loopOp;
  kernel.getBlock().walk([&](flash::ForQueryTilesOp l) { loopOp = l; });
  FailureOr<PairSection> found = findPairSection(loopOp.getBody().front());
  if (failed(found))
    return failure();
  PairSection sec = *found;
  if (!sec.dk || !sec.dv || !sec.q || !sec.dO || !sec.lse || !sec.delta)
    return kernel.emitOpError("a bwd_kv tile accumulates dK and dV from "
                              "staged query rows");
  bool fusedQuery = bool(sec.ownedDq);
  Entry e;
  Extra x;
  Value begin, end;
  OpBuilder::InsertionGuard guard(b_);
  b_.setInsertionPoint(kernel);
  Tiles tiles = createEntry(kernel.getSymName(), e, x, begin, end);
  classifyAccumulates();
  Value Qs = tiles.Qs, dOs = tiles.dOs, Lse = tiles.Lse, Delta = tiles.Delta,
        Kt = tiles.Kt, Vt = tiles.Vt, S = tiles.S, DP = tiles.DP;
  Value Pt = alloca(BN * BM), DXt = alloca(BN * BM), dK = alloca(BN * D),
        dV = alloca(BN * DV);
  Value nKT = ipAt(abi::kNumKTiles), Hkv = ipAt(abi::kHkv);
  // The backward's slots (KernelABI.h): KV tiles per item and whether dQ
  // is formed here too (each item then holds every KV tile of its (b, kv
  // head), so the dQ rows of the group's heads are its own).
  Value slots = afterSequences(e.B);
  Value per = ipAt(add(slots, cIdx(abi::kBwdTilesPerItem)));
  Value fuse = fusedQuery ? Value(arith::CmpIOp::create(
                                b_, arith::CmpIPredicate::ne,
                                ipAt(add(slots, cIdx(abi::kBwdFuseQuery))),
                                cIdx(0)))
                          : Value(arith::ConstantOp::create(
                                b_, b_.getBoolAttr(false)));
  Value chunks = arith::CeilDivUIOp::create(b_, nKT, per);
  Value Ks = alloca(BN * D), DX = alloca(BM * BN), dQt = alloca(BM * D);
  loop0(begin, end, 1, [&](Value item) {
    Value chunk = arith::RemUIOp::create(b_, item, chunks);
    Value t = arith::DivUIOp::create(b_, item, chunks);
    Value kvh = arith::RemUIOp::create(b_, t, Hkv);
    Value b = arith::DivUIOp::create(b_, t, Hkv);
    Value kvLen = ipAt(add(cIdx(layout_.seqBase), b));
    Value ktLo = mul(chunk, per);
    loop0(ktLo, minI(add(ktLo, per), nKT), 1, [&](Value kt) {
    Value kv0 = mul(kt, cIdx(BN));
    Value cols = minI(cIdx(BN), sub(kvLen, kv0));
    ifThen(arith::CmpIOp::create(b_, arith::CmpIPredicate::sgt, cols,
                                 cIdx(0)),
           [&] {
      zero(dK, BN * D);
      zero(dV, BN * DV);
      // The forward's item (b, h, qt), with one head per item and no split
      // (the launcher's ip), h one of KV head kvh's query heads.
      Item first = itemAt(e, b, mul(kvh, e.G), cIdx(0), cIdx(0), kvh);
      auto itemOf = [&](Value h, Value qt) {
        return headTileItem(e, first, h, qt);
      };
      loadKeyTile(e, first, kv0, cols, Kt, Vt, Ks);
      loop0(cIdx(0), e.G, 1, [&](Value g) {
        Value h = add(mul(kvh, e.G), g);
        IRMapping inv;
        inv.map(v_.getMaskBlock().getArgument(0),
                arith::IndexCastOp::create(b_, i32_, b));
        inv.map(v_.getMaskBlock().getArgument(1), headIndex(h));
        materializeMaskInvariants(inv);
        loop0(cIdx(0), e.nQT, 1, [&](Value qt) {
          Item it = itemOf(h, qt);
          Tile tile = tileAt(it, kt, inv);
          ifThen(tile.visit, [&] {
            loadQueryTile(e, x, it, Qs, dOs, Lse, Delta);
            matmul(S, Qs, Kt, BM, BN, D, false);
            matmul(DP, dOs, Vt, BM, BN, DV, false);
            zero(Pt, BN * BM);
            zero(DXt, BN * BM);
            ifThen(fuse, [&] { zero(DX, BM * BN); });
            scoreTile(sec, e, it, tile, S, DP, Lse, Delta, Pt, DXt,
                      /*transposed=*/true, DX);
            matmul(dV, Pt, dOs, BN, DV, BM, true);
            matmul(dK, DXt, Qs, BN, D, BM, true);
            // dQ += dX K for the tile's rows, in the item's own dQ rows
            // (f32, dense [B][Hq][Lq][Dqk]).
            ifThen(fuse, [&] {
              Value rowBase = add(mul(add(mul(b, e.Hq), h), e.Lq), it.r0);
              zero(dQt, BM * D);
              loop0(cIdx(0), it.rows, 1, [&](Value r) {
                Value src = mul(add(rowBase, r), cIdx(D));
                loop0(cIdx(0), cIdx(D), 1, [&](Value d) {
                  store(load(x.dq, add(src, d)), dQt, add(mul(r, cIdx(D)), d));
                });
              });
              matmul(dQt, DX, Ks, BM, D, BN, true);
              loop0(cIdx(0), it.rows, 1, [&](Value r) {
                Value dst = mul(add(rowBase, r), cIdx(D));
                loop0(cIdx(0), cIdx(D), 1, [&](Value d) {
                  store(load(dQt, add(mul(r, cIdx(D)), d)), x.dq, add(dst, d));
                });
              });
            });
          });
        });
      });
      // dK and dV rows of the tile's keys.
      Value rowBase = mul(add(mul(b, Hkv), kvh), ipAt(abi::kLkv));
      loop0(cIdx(0), cols, 1, [&](Value c) {
        Value row = add(rowBase, add(kv0, c));
        loop0(cIdx(0), cIdx(D), 1, [&](Value d) {
          store(load(dK, add(mul(c, cIdx(D)), d)), x.dk,
                add(mul(row, cIdx(D)), d));
        });
        loop0(cIdx(0), cIdx(DV), 1, [&](Value d) {
          store(load(dV, add(mul(c, cIdx(DV)), d)), x.dv,
                add(mul(row, cIdx(DV)), d));
        });
      });
    });
    });
  });
  func::ReturnOp::create(b_);
  return success();
}

LogicalResult CpuBackwardBuilder::lowerQueryGrads(flash::KernelOp kernel) {
  if (failed(expectOps(kernel, {"flash.work_item", "flash.load_query",
                                "flash.load_query", "flash.load_rows",
                                "flash.load_rows", "flash.zero_acc",
                                "flash.for_tiles", "flash.store_grad"})))
    return failure();
  flash::ForTilesOp loopOp;
  kernel.getBlock().walk([&](flash::ForTilesOp l) { loopOp = l; });
  FailureOr<PairSection> found = findPairSection(loopOp.getBody().front());
  if (failed(found))
    return failure();
  PairSection sec = *found;
  if (!sec.dq || !sec.kv)
    return kernel.emitOpError("a bwd_q tile stages K/V and accumulates dQ");
  Entry e;
  Extra x;
  Value begin, end;
  OpBuilder::InsertionGuard guard(b_);
  b_.setInsertionPoint(kernel);
  Tiles tiles = createEntry(kernel.getSymName(), e, x, begin, end);
  Value Qs = tiles.Qs, dOs = tiles.dOs, Lse = tiles.Lse, Delta = tiles.Delta,
        Kt = tiles.Kt, Vt = tiles.Vt, S = tiles.S, DP = tiles.DP;
  Value Ks = alloca(BN * D), P = alloca(BM * BN), DX = alloca(BM * BN),
        dQ = alloca(BM * D);
  loop0(begin, end, 1, [&](Value item) {
    // The forward's item order with one head per item and no split.
    Item it = decodeItem(e, item);
    loadQueryTile(e, x, it, Qs, dOs, Lse, Delta);
    zero(dQ, BM * D);
    forEachVisitedTile(it, [&](const Tile &tile) {
      loadKeyTile(e, it, tile.kv0, tile.cols, Kt, Vt, Ks);
      matmul(S, Qs, Kt, BM, BN, D, false);
      matmul(DP, dOs, Vt, BM, BN, DV, false);
      zero(DX, BM * BN);
      scoreTile(sec, e, it, tile, S, DP, Lse, Delta, P, DX,
                /*transposed=*/false);
      matmul(dQ, DX, Ks, BM, D, BN, true);
    });
    loop0(cIdx(0), it.rows, 1, [&](Value r) {
      Value row = add(mul(add(mul(it.b, e.Hq), it.h), e.Lq), add(it.r0, r));
      loop0(cIdx(0), cIdx(D), 1, [&](Value d) {
        store(load(dQ, add(mul(r, cIdx(D)), d)), x.dq,
              add(mul(row, cIdx(D)), d));
      });
    });
  });
  func::ReturnOp::create(b_);
  return success();
}

} // namespace
} // namespace attnc::codegen

namespace attnc {
namespace {

/// The host CPU's backward form: every request, its tiles as asked.
class CpuBackwardForm final : public KernelForm {
public:
  StringRef name() const override { return "cpu"; }
  Direction direction() const override { return Direction::Backward; }
  bool runsOn(StringRef target) const override { return target == "cpu"; }
  std::optional<rt::KernelSpec> configure(const rt::KernelSpec &request,
                                          StringRef) const override {
    return request;
  }
  bool accepts(const rt::KernelSpec &, StringRef) const override {
    return true;
  }
  rt::TileConfig tileConfig(const rt::KernelSpec &s) const override {
    return rt::TileConfig{s.blockM, s.blockN, 0, 1};
  }
  std::vector<KernelEntry> entries(const rt::KernelSpec &,
                                   attn::VariantOp) const override {
    return {KernelEntry{"_bwd_q", {}, {}}, KernelEntry{"_bwd_kv", {}, {}}};
  }
  LogicalResult lower(flash::KernelOp kernel, const MaskAnalysis &mask,
                      Operation *) const override {
    FlashConfig config = configOf(kernel);
    attn::VariantOp variant = variantOf(kernel);
    const rt::KernelSpec &s = config.spec;
    if (s.headDim % 8 || s.vHeadDim % 8 || s.blockN % 8 || s.blockM <= 0 ||
        s.headDim <= 0 || s.vHeadDim <= 0)
      return variant.emitError("invalid kernel configuration: head dims and "
                               "blockN must be multiples of 8");
    kernel->getContext()
        ->loadDialect<func::FuncDialect, memref::MemRefDialect,
                      scf::SCFDialect, vector::VectorDialect,
                      arith::ArithDialect, math::MathDialect>();
    codegen::CpuBackwardBuilder lowering(kernel->getParentOfType<ModuleOp>(),
                                         variant, mask, config);
    if (failed(kernel.getKind() == "bwd_kv"
                   ? lowering.lowerKeyValueGrads(kernel)
                   : lowering.lowerQueryGrads(kernel)))
      return failure();
    kernel.erase();
    return success();
  }
};

} // namespace

const KernelForm &cpuBackwardForm() {
  static const CpuBackwardForm form;
  return form;
}

} // namespace attnc
