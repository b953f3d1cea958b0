//===- GpuBackwardBuilder.cpp - What the GPU backward's forms share -------===//
//
// The backward entry (operands, strides of the backward's ip slots, the
// gradient buffer), a pair's P on the GPU, a block's work item, a row's
// delta, `_bwd_kv`'s key tiles and the zeroing of keys past a sequence's
// length (GpuBackwardBuilder.h).
//
//===----------------------------------------------------------------------===//
#include "GpuBackwardBuilder.h"

using namespace mlir;
namespace abi = attnc::rt::abi;

namespace attnc::codegen {

Value GpuBackwardBuilder::probability(const Entry &e, Value s, Value sm,
                                      Value lse) {
  // score_mod the identity: sm is scale s, and s scale - lse one FMA.
  auto scaled = sm.getDefiningOp<arith::MulFOp>();
  bool plain = scaled && scaled.getLhs() == s && scaled.getRhs() == e.scale;
  Value x;
  if (lseLog2e_) {
    Value l = arith::NegFOp::create(b_, lseLog2e_);
    x = plain ? math::FmaOp::create(b_, s, arith::MulFOp::create(b_, e.scale, e.log2e), l)
              : math::FmaOp::create(b_, sm, e.log2e, l);
  } else {
    Value t = plain ? Value(math::FmaOp::create(b_, s, e.scale,
                                                arith::NegFOp::create(b_, lse)))
                    : Value(arith::SubFOp::create(b_, sm, lse));
    x = arith::MulFOp::create(b_, t, e.log2e);
  }
  return LLVM::CallIntrinsicOp::create(
             b_, f32_, b_.getStringAttr("llvm.nvvm.ex2.approx.ftz.f32"), ValueRange{x})
      .getResult(0);
}

Value GpuBackwardBuilder::smallExponents(ArrayRef<Value> l) {
  Value small = arith::ConstantOp::create(b_, b_.getBoolAttr(true));
  for (Value x : l)
    small = arith::AndIOp::create(
        b_, small,
        arith::CmpFOp::create(b_, arith::CmpFPredicate::OLT,
                              math::AbsFOp::create(b_, x), cF32(1024.0f)));
  return NVVM::VoteSyncOp::create(b_, b_.getI1Type(), cI32(-1), small,
                                  NVVM::VoteSyncKind::all);
}

FailureOr<PairSection> backwardSection(flash::KernelOp kernel, StringRef kind) {
  if (kernel.getKind() != kind)
    return kernel.emitOpError("expected a ") << kind << " kernel";
  Block *loopBody = nullptr;
  for (Operation &op : kernel.getBlock()) {
    if (auto l = dyn_cast<flash::ForTilesOp>(op); l && kind == "bwd_q")
      loopBody = &l.getBody().front();
    else if (auto l = dyn_cast<flash::ForQueryTilesOp>(op); l && kind == "bwd_kv")
      loopBody = &l.getBody().front();
    else if (!isa<flash::WorkItemOp, flash::LoadQueryOp, flash::LoadRowsOp,
                   flash::ZeroAccOp, flash::StoreGradOp, flash::KvTileOfOp,
                   flash::LoadKeyValueOp>(op))
      return op.emitOpError("is not lowered by the GPU backward forms");
  }
  if (!loopBody)
    return kernel.emitOpError("has no tile loop");
  FailureOr<PairSection> sec = findPairSection(*loopBody);
  if (failed(sec))
    return failure();
  if (kind == "bwd_q" ? !sec->dq : (!sec->dk || !sec->dv))
    return kernel.emitOpError("does not accumulate the gradients of its kind");
  return sec;
}

int64_t dynamicSharedBytes(ArrayRef<std::pair<int64_t, int64_t>> countAndBytes) {
  int64_t at = 0;
  for (auto [n, bytes] : countAndBytes)
    at = (at + 15) / 16 * 16 + n * bytes;
  return at;
}

gpu::GPUFuncOp GpuBackwardBuilder::createEntry(gpu::GPUModuleOp module,
                                               StringRef name,
                                               ArrayRef<SharedBuffer> shared,
                                               Entry &e, Extra &x,
                                               bool dynamic) {
  SmallVector<Type> args = kernelArgs();
  args.pop_back(); // the forward's first item
  unsigned first = args.size();
  auto dyn = [&](Type t) { return MemRefType::get({ShapedType::kDynamic}, t); };
  args.append({dyn(elem_), dyn(f32_), dyn(f32_), dyn(elem_), dyn(elem_),
               dyn(elem_), dyn(f32_), i64_});
  b_.setInsertionPointToEnd(module.getBody());
  auto fn = gpu::GPUFuncOp::create(b_, name, b_.getFunctionType(args, {}));
  fn->setAttr(gpu::GPUDialect::getKernelFuncAttrName(), b_.getUnitAttr());
  auto space = gpu::AddressSpaceAttr::get(ctx_, gpu::AddressSpace::Workgroup);
  shared_.clear();
  if (!dynamic) {
    for (const SharedBuffer &buf : shared) {
      fn.addWorkgroupAttribution(
          MemRefType::get({buf.n}, buf.type, MemRefLayoutAttrInterface(), space),
          fn.getLoc());
      fn.setWorkgroupAttributionAttr(fn.getNumWorkgroupAttributions() - 1,
                                     b_.getStringAttr("llvm.align"),
                                     b_.getI64IntegerAttr(16));
    }
    for (BlockArgument a : fn.getWorkgroupAttributions())
      shared_.push_back(a);
  }
  b_.setInsertionPointToStart(&fn.getBody().front());
  if (dynamic) {
    Value raw = gpu::DynamicSharedMemoryOp::create(
        b_, MemRefType::get({ShapedType::kDynamic}, b_.getI8Type(),
                            MemRefLayoutAttrInterface(), space));
    int64_t at = 0;
    for (const SharedBuffer &buf : shared) {
      at = (at + 15) / 16 * 16;
      shared_.push_back(memref::ViewOp::create(
          b_, MemRefType::get({buf.n}, buf.type, MemRefLayoutAttrInterface(),
                              space),
          raw, cIdx(at), ValueRange{}));
      at += buf.n * buf.type.getIntOrFloatBitWidth() / 8;
    }
  }
  e = loadEntry(fn.getArguments());
  auto arg = [&](unsigned i) { return fn.getArgument(first + i); };
  x.fwdO = arg(0);
  x.dLse = arg(1);
  x.delta = arg(2);
  x.dq = arg(3);
  x.dk = arg(4);
  x.dv = arg(5);
  x.grads = arg(6);
  x.first = toIdx(arg(7));
  bindGradients(x.grads, /*atomic=*/true);
  Value base = afterSequences(e.B);
  auto slot = [&](int64_t s) { return ipAt(add(base, cIdx(s))); };
  for (int d = 0; d < 4; ++d) {
    x.os.push_back(slot(abi::kBwdOStride + d));
    x.dqs.push_back(slot(abi::kBwdDqStride + d));
    x.dks.push_back(slot(abi::kBwdDkStride + d));
    x.dvs.push_back(slot(abi::kBwdDvStride + d));
  }
  for (int d = 0; d < 3; ++d)
    x.dls.push_back(slot(abi::kBwdDLseStride + d));
  x.hasDLse = arith::CmpIOp::create(b_, arith::CmpIPredicate::ne,
                                    slot(abi::kBwdHasDLse), cIdx(0));
  return fn;
}

Value GpuBackwardBuilder::blockItem(const Extra &x) {
  return add(x.first, gpu::BlockIdOp::create(b_, gpu::Dimension::x));
}

Value GpuBackwardBuilder::rowDelta(const Entry &e, const Extra &x, Value b,
                                   Value h, Value i,
                                   function_ref<void(Value, Value)> onGrad) {
  Value oRow = offset4(e.os, b, h, i), fRow = offset4(x.os, b, h, i);
  auto rowSum = loop(cIdx(0), cIdx(DV), 1, {e.zeroF}, [&](Value d, ValueRange acc) {
    Value g = toF32(load(e.o, add(oRow, mul(d, e.os[3]))));
    if (onGrad)
      onGrad(d, g);
    Value o = toF32(load(x.fwdO, add(fRow, mul(d, x.os[3]))));
    return SmallVector<Value>{
        arith::AddFOp::create(b_, acc[0], arith::MulFOp::create(b_, g, o))};
  });
  Value delta = rowSum.getResult(0);
  return ifYield(x.hasDLse, ValueRange{delta}, [&] {
    Value g = load(x.dLse, offset4(x.dls, b, h, i));
    return SmallVector<Value>{arith::SubFOp::create(b_, delta, g)};
  })[0];
}

GpuBackwardBuilder::KeyTile GpuBackwardBuilder::decodeKeyTile(Value item) {
  KeyTile k;
  Value nKT = ipAt(abi::kNumKTiles), Hkv = ipAt(abi::kHkv);
  k.kt = arith::RemUIOp::create(b_, item, nKT);
  Value rest = arith::DivUIOp::create(b_, item, nKT);
  k.kvh = arith::RemUIOp::create(b_, rest, Hkv);
  k.b = arith::DivUIOp::create(b_, rest, Hkv);
  k.kvLen = ipAt(add(cIdx(layout_.seqBase), k.b));
  k.kvpos0 = firstKeyPosition(ipAt(abi::kB), k.b);
  k.kv0 = mul(k.kt, cIdx(BN));
  k.cols = minI(cIdx(BN), sub(k.kvLen, k.kv0));
  return k;
}

IRMapping GpuBackwardBuilder::maskInvariants(const KeyTile &k, Value hI32) {
  IRMapping inv;
  inv.map(v_.getMaskBlock().getArgument(0),
          arith::IndexCastOp::create(b_, i32_, k.b));
  inv.map(v_.getMaskBlock().getArgument(1), hI32);
  materializeMaskInvariants(inv);
  return inv;
}

void GpuBackwardBuilder::zeroKeyPastLength(const KeyTile &k, const Extra &x,
                                           Value c) {
  Value key = add(k.kv0, c);
  Value past = arith::AndIOp::create(
      b_, arith::CmpIOp::create(b_, arith::CmpIPredicate::sge, c, k.cols),
      arith::CmpIOp::create(b_, arith::CmpIPredicate::slt, key,
                            ipAt(abi::kLkv)));
  ifThen(past, [&] {
    Value zero = fromF32(cF32(0.0)), c0 = cIdx(0);
    Value kAt = offset4(x.dks, k.b, k.kvh, key),
          vAt = offset4(x.dvs, k.b, k.kvh, key);
    loop0(c0, cIdx(D), 1, [&](Value d) {
      store(zero, x.dk, add(kAt, mul(d, x.dks[3])));
    });
    loop0(c0, cIdx(DV), 1, [&](Value d) {
      store(zero, x.dv, add(vAt, mul(d, x.dvs[3])));
    });
  });
}

} // namespace attnc::codegen
