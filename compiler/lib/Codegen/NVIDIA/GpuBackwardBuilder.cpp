//===- GpuBackwardBuilder.cpp - What the GPU backward's forms share -------===//
//
// The backward entry (operands, strides of the backward's ip slots, the
// gradient buffer), a pair's P on the GPU, a block's work item, a row's
// delta, `_bwd_kv`'s key tiles and the zeroing of keys past a sequence's
// length (GpuBackwardBuilder.h).
//
//===----------------------------------------------------------------------===//
#include "GpuBackwardBuilder.h"
#include "WarpTileSearch.h"

#include "mlir/Dialect/LLVMIR/NVVMDialect.h"

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

std::pair<Value, Value>
GpuBackwardBuilder::visitedFrom(Value from, Value hi32, Value lane32,
                                function_ref<Tile(Value j, Value cls)> tileOf) {
  Type i8 = b_.getI8Type();
  auto idx = [&](Value x) {
    return arith::IndexCastUIOp::create(b_, b_.getIndexType(), x);
  };
  auto below = [&](Value j) {
    return arith::CmpIOp::create(b_, arith::CmpIPredicate::ult, j, hi32);
  };
  Value empty = arith::ConstantOp::create(b_, b_.getI8IntegerAttr(abi::kEmpty));
  auto classOf = [&](Value j, Value inRange) {
    return ifYield(inRange, ValueRange{empty}, [&] {
      return SmallVector<Value>{tileOf(idx(j), {}).cls};
    })[0];
  };
  if (mask_.kind != rt::MaskKind::Data) {
    // Tile by tile: a closed-form class is arithmetic.
    auto w =
        scf::WhileOp::create(b_, TypeRange{i32_, i8}, ValueRange{from, empty});
    OpBuilder::InsertionGuard guard(b_);
    SmallVector<Location> locs(2, b_.getLoc());
    Block *before = b_.createBlock(&w.getBefore(), {}, {i32_, i8}, locs);
    Value j = before->getArgument(0);
    Value inRange = below(j);
    Value cls = classOf(j, inRange);
    Value skip = arith::AndIOp::create(
        b_, inRange,
        arith::CmpIOp::create(b_, arith::CmpIPredicate::eq, cls, empty));
    scf::ConditionOp::create(b_, skip, ValueRange{j, cls});
    Block *after = b_.createBlock(&w.getAfter(), {}, {i32_, i8}, locs);
    scf::YieldOp::create(b_, ValueRange{arith::AddIOp::create(
                                            b_, after->getArgument(0), cI32(1)),
                                        after->getArgument(1)});
    return {w.getResult(0), w.getResult(1)};
  }
  // Tile `from` alone first (one class load: a dense mask visits it, and
  // its path stays that long); past an empty one, the warp's search.
  Value inRange = below(from);
  Value cls = classOf(from, inRange);
  Value hit = arith::AndIOp::create(
      b_, inRange,
      arith::CmpIOp::create(b_, arith::CmpIPredicate::ne, cls, empty));
  SmallVector<Value> r = ifElseYield(
      hit, TypeRange{i32_, i8},
      [&] {
        return SmallVector<Value>{from, cls};
      },
      [&] {
        auto [j, c] = firstVisitedByWarp(
            b_, lane32, arith::AddIOp::create(b_, from, cI32(1)), hi32,
            classOf);
        return SmallVector<Value>{j, c};
      });
  return {r[0], r[1]};
}

