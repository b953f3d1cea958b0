//===- SimtKernel.cpp - The SIMT GPU form -----------------------------------===//
//
// One block per work item, one thread per query row; K^T and V tiles in
// f32 shared memory. Used for f32 and head dims the tensor-core form does
// not take.
//
//===----------------------------------------------------------------------===//
#include "attnc/Codegen/KernelForm.h"
#include "attnc/Codegen/TileConfigTable.h"
#include "ProgramBuilder.h"

#include <algorithm>

using namespace mlir;
namespace abi = attnc::rt::abi;

namespace attnc::codegen {
namespace {

class SimtKernel : public ProgramBuilder {
public:
  using ProgramBuilder::ProgramBuilder;
  LogicalResult build(gpu::GPUModuleOp module, StringRef name);
};

LogicalResult SimtKernel::build(gpu::GPUModuleOp module, StringRef name) {
  SmallVector<Type> args = kernelArgs();
  OpBuilder::InsertionGuard guard(b_);
  b_.setInsertionPointToEnd(module.getBody());
  auto fn = gpu::GPUFuncOp::create(b_, name, b_.getFunctionType(args, {}));
  fn->setAttr(gpu::GPUDialect::getKernelFuncAttrName(), b_.getUnitAttr());
  auto shared = gpu::AddressSpaceAttr::get(ctx_, gpu::AddressSpace::Workgroup);
  Value Kt = fn.addWorkgroupAttribution(
      MemRefType::get({D * BN}, f32_, MemRefLayoutAttrInterface(), shared),
      fn.getLoc());
  Value Vs = fn.addWorkgroupAttribution(
      MemRefType::get({BN * DV}, f32_, MemRefLayoutAttrInterface(), shared),
      fn.getLoc());
  b_.setInsertionPointToStart(&fn.getBody().front());
  Entry e = loadEntry(fn.getArguments());
  Value q = e.q, k = e.k, v = e.v;
  Value item = add(toIdx(fn.getArgument(fn.getNumArguments() - 1)),
                   gpu::BlockIdOp::create(b_, gpu::Dimension::x));
  Value r = gpu::ThreadIdOp::create(b_, gpu::Dimension::x);
  const SmallVector<Value> &qs = e.qs, &ks = e.ks, &vs = e.vs;
  Value scale = e.scale, ninf = e.ninf, zeroF = e.zeroF, log2e = e.log2e;
  Value c0 = cIdx(0), c1 = cIdx(1);
  // Per-thread state: the query row, one row of scores, the accumulator,
  // and the running max and sum.
  Value Qp = alloca(D), Sp = alloca(BN), Acc = alloca(DV), ML = alloca(2);

  Item it = decodeItem(e, item);
  Value bb = it.b, bI32 = it.bI32, kBase = it.kBase, vBase = it.vBase;
  Value live =
      arith::CmpIOp::create(b_, arith::CmpIPredicate::slt, r, it.rows);
  // Rows past the end read the last row (their results are not stored).
  auto [hr, ir] = rowCoords(e, it, minI(r, sub(it.rows, c1)));
  Value qpos = arith::IndexCastOp::create(b_, i32_, add(it.qpos0, ir));
  Value hI32 = arith::IndexCastOp::create(b_, i32_, hr);
  Value qRow = add(add(mul(bb, qs[0]), mul(hr, qs[1])), mul(ir, qs[2]));
  loop0(c0, cIdx(D), 1, [&](Value d) {
    Value x = toF32(load(q, add(qRow, mul(d, qs[3]))));
    store(select(live, x, zeroF), Qp, d);
  });
  loop0(c0, cIdx(DV), 1, [&](Value d) { store(zeroF, Acc, d); });
  store(ninf, ML, c0);
  store(zeroF, ML, c1);

  // The class is the same for every thread of the block, so the barriers
  // inside are reached by all or none.
  forEachVisitedTile(it, [&](const Tile &tile) {
      Value kv0 = tile.kv0, cols = tile.cols, khi = tile.khi,
            skipMask = tile.skipMask;
      // The block's threads stage K^T and V (f32) in shared memory.
      // Contiguous and paged K/V each get their own copy of the loops.
      Value paged = arith::CmpIOp::create(b_, arith::CmpIPredicate::ne,
                                          ipAt(abi::kPageSize), c0);
      auto stage = [&](bool pagedRows) {
        auto rowOffset = [&](Value row, Value base, Value s2, int64_t slot) {
          return pagedRows ? pagedRowOffset(it, row, base, s2, slot)
                           : add(base, mul(row, s2));
        };
        loop0(r, cIdx(BN * D), BM, [&](Value idx) {
          Value c = arith::DivUIOp::create(b_, idx, cIdx(D));
          Value d = arith::RemUIOp::create(b_, idx, cIdx(D));
          Value in = arith::CmpIOp::create(b_, arith::CmpIPredicate::slt, c, cols);
          Value row = minI(add(kv0, c), khi);
          Value x = toF32(load(k, add(rowOffset(row, kBase, ks[2], abi::kKStride),
                                      mul(d, ks[3]))));
          store(select(in, x, zeroF), Kt, add(mul(d, cIdx(BN)), c));
        });
        loop0(r, cIdx(BN * DV), BM, [&](Value idx) {
          Value c = arith::DivUIOp::create(b_, idx, cIdx(DV));
          Value d = arith::RemUIOp::create(b_, idx, cIdx(DV));
          Value in = arith::CmpIOp::create(b_, arith::CmpIPredicate::slt, c, cols);
          Value row = minI(add(kv0, c), khi);
          Value x = toF32(load(v, add(rowOffset(row, vBase, vs[2], abi::kVStride),
                                      mul(d, vs[3]))));
          store(select(in, x, zeroF), Vs, add(mul(c, cIdx(DV)), d));
        });
      };
      ifThenElse(paged, [&] { stage(true); }, [&] { stage(false); });
      gpu::BarrierOp::create(b_);
      ifThen(live, [&] {
        auto mx = loop(c0, cIdx(BN), 1, {ninf}, [&](Value c, ValueRange it) {
          auto dot = loop(c0, cIdx(D), 1, {zeroF}, [&](Value d, ValueRange a) {
            Value prod = arith::MulFOp::create(
                b_, load(Qp, d), load(Kt, add(mul(d, cIdx(BN)), c)));
            return SmallVector<Value>{arith::AddFOp::create(b_, a[0], prod)};
          });
          Value kvpos = arith::IndexCastOp::create(b_, i32_, add(kv0, c));
          Value s = arith::MulFOp::create(b_, dot.getResult(0), scale);
          s = emitModifier(v_.getScoreBlock(), {s, bI32, hI32, qpos, kvpos});
          s = arith::MulFOp::create(b_, s, log2e);
          auto keep = scf::IfOp::create(b_, TypeRange{b_.getI1Type()}, skipMask,
                                        /*withElse=*/true);
          {
            OpBuilder::InsertionGuard g(b_);
            b_.setInsertionPointToStart(keep.thenBlock());
            scf::YieldOp::create(
                b_, Value(arith::ConstantOp::create(b_, b_.getBoolAttr(true))));
            b_.setInsertionPointToStart(keep.elseBlock());
            Value in = arith::CmpIOp::create(b_, arith::CmpIPredicate::slt, c, cols);
            Value m = emitModifier(v_.getMaskBlock(), {bI32, hI32, qpos, kvpos});
            scf::YieldOp::create(b_, Value(arith::AndIOp::create(b_, in, m)));
          }
          s = select(keep.getResult(0), s, ninf);
          store(s, Sp, c);
          return SmallVector<Value>{arith::MaximumFOp::create(b_, it[0], s)};
        });
        Value mOld = load(ML, c0);
        Value mNew = arith::MaximumFOp::create(b_, mOld, mx.getResult(0));
        Value isNinf = arith::CmpFOp::create(b_, arith::CmpFPredicate::OEQ, mNew, ninf);
        Value mUse = select(isNinf, zeroF, mNew);
        Value alpha = math::Exp2Op::create(b_, arith::SubFOp::create(b_, mOld, mUse));
        auto sum = loop(c0, cIdx(BN), 1, {zeroF}, [&](Value c, ValueRange it) {
          Value p = math::Exp2Op::create(
              b_, arith::SubFOp::create(b_, load(Sp, c), mUse));
          store(p, Sp, c);
          return SmallVector<Value>{arith::AddFOp::create(b_, it[0], p)};
        });
        store(mNew, ML, c0);
        store(arith::AddFOp::create(
                  b_, arith::MulFOp::create(b_, load(ML, c1), alpha),
                  sum.getResult(0)),
              ML, c1);
        loop0(c0, cIdx(DV), 1, [&](Value d) {
          auto pv = loop(c0, cIdx(BN), 1,
                         {arith::MulFOp::create(b_, load(Acc, d), alpha)},
                         [&](Value c, ValueRange a) {
                           Value prod = arith::MulFOp::create(
                               b_, load(Sp, c), load(Vs, add(mul(c, cIdx(DV)), d)));
                           return SmallVector<Value>{
                               arith::AddFOp::create(b_, a[0], prod)};
                         });
          store(pv.getResult(0), Acc, d);
        });
      });
      // Everyone is done with this tile before it is overwritten.
      gpu::BarrierOp::create(b_);
  });
  ifThen(live, [&] {
    emitRowEpilogue(e, it, r, load(ML, c0), load(ML, c1),
                    [&](Value d) { return load(Acc, d); });
  });
  gpu::ReturnOp::create(b_);
  return success();
}

} // namespace
} // namespace attnc::codegen

