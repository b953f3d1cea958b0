//===- SimtBackwardKernel.cpp - The SIMT GPU form of the backward pass -----===//
//
// Two gpu.funcs, one block per work item, FlashAttention-2's backward split
// as on the CPU (CpuBackwardKernel.cpp) so that dQ, dK and dV rows each have
// one writer:
//
//   <name>_bwd_q   items (b, head, Q tile), one thread per query row: forms
//                  its row's delta = rowsum(dO * O) - dLSE (and stores it
//                  for _bwd_kv), then for each visited KV tile (K and V
//                  staged in shared memory, f32) recomputes s and dP per key
//                  and adds dX k into the row's dQ.
//   <name>_bwd_kv  items (b, kv head, KV tile), one thread per key: for each
//                  query head of the group and each Q tile that is not
//                  empty (Q, dO, LSE and delta staged in shared memory),
//                  adds P dO into the key's dV and dX q into its dK;
//                  score_grad's accumulates are atomic adds into the shared
//                  gradient buffer. Keys past a sequence's length (up
//                  to the K/V capacity) get zero gradients.
//
// Empty tiles are skipped and full ones skip mask_mod, as in the forward.
// Operands: KernelABI.h (the GPU backward entries); `_bwd_q` runs first.
//
//===----------------------------------------------------------------------===//
#include "attnc/Codegen/KernelForm.h"
#include "attnc/Codegen/TileConfigTable.h"
#include "GpuBackwardBuilder.h"

using namespace mlir;
namespace abi = attnc::rt::abi;

namespace attnc::codegen {
namespace {

class SimtBackward : public GpuBackwardBuilder {
public:
  using GpuBackwardBuilder::GpuBackwardBuilder;