SmallVector<Value> GpuBackwardBuilder::forVisitedTiles(
    Value lo, Value hi, ValueRange init, Value lane32,
    function_ref<Tile(Value j, Value cls)> tileOf,
    function_ref<SmallVector<Value>(Value j, const Tile &, ValueRange)> body) {
  if (mask_.kind != rt::MaskKind::Data) {
    scf::ForOp tiles = loop(lo, hi, 1, init, [&](Value j, ValueRange acc) {
      Tile t = tileOf(j, {});
      return ifYield(t.visit, acc, [&] { return body(j, t, acc); });
    });
    return SmallVector<Value>(tiles.getResults());
  }
  auto u32 = [&](Value x) { return arith::IndexCastUIOp::create(b_, i32_, x); };
  auto idx = [&](Value x) {
    return arith::IndexCastUIOp::create(b_, b_.getIndexType(), x);
  };
  Value hi32 = u32(hi);
  // One search, in the loop's condition: from the tile after the last one
  // (lo first) to the next visited one.
  SmallVector<Value> args{u32(lo)};
  args.append(init.begin(), init.end());
  SmallVector<Type> types(ValueRange(args).getTypes());
  SmallVector<Type> found{i32_, b_.getI8Type()};
  found.append(init.getTypes().begin(), init.getTypes().end());
  auto w = scf::WhileOp::create(b_, found, args);
  OpBuilder::InsertionGuard guard(b_);
  Block *before =
      b_.createBlock(&w.getBefore(), {}, types,
                     SmallVector<Location>(types.size(), b_.getLoc()));
  auto [j, cls] = visitedFrom(before->getArgument(0), hi32, lane32, tileOf);
  SmallVector<Value> carried{j, cls};
  carried.append(before->getArguments().begin() + 1,
                 before->getArguments().end());
  scf::ConditionOp::create(
      b_, arith::CmpIOp::create(b_, arith::CmpIPredicate::ult, j, hi32),
      carried);
  Block *after =
      b_.createBlock(&w.getAfter(), {}, found,
                     SmallVector<Location>(found.size(), b_.getLoc()));
  Value at = after->getArgument(0);
  Tile t = tileOf(idx(at), after->getArgument(1));
  SmallVector<Value> yield{arith::AddIOp::create(b_, at, cI32(1))};
  yield.append(body(idx(at), t, after->getArguments().drop_front(2)));
  scf::YieldOp::create(b_, yield);
  return SmallVector<Value>(w.getResults().drop_front(2));
}

SmallVector<Value> GpuBackwardBuilder::forVisitedTilesStaged(
    Value lo, Value hi, ValueRange init, Value lane32,
    function_ref<Tile(Value j, Value cls)> tileOf,
    function_ref<void(Value j, const Tile &, Value stage)> prefetch,
    function_ref<SmallVector<Value>(Value j, const Tile &, Value stage,
                                    ValueRange)>
        body) {
  auto u32 = [&](Value x) { return arith::IndexCastUIOp::create(b_, i32_, x); };
  auto idx = [&](Value x) {
    return arith::IndexCastUIOp::create(b_, b_.getIndexType(), x);
  };
  auto below = [&](Value j, Value n) {
    return arith::CmpIOp::create(b_, arith::CmpIPredicate::ult, j, n);
  };
  Value hi32 = u32(hi);
  // The first visited tile's copy into stage 0.
  auto [first, firstCls] = visitedFrom(u32(lo), hi32, lane32, tileOf);
  ifThen(below(first, hi32),
         [&] { prefetch(idx(first), tileOf(idx(first), firstCls), cI32(0)); });
  NVVM::CpAsyncCommitGroupOp::create(b_);
  SmallVector<Value> args{first, firstCls, cI32(0)};
  args.append(init.begin(), init.end());
  SmallVector<Type> types(ValueRange(args).getTypes());
  auto w = scf::WhileOp::create(b_, types, args);
  OpBuilder::InsertionGuard guard(b_);
  SmallVector<Location> locs(types.size(), b_.getLoc());
  Block *before = b_.createBlock(&w.getBefore(), {}, types, locs);
  scf::ConditionOp::create(b_, below(before->getArgument(0), hi32),
                           before->getArguments());
  Block *after = b_.createBlock(&w.getAfter(), {}, types, locs);
  Value j = after->getArgument(0), cls = after->getArgument(1),
        stage = after->getArgument(2);
  Value other = arith::XOrIOp::create(b_, stage, cI32(1));
  // The next visited tile, and its copy into the other stage (which the
  // previous tile's body, ended by its barrier, no longer reads); then
  // this tile's copy, one group back, landed and published.
  auto [next, nextCls] =
      visitedFrom(arith::AddIOp::create(b_, j, cI32(1)), hi32, lane32, tileOf);
  ifThen(below(next, hi32),
         [&] { prefetch(idx(next), tileOf(idx(next), nextCls), other); });
  NVVM::CpAsyncCommitGroupOp::create(b_);
  NVVM::CpAsyncWaitGroupOp::create(b_, 1);
  gpu::BarrierOp::create(b_);
  Tile t = tileOf(idx(j), cls);
  SmallVector<Value> yield{next, nextCls, other};
  yield.append(body(idx(j), t, stage, after->getArguments().drop_front(3)));
  scf::YieldOp::create(b_, yield);
  return SmallVector<Value>(w.getResults().drop_front(3));
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