namespace attnc {
namespace {

constexpr int64_t kStaticShared = 48 * 1024;

/// The SIMT form: every request on a GPU; the KV tile shrinks until the K^T
/// and V tiles (f32) fit static shared memory.
class SimtForm final : public KernelForm {
public:
  StringRef name() const override { return "simt"; }
  Direction direction() const override { return Direction::Forward; }
  bool runsOn(StringRef target) const override {
    return isGpuTarget(target.str());
  }
  std::optional<rt::KernelSpec> configure(const rt::KernelSpec &request,
                                          StringRef) const override {
    rt::KernelSpec s = request;
    s.warps = 0;
    int64_t perKey = (s.headDim + s.vHeadDim) * 4;
    s.blockN = std::max<int64_t>(
        8, std::min<int64_t>(s.blockN, (kStaticShared / perKey) / 8 * 8));
    return s;
  }
  bool accepts(const rt::KernelSpec &s, StringRef) const override {
    return (s.headDim + s.vHeadDim) * 4 * s.blockN <= kStaticShared;
  }
  rt::TileConfig tileConfig(const rt::KernelSpec &s) const override {
    return rt::TileConfig{s.blockM, s.blockN, (s.blockM + 31) / 32, 1};
  }
  std::vector<KernelEntry> entries(const rt::KernelSpec &s,
                                   attn::VariantOp) const override {
    LaunchFacts l;
    l.threads = s.blockM; // a thread per query row
    l.staticSharedBytes = (s.headDim + s.vHeadDim) * s.blockN * 4;
    return {KernelEntry{"", l, {}}};
  }
  LogicalResult build(Operation *container, ModuleOp parent, attn::VariantOp v,
                      const MaskAnalysis &mask, const FlashConfig &config,
                      StringRef name) const override {
    parent->getContext()
        ->loadDialect<gpu::GPUDialect, memref::MemRefDialect, scf::SCFDialect,
                      arith::ArithDialect, math::MathDialect,
                      vector::VectorDialect>();
    codegen::SimtKernel kernel(parent, v, mask, config);
    return kernel.build(cast<gpu::GPUModuleOp>(container), name);
  }
};

} // namespace

const KernelForm &simtForm() {
  static const SimtForm form;
  return form;
}

} // namespace attnc