  LogicalResult lowerQueryGrads(flash::KernelOp kernel, gpu::GPUModuleOp module);
  LogicalResult lowerKeyValueGrads(flash::KernelOp kernel,
                                   gpu::GPUModuleOp module);

private:
  /// sum over d < n of a[d] * b(d) (a: a thread's f32 row).
  Value dot(Value a, int64_t n, function_ref<Value(Value)> b);
  /// row[d] += a * x(d) for d < n (row: a thread's f32 row).
  void axpy(Value row, int64_t n, Value a, function_ref<Value(Value)> x);
  /// Whether a key of tile `t` is kept: the row has keys (`rowLive`) and
  /// the tile skips the mask or mask_mod(b, h, qpos, kv) holds.
  Value keepKey(const Tile &t, Value rowLive, Value b, Value h, Value qpos,
                Value kv);
};

} // namespace

namespace {

Value SimtBackward::dot(Value a, int64_t n,
                              function_ref<Value(Value)> bAt) {
  auto f = loop(cIdx(0), cIdx(n), 1, {cF32(0.0)}, [&](Value d, ValueRange acc) {
    Value prod = arith::MulFOp::create(b_, load(a, d), bAt(d));
    return SmallVector<Value>{arith::AddFOp::create(b_, acc[0], prod)};
  });
  return f.getResult(0);
}

void SimtBackward::axpy(Value row, int64_t n, Value a,
                              function_ref<Value(Value)> x) {
  loop0(cIdx(0), cIdx(n), 1, [&](Value d) {
    store(arith::AddFOp::create(b_, load(row, d),
                                arith::MulFOp::create(b_, a, x(d))),
          row, d);
  });
}

Value SimtBackward::keepKey(const Tile &t, Value rowLive, Value b,
                                  Value h, Value qpos, Value kv) {
  auto keep = scf::IfOp::create(b_, TypeRange{b_.getI1Type()}, t.skipMask,
                                /*withElse=*/true);
  OpBuilder::InsertionGuard g(b_);
  b_.setInsertionPointToStart(keep.thenBlock());
  scf::YieldOp::create(b_, rowLive);
  b_.setInsertionPointToStart(keep.elseBlock());
  scf::YieldOp::create(b_, keptByMask(rowLive, b, h, qpos, kv));
  return keep.getResult(0);
}

LogicalResult SimtBackward::lowerQueryGrads(flash::KernelOp kernel,
                                            gpu::GPUModuleOp module) {
  FailureOr<PairSection> found = backwardSection(kernel, "bwd_q");
  if (failed(found))
    return failure();
  PairSection sec = *found;
  StringRef name = kernel.getSymName();
  OpBuilder::InsertionGuard guard(b_);
  Entry e;
  Extra x;
  gpu::GPUFuncOp fn =
      createEntry(module, name, {{BN * D, f32_}, {BN * DV, f32_}}, e, x);
  Value Ks = fn.getWorkgroupAttributions()[0],
        Vs = fn.getWorkgroupAttributions()[1];
  Value c0 = cIdx(0), c1 = cIdx(1), zeroF = e.zeroF;
  Value item = blockItem(x);
  Value r = gpu::ThreadIdOp::create(b_, gpu::Dimension::x);
  Value Qp = alloca(D), dOp = alloca(DV), dQ = alloca(D);

  Item it = decodeItem(e, item);
  Value live = arith::CmpIOp::create(b_, arith::CmpIPredicate::slt, r, it.rows);
  // Rows past the end read the last row (their results are not stored).
  // (Values, not structured bindings: lambdas below capture them.)
  std::pair<Value, Value> hi = rowCoords(e, it, minI(r, sub(it.rows, c1)));
  Value h = hi.first, i = hi.second;
  Value qpos = arith::IndexCastOp::create(b_, i32_, add(it.qpos0, i));
  Value hI32 = headIndex(h);
  Value qRow = offset4(e.qs, it.b, h, i);
  loop0(c0, cIdx(D), 1, [&](Value d) {
    store(toF32(load(e.q, add(qRow, mul(d, e.qs[3])))), Qp, d);
    store(zeroF, dQ, d);
  });
  // delta = rowsum(dO * O) - dLSE, stored for _bwd_kv.
  Value delta = rowDelta(e, x, it.b, h, i,
                         [&](Value d, Value g) { store(g, dOp, d); });
  Value lse = load(e.lse, offset4(e.ls, it.b, h, i));
  Value rowLive =
      arith::CmpFOp::create(b_, arith::CmpFPredicate::ONE, lse, e.ninf);
  ifThen(live, [&] {
    store(delta, x.delta, deltaAt(e, it.b, h, i));
  });

  // The class is the same for every thread of the block, so the barriers
  // inside are reached by all or none.
  forEachVisitedTile(it, [&](const Tile &t) {
    // K and V rows (f32) in shared memory, zero past the tile's keys.
    stageRows(Ks, BN, D, t.cols, r, BM, [&](Value c, Value d) {
      Value row = add(t.kv0, c);
      return load(e.k, add(add(it.kBase, mul(row, e.ks[2])), mul(d, e.ks[3])));
    }, [&](Value c, Value d) { return add(mul(c, cIdx(D)), d); });
    stageRows(Vs, BN, DV, t.cols, r, BM, [&](Value c, Value d) {
      Value row = add(t.kv0, c);
      return load(e.v, add(add(it.vBase, mul(row, e.vs[2])), mul(d, e.vs[3])));
    }, [&](Value c, Value d) { return add(mul(c, cIdx(DV)), d); });
    gpu::BarrierOp::create(b_);
    ifThen(live, [&] {
      loop0(c0, t.cols, 1, [&](Value c) {
        Value kBase = mul(c, cIdx(D)), vBase = mul(c, cIdx(DV));
        Value s = dot(Qp, D, [&](Value d) { return load(Ks, add(kBase, d)); });
        Value dp = dot(dOp, DV, [&](Value d) { return load(Vs, add(vBase, d)); });
        Value kv = keyPos(t.pos0, c);
        ifThen(keepKey(t, rowLive, it.bI32, hI32, qpos, kv), [&] {
          Value dx = pairValues(sec, e, s, dp, lse, delta, it.bI32, hI32,
                                qpos, kv)
                         .second;
          axpy(dQ, D, dx, [&](Value d) { return load(Ks, add(kBase, d)); });
        });
      });
    });
    // Everyone is done with this tile before it is overwritten.
    gpu::BarrierOp::create(b_);
  });
  ifThen(live, [&] {
    Value at = offset4(x.dqs, it.b, h, i);
    loop0(c0, cIdx(D), 1, [&](Value d) {
      store(fromF32(load(dQ, d)), x.dq, add(at, mul(d, x.dqs[3])));
    });
  });
  gpu::ReturnOp::create(b_);
  return success();
}

LogicalResult SimtBackward::lowerKeyValueGrads(flash::KernelOp kernel,
                                               gpu::GPUModuleOp module) {
  FailureOr<PairSection> found = backwardSection(kernel, "bwd_kv");
  if (failed(found))
    return failure();
  PairSection sec = *found;
  StringRef name = kernel.getSymName();
  OpBuilder::InsertionGuard guard(b_);
  Entry e;
  Extra x;
  gpu::GPUFuncOp fn =
      createEntry(module, name,
                  {{BM * D, f32_}, {BM * DV, f32_}, {BM, f32_}, {BM, f32_}}, e, x);
  ArrayRef<BlockArgument> sh = fn.getWorkgroupAttributions();
  Value Qs = sh[0], dOs = sh[1], Ls = sh[2], Ds = sh[3];
  Value c0 = cIdx(0), c1 = cIdx(1), zeroF = e.zeroF;
  Value c = gpu::ThreadIdOp::create(b_, gpu::Dimension::x);
  Value Kp = alloca(D), Vp = alloca(DV), dK = alloca(D), dV = alloca(DV);

  KeyTile k = decodeKeyTile(blockItem(x));
  Value b = k.b, kvh = k.kvh, kt = k.kt, kv0 = k.kv0, cols = k.cols;
  // A KV tile past this sequence's keys has nothing to do (the whole block).
  ifThen(arith::CmpIOp::create(b_, arith::CmpIPredicate::sgt, cols, c0), [&] {
    Value live = arith::CmpIOp::create(b_, arith::CmpIPredicate::slt, c, cols);
    Value key = add(kv0, minI(c, sub(cols, c1)));
    Value kv = keyPos(k.kvpos0, key);
    Item first = queryItem(e, k, mul(kvh, e.G), c0);
    auto itemAt = [&](Value h, Value qt) {
      return queryItem(e, k, h, qt, &first);
    };
    loop0(c0, cIdx(D), 1, [&](Value d) {
      store(toF32(load(e.k, add(add(first.kBase, mul(key, e.ks[2])),
                                mul(d, e.ks[3])))),
            Kp, d);
      store(zeroF, dK, d);
    });
    loop0(c0, cIdx(DV), 1, [&](Value d) {
      store(toF32(load(e.v, add(add(first.vBase, mul(key, e.vs[2])),
                                mul(d, e.vs[3])))),
            Vp, d);
      store(zeroF, dV, d);
    });
    loop0(c0, e.G, 1, [&](Value g) {
      Value h = add(mul(kvh, e.G), g);
      Value hI32 = headIndex(h);
      IRMapping inv = maskInvariants(k, hI32);
      loop0(c0, e.nQT, 1, [&](Value qt) {
        Item it = itemAt(h, qt);
        Tile t = tileAt(it, kt, inv);
        // The class is the block's: the barriers are reached by all or none.
        ifThen(t.visit, [&] {
          // The tile's Q and dO rows (f32), LSE and delta in shared memory;
          // rows past the end are zero with LSE -inf.
          stageRows(Qs, BM, D, it.rows, c, BN, [&](Value r, Value d) {
            Value row = add(it.r0, r);
            return load(e.q, add(offset4(e.qs, b, h, row), mul(d, e.qs[3])));
          }, [&](Value r, Value d) { return add(mul(r, cIdx(D)), d); });
          stageRows(dOs, BM, DV, it.rows, c, BN, [&](Value r, Value d) {
            Value row = add(it.r0, r);
            return load(e.o, add(offset4(e.os, b, h, row), mul(d, e.os[3])));
          }, [&](Value r, Value d) { return add(mul(r, cIdx(DV)), d); });
          loop0(c, cIdx(BM), BN, [&](Value r) {
            Value in = arith::CmpIOp::create(b_, arith::CmpIPredicate::slt, r, it.rows);
            Value row = add(it.r0, minI(r, sub(it.rows, c1)));
            Value lse = load(e.lse, offset4(e.ls, b, h, row));
            store(select(in, lse, e.ninf), Ls, r);
            Value delta = load(x.delta, deltaAt(e, b, h, row));
            store(select(in, delta, zeroF), Ds, r);
          });
          gpu::BarrierOp::create(b_);
          ifThen(live, [&] {
            loop0(c0, it.rows, 1, [&](Value r) {
              Value qBase = mul(r, cIdx(D)), gBase = mul(r, cIdx(DV));
              Value s = dot(Kp, D, [&](Value d) { return load(Qs, add(qBase, d)); });
              Value dp = dot(Vp, DV, [&](Value d) { return load(dOs, add(gBase, d)); });
              Value lse = load(Ls, r), delta = load(Ds, r);
              Value qpos = arith::IndexCastOp::create(
                  b_, i32_, add(it.qpos0, add(it.r0, r)));
              // A row with no key (LSE -inf) has P = 0 everywhere.
              Value rowLive = arith::CmpFOp::create(
                  b_, arith::CmpFPredicate::ONE, lse, e.ninf);
              ifThen(keepKey(t, rowLive, it.bI32, hI32, qpos, kv), [&] {
                std::pair<Value, Value> pdx = pairValues(
                    sec, e, s, dp, lse, delta, it.bI32, hI32, qpos, kv);
                axpy(dV, DV, pdx.first,
                     [&](Value d) { return load(dOs, add(gBase, d)); });
                axpy(dK, D, pdx.second,
                     [&](Value d) { return load(Qs, add(qBase, d)); });
              });
            });
          });
          gpu::BarrierOp::create(b_);
        });
      });
    });
    ifThen(live, [&] {
      Value kAt = offset4(x.dks, b, kvh, key), vAt = offset4(x.dvs, b, kvh, key);
      loop0(c0, cIdx(D), 1, [&](Value d) {
        store(fromF32(load(dK, d)), x.dk, add(kAt, mul(d, x.dks[3])));
      });
      loop0(c0, cIdx(DV), 1, [&](Value d) {
        store(fromF32(load(dV, d)), x.dv, add(vAt, mul(d, x.dvs[3])));
      });
    });
  });
  // Keys past this sequence's length (up to the K/V capacity) get 0.
  zeroKeyPastLength(k, x, c);
  gpu::ReturnOp::create(b_);
  return success();
}

} // namespace
} // namespace attnc::codegen

