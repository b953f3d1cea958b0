//===- CpuKernel.cpp - The CPU form of the flash program --------------------===//
//
// A func over a range of work items: Q, K^T, V, S/P and the accumulator in
// stack-allocated f32 tiles, register-blocked vector micro-kernels for both
// matrix products, scalar modifiers and softmax that LLVM vectorizes.
//
//===----------------------------------------------------------------------===//
#include "attnc/Codegen/KernelForm.h"
#include "ProgramBuilder.h"

using namespace mlir;
namespace abi = attnc::rt::abi;

namespace attnc::codegen {
namespace {

class CpuKernel : public ProgramBuilder {
public:
  CpuKernel(ModuleOp module, attn::VariantOp v, const MaskAnalysis &mask,
            const FlashConfig &cfg)
      : ProgramBuilder(module, v, mask, cfg) {
    // Register blocking: RB rows at a time; CB vectors of keys (QK^T) and
    // CBP vectors of value dims (P.V), as many as the register file holds
    // (32 vector registers with AVX-512, 16 otherwise) and as divide the
    // tile evenly.
    RB = BM % 4 == 0 ? 4 : 1;
    int64_t cap = VW == 16 ? 4 : 2;
    auto fit = [&](int64_t n) {
      for (int64_t c : {4, 2, 1})
        if (c <= cap && n % c == 0)
          return c;
      return int64_t(1);
    };
    CB = fit(BN / VW);
    VWP = VW == 16 && DV % 16 == 0 ? 16 : 8;
    CBP = fit(DV / VWP);
  }
  LogicalResult build(StringRef name);

private:
  int64_t RB = 1, CB = 1, VWP = 8, CBP = 1;
};

LogicalResult CpuKernel::build(StringRef name) {
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

} // namespace
} // namespace attnc::codegen

namespace attnc {
namespace {

/// The host CPU's forward form: every request, its tiles as asked.
class CpuForm final : public KernelForm {
public:
  StringRef name() const override { return "cpu"; }
  Direction direction() const override { return Direction::Forward; }
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
    return {KernelEntry{"", {}, {}}};
  }
  LogicalResult build(Operation *, ModuleOp parent, attn::VariantOp v,
                      const MaskAnalysis &mask, const FlashConfig &config,
                      StringRef name) const override {
    const rt::KernelSpec &s = config.spec;
    if (s.blockN % config.vectorWidth)
      return v.emitError("invalid kernel configuration: blockN must be a "
                         "multiple of the vector width");
    parent->getContext()
        ->loadDialect<func::FuncDialect, memref::MemRefDialect,
                      scf::SCFDialect, vector::VectorDialect,
                      arith::ArithDialect, math::MathDialect>();
    codegen::CpuKernel kernel(parent, v, mask, config);
    return kernel.build(name);
  }
};

} // namespace

const KernelForm &cpuForm() {
  static const CpuForm form;
  return form;
}

} // namespace attnc
