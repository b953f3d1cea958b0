//===- CpuKernel.cpp - The CPU form of the flash program --------------------===//
//
// A func over a range of work items: Q, K^T, V, S/P and the accumulator in
// stack-allocated f32 tiles, register-blocked vector micro-kernels for both
// matrix products, scalar modifiers and softmax that LLVM vectorizes.
//
//===----------------------------------------------------------------------===//
#include "ProgramBuilder.h"

using namespace mlir;
namespace abi = attnc::rt::abi;

namespace attnc::codegen {

LogicalResult ProgramBuilder::buildKernel(StringRef name) {
  SmallVector<Type> args = kernelArgs(); // ..., begin
  args.push_back(i64_);                   // end
  auto fn = func::FuncOp::create(b_, name, b_.getFunctionType(args, {}));
  Block *entry = fn.addEntryBlock();
  OpBuilder::InsertionGuard guard(b_);
  b_.setInsertionPointToStart(entry);
  Entry e = loadEntry(fn.getArguments());
  Value q = e.q, k = e.k, v = e.v;
  Value begin = toIdx(fn.getArgument(fn.getNumArguments() - 2));
  Value end = toIdx(fn.getArgument(fn.getNumArguments() - 1));
  const SmallVector<Value> &qs = e.qs, &ks = e.ks, &vs = e.vs;
  Value scale = e.scale, ninf = e.ninf, zeroF = e.zeroF, log2e = e.log2e;
  Value c0 = cIdx(0), c1 = cIdx(1);

  Value Qs = alloca(BM * D), Kt = alloca(D * BN), Vs = alloca(BN * DV),
        S = alloca(BM * BN), Acc = alloca(BM * DV), M = alloca(BM),
        L = alloca(BM), Alpha = alloca(BM);
  VectorType vecQK = VectorType::get({VW}, f32_);
  VectorType vecPV = VectorType::get({VWP}, f32_);

  loop0(begin, end, 1, [&](Value item) {
    Item it = decodeItem(e, item);
    Value bb = it.b, rows = it.rows, bI32 = it.bI32, kBase = it.kBase,
          vBase = it.vBase;
    // The matrix products cover the live rows rounded up to the register
    // block (decode: 4 rows, not 64); the extra rows of Qs are zero.
    Value rowsUp = mul(arith::CeilDivUIOp::create(b_, rows, cIdx(RB)), cIdx(RB));

    // Q tile -> Qs (f32); rows past the end are zero.
    loop0(c0, cIdx(BM), 1, [&](Value r) {
      loop0(c0, cIdx(D), 1, [&](Value d) {
        store(zeroF, Qs, add(mul(r, cIdx(D)), d));
      });
    });
    loop0(c0, rows, 1, [&](Value r) {
      auto [hr, ir] = rowCoords(e, it, r);
      Value rowBase =
          add(add(mul(bb, qs[0]), mul(hr, qs[1])), mul(ir, qs[2]));
      loop0(c0, cIdx(D), 1, [&](Value d) {
        store(toF32(load(q, add(rowBase, mul(d, qs[3])))), Qs,
              add(mul(r, cIdx(D)), d));
      });
    });
    loop0(c0, cIdx(BM), 1, [&](Value r) {
      store(ninf, M, r);
      store(zeroF, L, r);
      store(cF32(1.0), Alpha, r);
      loop0(c0, cIdx(DV), 1, [&](Value d) {
        store(zeroF, Acc, add(mul(r, cIdx(DV)), d));
      });
    });

    forEachVisitedTile(it, [&](const Tile &tile) {
        Value kv0 = tile.kv0, cols = tile.cols, skipMask = tile.skipMask;
        // K^T and V tiles (f32); columns past the end are zero. Contiguous
        // and paged K/V get their own copy of the loop: a page-table test
        // per row would keep LLVM from optimizing the contiguous one (it
        // made causal prefill ~1.8x slower).
        Value paged = arith::CmpIOp::create(b_, arith::CmpIPredicate::ne,
                                            ipAt(abi::kPageSize), c0);
        auto loadTiles = [&](bool pagedRows) {
        loop0(c0, cIdx(BN), 1, [&](Value c) {
          Value inRange = arith::CmpIOp::create(b_, arith::CmpIPredicate::slt,
                                                c, cols);
          Value row = minI(add(kv0, c), sub(add(kv0, cols), c1));
          Value kRow = pagedRows
                           ? pagedRowOffset(it, row, kBase, ks[2], abi::kKStride)
                           : add(kBase, mul(row, ks[2]));
          Value vRow = pagedRows
                           ? pagedRowOffset(it, row, vBase, vs[2], abi::kVStride)
                           : add(vBase, mul(row, vs[2]));
          // Rows with unit stride along D (every usual layout) are read 8
          // elements at a time; other strides element by element. K is
          // stored transposed, V as is.
          forTileRow(k, kRow, ks[3], D, inRange,
                     [&](Value d, Value x) {
                       store(x, Kt, add(mul(d, cIdx(BN)), c));
                     });
          forTileRow(v, vRow, vs[3], DV, inRange,
                     [&](Value d, Value x) {
                       store(x, Vs, add(mul(c, cIdx(DV)), d));
                     },
                     [&](Value d, Value x8) {
                       vector::StoreOp::create(
                           b_, x8, Vs, ValueRange{add(mul(c, cIdx(DV)), d)});
                     });
        });
        };
        ifThenElse(paged, [&] { loadTiles(true); }, [&] { loadTiles(false); });
        // S = Qs . Kt, register-blocked: RB rows x CB vectors of VW keys
        // per step over d, so each loaded K vector and broadcast Q value
        // feeds several FMAs. Padding rows of Qs are zero, so computing all
        // BM rows is harmless.
        loop0(c0, rowsUp, RB, [&](Value r) {
          loop0(c0, cIdx(BN), VW * CB, [&](Value cv) {
            Value zero = arith::ConstantOp::create(
                b_, DenseElementsAttr::get(vecQK, 0.0f));
            SmallVector<Value> init(RB * CB, zero);
            SmallVector<Value> dl =
                outerProduct(Qs, D, Kt, BN, r, cv, D, RB, CB, vecQK, init);
            for (int64_t i = 0; i < RB; ++i)
              for (int64_t j = 0; j < CB; ++j)
                vector::StoreOp::create(
                    b_, dl[i * CB + j], S,
                    ValueRange{add(mul(add(r, cIdx(i)), cIdx(BN)),
                                   add(cv, cIdx(j * VW)))});
          });
        });
        // Modifiers, mask (partial tiles and tails only), online softmax.
        loop0(c0, rows, 1, [&](Value r) {
          auto [hr, ir] = rowCoords(e, it, r);
          Value qpos =
              arith::IndexCastOp::create(b_, i32_, add(it.qpos0, ir));
          Value hI32 = arith::IndexCastOp::create(b_, i32_, hr);
          Value sRow = mul(r, cIdx(BN));
          // The scores of one row, W keys at a time: scale, score_mod on
          // every key, x log2(e), and the mask only on partial tiles and
          // tails (two copies of the loop, chosen once per tile). Values that
          // do not depend on kv (or score) are computed once per row.
          int64_t W = VW;
          VectorType vF = VectorType::get({W}, f32_);
          VectorType vI = VectorType::get({W}, i32_);
          SmallVector<int32_t> lanes;
          for (int64_t i = 0; i < W; ++i)
            lanes.push_back(int32_t(i));
          Value iota = arith::ConstantOp::create(
              b_, DenseElementsAttr::get(vI, ArrayRef<int32_t>(lanes)));
          Block &scoreBlock = v_.getScoreBlock(), &maskBlock = v_.getMaskBlock();
          IRMapping scoreUni, maskUni;
          scoreUni.map(scoreBlock.getArgument(1), bI32);
          scoreUni.map(scoreBlock.getArgument(2), hI32);
          scoreUni.map(scoreBlock.getArgument(3), qpos);
          maskUni.map(maskBlock.getArgument(0), bI32);
          maskUni.map(maskBlock.getArgument(1), hI32);
          maskUni.map(maskBlock.getArgument(2), qpos);
          llvm::DenseSet<Value> scoreU = uniformValues(scoreBlock, {0, 4});
          llvm::DenseSet<Value> maskU = uniformValues(maskBlock, {3});
          // Hoist: every uniform value that a lane-varying op (or the yield,
          // or a lane-varying sum's body) uses is computed here, once per row.
          auto hoist = [&](Block &block, const llvm::DenseSet<Value> &uni,
                           IRMapping &map) {
            for (Operation &op : block)
              attn::forEachValueRead(&op, [&](Value operand) {
                if (uni.contains(operand) &&
                    (isa<attn::YieldOp>(op) || !uni.contains(op.getResult(0))))
                  materialize(operand, map);
              });
          };
          hoist(scoreBlock, scoreU, scoreUni);
          hoist(maskBlock, maskU, maskUni);
          Value vNinf = vector::BroadcastOp::create(b_, vF, ninf);
          Value vScale = vector::BroadcastOp::create(b_, vF, scale);
          Value vLog2e = vector::BroadcastOp::create(b_, vF, log2e);
          Value kv0I32 = arith::IndexCastOp::create(b_, i32_, kv0);
          Value colsI32 = arith::IndexCastOp::create(b_, i32_, cols);
          auto scoreLoop = [&](bool withMask) {
            auto l = loop(c0, cIdx(BN), W, {vNinf}, [&](Value c, ValueRange it) {
              Value cI32 = arith::IndexCastOp::create(b_, i32_, c);
              Value col = arith::AddIOp::create(
                  b_, vector::BroadcastOp::create(b_, vI, cI32), iota);
              Value kvv = arith::AddIOp::create(
                  b_, vector::BroadcastOp::create(b_, vI, kv0I32), col);
              Value sv = arith::MulFOp::create(
                  b_, vector::LoadOp::create(b_, vF, S, ValueRange{add(sRow, c)}),
                  vScale);
              llvm::DenseMap<Value, Value> args;
              args[scoreBlock.getArgument(0)] = sv;
              args[scoreBlock.getArgument(4)] = kvv;
              sv = emitModifierVec(scoreBlock, args, scoreU, scoreUni, W);
              sv = arith::MulFOp::create(b_, sv, vLog2e);
              if (withMask) {
                Value inRange = arith::CmpIOp::create(
                    b_, arith::CmpIPredicate::slt, col,
                    vector::BroadcastOp::create(b_, vI, colsI32));
                llvm::DenseMap<Value, Value> margs;
                margs[maskBlock.getArgument(3)] = kvv;
                Value m = emitModifierVec(maskBlock, margs, maskU, maskUni, W);
                sv = select(arith::AndIOp::create(b_, inRange, m), sv, vNinf);
              }
              vector::StoreOp::create(b_, sv, S, ValueRange{add(sRow, c)});
              return SmallVector<Value>{arith::MaximumFOp::create(b_, it[0], sv)};
            });
            return Value(vector::ReductionOp::create(
                b_, vector::CombiningKind::MAXIMUMF, l.getResult(0)));
          };
          auto branch = scf::IfOp::create(b_, TypeRange{f32_}, skipMask,
                                          /*withElse=*/true);
          {
            OpBuilder::InsertionGuard g(b_);
            b_.setInsertionPointToStart(branch.thenBlock());
            scf::YieldOp::create(b_, scoreLoop(false));
            b_.setInsertionPointToStart(branch.elseBlock());
            scf::YieldOp::create(b_, scoreLoop(true));
          }
          Value rowMax = branch.getResult(0);
          Value mOld = load(M, r);
          Value mNew = arith::MaximumFOp::create(b_, mOld, rowMax);
          Value isNinf = arith::CmpFOp::create(b_, arith::CmpFPredicate::OEQ,
                                               mNew, ninf);
          Value mUse = select(isNinf, zeroF, mNew);
          Value alpha = math::Exp2Op::create(b_, arith::SubFOp::create(b_, mOld, mUse));
          Value vM = vector::BroadcastOp::create(b_, vF, mUse);
          Value vZero = vector::BroadcastOp::create(b_, vF, zeroF);
          auto sumv = loop(c0, cIdx(BN), W, {vZero}, [&](Value c, ValueRange it) {
            Value p = math::Exp2Op::create(
                b_, arith::SubFOp::create(
                        b_, vector::LoadOp::create(b_, vF, S, ValueRange{add(sRow, c)}),
                        vM));
            vector::StoreOp::create(b_, p, S, ValueRange{add(sRow, c)});
            return SmallVector<Value>{arith::AddFOp::create(b_, it[0], p)};
          });
          Value sum = vector::ReductionOp::create(b_, vector::CombiningKind::ADD,
                                                  sumv.getResult(0));
          store(arith::AddFOp::create(
                    b_, arith::MulFOp::create(b_, load(L, r), alpha), sum),
                L, r);
          store(mNew, M, r);
          store(alpha, Alpha, r);
        });
        // acc = acc * alpha + P . V, register-blocked like QK^T: RB rows x
        // CBP vectors of VWP value dims per step over the keys.
        loop0(c0, rowsUp, RB, [&](Value r) {
          loop0(c0, cIdx(DV), VWP * CBP, [&](Value d0) {
            SmallVector<Value> init;
            for (int64_t i = 0; i < RB; ++i) {
              Value alphaV = vector::BroadcastOp::create(
                  b_, vecPV, load(Alpha, add(r, cIdx(i))));
              for (int64_t j = 0; j < CBP; ++j) {
                Value at = add(mul(add(r, cIdx(i)), cIdx(DV)),
                               add(d0, cIdx(j * VWP)));
                init.push_back(arith::MulFOp::create(
                    b_, vector::LoadOp::create(b_, vecPV, Acc, ValueRange{at}),
                    alphaV));
              }
            }
            SmallVector<Value> pv =
                outerProduct(S, BN, Vs, DV, r, d0, BN, RB, CBP, vecPV, init);
            for (int64_t i = 0; i < RB; ++i)
              for (int64_t j = 0; j < CBP; ++j)
                vector::StoreOp::create(
                    b_, pv[i * CBP + j], Acc,
                    ValueRange{add(mul(add(r, cIdx(i)), cIdx(DV)),
                                   add(d0, cIdx(j * VWP)))});
          });
        });
    });

    // Epilogue: O = acc / l (0 for fully masked rows), LSE = ln(sum e^s).
    loop0(c0, rows, 1, [&](Value r) {
      emitRowEpilogue(e, it, r, load(M, r), load(L, r), [&](Value d) {
        return load(Acc, add(mul(r, cIdx(DV)), d));
      });
    });
  });
  func::ReturnOp::create(b_);
  return success();
}

SmallVector<Value> ProgramBuilder::outerProduct(Value A, int64_t aStride, Value B,
                                          int64_t bStride, Value r, Value col0,
                                          int64_t depth, int64_t rb, int64_t cb,
                                          VectorType vt, ValueRange init) {
  int64_t W = vt.getNumElements();
  auto l = loop(cIdx(0), cIdx(depth), 1, init, [&](Value x, ValueRange acc) {
    SmallVector<Value> a, bv, next;
    for (int64_t i = 0; i < rb; ++i)
      a.push_back(vector::BroadcastOp::create(
          b_, vt, load(A, add(mul(add(r, cIdx(i)), cIdx(aStride)), x))));
    for (int64_t j = 0; j < cb; ++j)
      bv.push_back(vector::LoadOp::create(
          b_, vt, B, ValueRange{add(mul(x, cIdx(bStride)), add(col0, cIdx(j * W)))}));
    for (int64_t i = 0; i < rb; ++i)
      for (int64_t j = 0; j < cb; ++j)
        next.push_back(vector::FMAOp::create(b_, a[i], bv[j], acc[i * cb + j]));
    return next;
  });
  return SmallVector<Value>(l.getResults());
}

void ProgramBuilder::forTileRow(Value mem, Value row, Value stride, int64_t n,
                          Value keep, function_ref<void(Value, Value)> put,
                          function_ref<void(Value, Value)> put8) {
  Value zeroF = cF32(0.0);
  Value unit = arith::CmpIOp::create(b_, arith::CmpIPredicate::eq, stride,
                                     cIdx(1));
  auto ifUnit = scf::IfOp::create(b_, unit, /*withElse=*/true);
  OpBuilder::InsertionGuard g(b_);
  b_.setInsertionPoint(ifUnit.thenBlock()->getTerminator());
  VectorType v8 = VectorType::get({8}, f32_);
  Value zero8 = vector::BroadcastOp::create(b_, v8, zeroF);
  loop0(cIdx(0), cIdx(n), 8, [&](Value d) {
    Value x = vector::LoadOp::create(b_, VectorType::get({8}, elem_), mem,
                                     ValueRange{add(row, d)});
    if (elem_ != f32_)
      x = arith::ExtFOp::create(b_, v8, x);
    x = select(keep, x, zero8);
    if (put8) {
      put8(d, x);
      return;
    }
    for (int64_t lane = 0; lane < 8; ++lane)
      put(add(d, cIdx(lane)),
          vector::ExtractOp::create(b_, x, ArrayRef<int64_t>{lane}));
  });
  b_.setInsertionPoint(ifUnit.elseBlock()->getTerminator());
  loop0(cIdx(0), cIdx(n), 1, [&](Value d) {
    put(d, select(keep, toF32(load(mem, add(row, mul(d, stride)))), zeroF));
  });
}

} // namespace attnc::codegen