namespace attnc {
namespace {

constexpr int64_t kStaticShared = 48 * 1024;

/// The SIMT backward: every request on a GPU. One f32 tile of Q and dO
/// rows (or K and V rows) in static shared memory (48 KiB): 32 rows when
/// they fit, else 16; a thread per row or key.
class SimtBackwardForm final : public KernelForm {
public:
  StringRef name() const override { return "simt"; }
  Direction direction() const override { return Direction::Backward; }
  bool runsOn(StringRef target) const override {
    return isGpuTarget(target.str());
  }
  std::optional<rt::KernelSpec> configure(const rt::KernelSpec &request,
                                          StringRef) const override {
    rt::KernelSpec s = request;
    int64_t rowBytes = (s.headDim + s.vHeadDim) * 4 + 8;
    s.blockM = s.blockN = rowBytes * 32 <= kStaticShared ? 32 : 16;
    s.warps = 0;
    return s;
  }
  bool accepts(const rt::KernelSpec &s, StringRef) const override {
    return s.blockM == s.blockN &&
           ((s.headDim + s.vHeadDim) * 4 + 8) * s.blockM <= kStaticShared;
  }
  rt::TileConfig tileConfig(const rt::KernelSpec &s) const override {
    return rt::TileConfig{s.blockM, s.blockN, (s.blockM + 31) / 32, 1};
  }
  std::vector<KernelEntry> entries(const rt::KernelSpec &s,
                                   attn::VariantOp) const override {
    int64_t row = (s.headDim + s.vHeadDim) * 4;
    LaunchFacts q, kv;
    q.threads = s.blockM;
    q.staticSharedBytes = s.blockN * row;
    kv.threads = s.blockN;
    kv.staticSharedBytes = s.blockM * (row + 8);
    return {KernelEntry{"_bwd_q", q, {}}, KernelEntry{"_bwd_kv", kv, {}}};
  }
  LogicalResult lower(flash::KernelOp kernel, const MaskAnalysis &mask,
                      Operation *container) const override {
    kernel->getContext()
        ->loadDialect<gpu::GPUDialect, memref::MemRefDialect, scf::SCFDialect,
                      arith::ArithDialect, math::MathDialect,
                      vector::VectorDialect>();
    auto module = cast<gpu::GPUModuleOp>(container);
    codegen::SimtBackward lowering(kernel->getParentOfType<ModuleOp>(),
                                   variantOf(kernel), mask, configOf(kernel));
    if (failed(kernel.getKind() == "bwd_kv"
                   ? lowering.lowerKeyValueGrads(kernel, module)
                   : lowering.lowerQueryGrads(kernel, module)))
      return failure();
    kernel.erase();
    return success();
  }
};

} // namespace

const KernelForm &simtBackwardForm() {
  static const SimtBackwardForm form;
  return form;
}

} // namespace attnc
