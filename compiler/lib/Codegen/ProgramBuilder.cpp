//===- ProgramBuilder.cpp - Entry values and work items ---------------------===//
//
// What every kernel form starts from: the ABI entry (problem-wide values,
// captures and scalars read once), a work item's coordinates, its rows,
// and the epilogue writing a row of O and its LSE.
//
//===----------------------------------------------------------------------===//
#include "ProgramBuilder.h"

using namespace mlir;
namespace abi = attnc::rt::abi;

namespace attnc::codegen {

void ProgramBuilder::loadEntryValues(ValueRange fnArgs, unsigned firstCapture) {
  unsigned argNo = firstCapture;
  for (size_t i = 0; i < info_.params.size(); ++i) {
    const rt::ParamSpec &p = info_.params[i];
    captures_.push_back({});
    capDims_.push_back({});
    capStrides_.push_back({});
    scalars_.push_back({});
    if (!p.isTensor) {
      if (p.dtype == rt::DType::F32)
        scalars_.back() = load(fp_, cIdx(1 + i));
      else if (p.dtype == rt::DType::Bool)
        scalars_.back() = arith::CmpIOp::create(
            b_, arith::CmpIPredicate::ne, load(ip_, cIdx(layout_.paramBase + i)),
            arith::ConstantOp::create(b_, b_.getI64IntegerAttr(0)));
      else
        scalars_.back() = arith::TruncIOp::create(
            b_, i32_, load(ip_, cIdx(layout_.paramBase + i)));
      continue;
    }
    captures_.back() = fnArgs[argNo++];
    int64_t base = layout_.captureBase[i], r = p.dims.size();
    // A literal extent (`f32[H, 256]`) as a constant: the runtime has
    // checked the capture's, and gathers' clamps fold against it.
    for (int64_t d = 0; d < r; ++d) {
      capDims_.back().push_back(p.dims[d].symbol.empty() ? cIdx(p.dims[d].size)
                                                         : ipAt(base + d));
      capStrides_.back().push_back(ipAt(base + r + d));
    }
  }
}

ProgramBuilder::Entry ProgramBuilder::loadEntry(ValueRange fnArgs) {
  Entry e;
  e.q = fnArgs[0];
  e.k = fnArgs[1];
  e.v = fnArgs[2];
  e.o = fnArgs[3];
  e.lse = fnArgs[4];
  ip_ = fnArgs[5];
  fp_ = fnArgs[6];
  bm_ = fnArgs[7];
  loadEntryValues(fnArgs, 8);
  e.Hq = ipAt(abi::kHq);
  e.Lq = ipAt(abi::kLq);
  e.B = ipAt(abi::kB);
  e.nQT = ipAt(abi::kNumQTiles);
  e.G = arith::DivUIOp::create(b_, e.Hq, ipAt(abi::kHkv));
  e.P = ipAt(abi::kPackHeads);
  for (int d = 0; d < 4; ++d) {
    e.qs.push_back(ipAt(abi::kQStride + d));
    e.ks.push_back(ipAt(abi::kKStride + d));
    e.vs.push_back(ipAt(abi::kVStride + d));
    e.os.push_back(ipAt(abi::kOStride + d));
  }
  for (int d = 0; d < 3; ++d)
    e.ls.push_back(ipAt(abi::kLseStride + d));
  e.hasLse = arith::CmpIOp::create(
      b_, arith::CmpIPredicate::ne, load(ip_, cIdx(abi::kHasLse)),
      arith::ConstantOp::create(b_, b_.getI64IntegerAttr(0)));
  e.scale = load(fp_, cIdx(0));
  auto word = [&](int64_t slot) -> Value {
    return arith::TruncIOp::create(b_, i32_, load(ip_, cIdx(slot)));
  };
  e.dropThreshold = word(abi::kDropThreshold);
  e.dropScale = arith::BitcastOp::create(b_, f32_, word(abi::kDropScaleBits));
  e.dropKey0 = word(abi::kDropKey0);
  e.dropKey1 = word(abi::kDropKey1);
  e.ninf = cF32(-std::numeric_limits<double>::infinity());
  e.zeroF = cF32(0.0);
  e.log2e = cF32(1.4426950408889634);
  e.ln2 = cF32(0.6931471805599453);
  return e;
}

ProgramBuilder::Item ProgramBuilder::decodeItem(const Entry &e, Value item,
                                                bool heavyFirst) {
  Value heads = arith::DivUIOp::create(b_, e.Hq, e.P); // item heads
  Value splits = ipAt(abi::kNumSplits);
  Value split = arith::RemUIOp::create(b_, item, splits);
  item = arith::DivUIOp::create(b_, item, splits);
  Value qt = arith::RemUIOp::create(b_, item, e.nQT);
  if (heavyFirst)
    qt = sub(sub(e.nQT, cIdx(1)), qt);
  Value t = arith::DivUIOp::create(b_, item, e.nQT);
  Value hi = arith::RemUIOp::create(b_, t, heads);
  return itemAt(e, arith::DivUIOp::create(b_, t, heads), mul(hi, e.P), qt,
                split);
}

ProgramBuilder::Item ProgramBuilder::itemAt(const Entry &e, Value b, Value h,
                                            Value qt, Value split, Value kvh) {
  Item it;
  it.qt = qt;
  it.b = b;
  it.h = h;
  it.kvh = kvh ? kvh : arith::DivUIOp::create(b_, it.h, e.G).getResult();
  it.kvLen = ipAt(add(cIdx(layout_.seqBase), it.b));
  it.qpos0 = ipAt(add(add(cIdx(layout_.seqBase), e.B), it.b));
  it.kvpos0 = firstKeyPosition(e.B, it.b);
  it.r0 = mul(it.qt, cIdx(BM));
  it.rows = minI(cIdx(BM), sub(mul(e.P, e.Lq), it.r0));
  it.bI32 = arith::IndexCastOp::create(b_, i32_, it.b);
  it.hI32 = headIndex(it.h);
  // The tile's query positions: exact when its rows stay within one head,
  // else every position of the chunk (conservative for classification).
  Value i0 = arith::RemUIOp::create(b_, it.r0, e.Lq);
  Value oneHead = arith::CmpIOp::create(b_, arith::CmpIPredicate::ule,
                                        add(i0, it.rows), e.Lq);
  it.qlo = add(it.qpos0, select(oneHead, i0, cIdx(0)));
  it.qhi = add(it.qpos0, select(oneHead, sub(add(i0, it.rows), cIdx(1)),
                                sub(e.Lq, cIdx(1))));
  // The split's KV tiles (all of them when S = 1: kSplitTiles >= nKT).
  Value nKT = arith::CeilDivUIOp::create(b_, it.kvLen, cIdx(BN));
  Value per = ipAt(abi::kSplitTiles);
  it.jlo = minI(mul(split, per), nKT);
  it.jhi = minI(add(it.jlo, per), nKT);
  it.oB = add(mul(split, e.B), it.b);
  it.kBase = add(mul(it.b, e.ks[0]), mul(it.kvh, e.ks[1]));
  it.vBase = add(mul(it.b, e.vs[0]), mul(it.kvh, e.vs[1]));
  return it;
}

ProgramBuilder::Item ProgramBuilder::headTileItem(const Entry &e,
                                                  const Item &first, Value h,
                                                  Value qt) {
  Item it = first; // the sequence's and KV head's values, the split's tiles
  it.qt = qt;
  it.h = h;
  it.hI32 = headIndex(h);
  it.r0 = mul(qt, cIdx(BM));
  it.rows = minI(cIdx(BM), sub(e.Lq, it.r0));
  it.qlo = add(it.qpos0, it.r0);
  it.qhi = add(it.qlo, sub(it.rows, cIdx(1)));
  return it;
}

Value ProgramBuilder::pageOf(const Item &it, Value row) {
  Value pages = afterSequences(ipAt(abi::kB));
  Value first = ipAt(add(pages, it.b));
  Value entry =
      add(first, arith::DivUIOp::create(b_, row, ipAt(abi::kPageSize)));
  return ipAt(add(add(pages, ipAt(abi::kB)), entry));
}

Value ProgramBuilder::pagedRowOffset(const Item &it, Value row, Value base,
                                     Value s2, int64_t stride0Slot) {
  Value inPage = arith::RemUIOp::create(b_, row, ipAt(abi::kPageSize));
  return add(add(base, mul(sub(pageOf(it, row), it.b), ipAt(stride0Slot))),
             mul(inPage, s2));
}

std::pair<Value, Value> ProgramBuilder::rowCoords(const Entry &e, const Item &it,
                                            Value r) {
  Value p = add(it.r0, r);
  Value h = add(it.h, arith::DivUIOp::create(b_, p, e.Lq));
  return {h, arith::RemUIOp::create(b_, p, e.Lq)};
}

void ProgramBuilder::emitRowEpilogue(const Entry &e, const Item &it, Value r,
                               Value m, Value l,
                               function_ref<Value(Value)> acc) {
  // l == 0: no key (0, LSE -inf); a NaN l (non-finite scores) propagates.
  Value pos = arith::CmpFOp::create(b_, arith::CmpFPredicate::UNE, l, e.zeroF);
  Value invL = select(pos, arith::DivFOp::create(b_, cF32(1.0), l), e.zeroF);
  auto [h, i] = rowCoords(e, it, r);
  Value oRow = add(add(mul(it.oB, e.os[0]), mul(h, e.os[1])), mul(i, e.os[2]));
  loop0(cIdx(0), cIdx(DV), 1, [&](Value d) {
    Value x = arith::MulFOp::create(b_, acc(d), invL);
    store(fromF32(x), e.o, add(oRow, mul(d, e.os[3])));
  });
  ifThen(e.hasLse, [&] {
    Value lg = arith::MulFOp::create(
        b_, arith::AddFOp::create(b_, m, math::Log2Op::create(b_, l)), e.ln2);
    Value at = add(add(mul(it.oB, e.ls[0]), mul(h, e.ls[1])), mul(i, e.ls[2]));
    store(select(pos, lg, e.ninf), e.lse, at);
  });
}

void ProgramBuilder::stageRows(Value dst, int64_t rows, int64_t width,
                               Value count, Value tid, int64_t threads,
                               function_ref<Value(Value, Value)> read,
                               function_ref<Value(Value, Value)> at) {
  Type dt = cast<MemRefType>(dst.getType()).getElementType();
  loop0(tid, cIdx(rows * width), threads, [&](Value idx) {
    Value r = arith::DivUIOp::create(b_, idx, cIdx(width));
    Value d = arith::RemUIOp::create(b_, idx, cIdx(width));
    Value in = arith::CmpIOp::create(b_, arith::CmpIPredicate::slt, r, count);
    Value x = read(minI(r, sub(count, cIdx(1))), d);
    if (x.getType() != dt)
      x = dt == f32_ ? toF32(x) : Value(arith::TruncFOp::create(b_, dt, x));
    Value zero = arith::ConstantOp::create(b_, b_.getZeroAttr(dt));
    store(select(in, x, zero), dst, at(r, d));
  });
}

Block *ProgramBuilder::createRangeEntry(StringRef name, SmallVector<Type> args,
                                        gpu::GPUModuleOp gpuModule) {
  args.push_back(i64_);
  if (!gpuModule) {
    args.push_back(i64_);
    auto fn = func::FuncOp::create(b_, name, b_.getFunctionType(args, {}));
    return fn.addEntryBlock();
  }
  b_.setInsertionPointToEnd(gpuModule.getBody());
  auto fn = gpu::GPUFuncOp::create(b_, name, b_.getFunctionType(args, {}));
  fn->setAttr(gpu::GPUDialect::getKernelFuncAttrName(), b_.getUnitAttr());
  return &fn.getBody().front();
}

SmallVector<Type> ProgramBuilder::kernelArgs() {
  auto dyn = [&](Type t) { return MemRefType::get({ShapedType::kDynamic}, t); };
  SmallVector<Type> args = {dyn(elem_), dyn(elem_), dyn(elem_), dyn(elem_),
                            dyn(f32_),  dyn(i64_),  dyn(f32_),
                            dyn(b_.getI8Type())};
  for (const rt::ParamSpec &p : info_.params)
    if (p.isTensor)
      args.push_back(dyn(storageType(ctx_, p.dtype)));
  args.push_back(i64_); // first work item of this launch
  return args;
}

} // namespace attnc::codegen

namespace attnc::codegen {

Value ProgramBuilder::dropoutFactor(const Entry &e, Value b, Value h, Value q,
                                    Value kv) {
  return dropoutFactorOf(e, philoxBlock(e, b, h, q, kv), kv);
}

std::array<Value, 4> ProgramBuilder::philoxBlock(const Entry &e, Value b,
                                                 Value h, Value q, Value kv) {
  Type t = kv.getType();
  auto splat = [&](Value x) -> Value {
    return x.getType() == t ? x : Value(vector::BroadcastOp::create(b_, t, x));
  };
  auto word = [&](uint32_t x) -> Value {
    return splat(arith::ConstantOp::create(
        b_, b_.getI32IntegerAttr(static_cast<int32_t>(x))));
  };
  // Philox 4x32-10 (Dropout.h) of counter (kv / 4, q, h, b).
  Value c[4] = {arith::ShRUIOp::create(b_, kv, word(2)), splat(q), splat(h),
                splat(b)};
  Value k0 = e.dropKey0, k1 = e.dropKey1;
  for (int round = 0; round < 10; ++round) {
    auto p0 = arith::MulUIExtendedOp::create(b_, word(0xD2511F53u), c[0]);
    auto p1 = arith::MulUIExtendedOp::create(b_, word(0xCD9E8D57u), c[2]);
    Value n0 = arith::XOrIOp::create(
        b_, arith::XOrIOp::create(b_, p1.getHigh(), c[1]), splat(k0));
    Value n2 = arith::XOrIOp::create(
        b_, arith::XOrIOp::create(b_, p0.getHigh(), c[3]), splat(k1));
    c[0] = n0;
    c[1] = p1.getLow();
    c[2] = n2;
    c[3] = p0.getLow();
    // The key schedule is uniform: scalars, broadcast where used.
    k0 = arith::AddIOp::create(
        b_, k0, arith::ConstantOp::create(b_, b_.getI32IntegerAttr(
                                                  int32_t(0x9E3779B9u))));
    k1 = arith::AddIOp::create(
        b_, k1, arith::ConstantOp::create(b_, b_.getI32IntegerAttr(
                                                  int32_t(0xBB67AE85u))));
  }
  return {c[0], c[1], c[2], c[3]};
}

Value ProgramBuilder::dropoutFactorOf(const Entry &e,
                                      const std::array<Value, 4> &c, Value kv) {
  Type t = kv.getType();
  auto splat = [&](Value x) -> Value {
    return x.getType() == t ? x : Value(vector::BroadcastOp::create(b_, t, x));
  };
  auto word = [&](uint32_t x) -> Value {
    return splat(arith::ConstantOp::create(
        b_, b_.getI32IntegerAttr(static_cast<int32_t>(x))));
  };
  // Word kv % 4 of the block.
  Value lane = arith::AndIOp::create(b_, kv, word(3));
  auto is = [&](uint32_t i) {
    return arith::CmpIOp::create(b_, arith::CmpIPredicate::eq, lane, word(i));
  };
  Value w = arith::SelectOp::create(
      b_, is(0), c[0],
      arith::SelectOp::create(
          b_, is(1), c[1], arith::SelectOp::create(b_, is(2), c[2], c[3])));
  Value keep = arith::CmpIOp::create(b_, arith::CmpIPredicate::uge, w,
                                     splat(e.dropThreshold));
  Type ft = t == i32_ ? Type(f32_)
                      : Type(VectorType::get(cast<VectorType>(t).getShape(),
                                             f32_));
  Value zero = arith::ConstantOp::create(b_, b_.getZeroAttr(ft));
  Value scale = e.dropScale;
  if (ft != f32_)
    scale = vector::BroadcastOp::create(b_, ft, scale);
  return arith::SelectOp::create(b_, keep, scale, zero);
}

Value ProgramBuilder::dropoutFactorLanes(const Entry &e, Value b, Value h,
                                         Value q, Value kv0, int64_t W) {
  assert(W % 4 == 0 && "lanes in whole Philox blocks");
  int64_t n = W / 4;
  VectorType vn = VectorType::get({n}, i32_), vw = VectorType::get({W}, i32_);
  // The blocks' first keys kv0 + 4 j.
  SmallVector<int32_t> steps;
  for (int64_t j = 0; j < n; ++j)
    steps.push_back(int32_t(4 * j));
  Value firsts = arith::AddIOp::create(
      b_, vector::BroadcastOp::create(b_, vn, kv0),
      arith::ConstantOp::create(
          b_, DenseElementsAttr::get(vn, ArrayRef<int32_t>(steps))));
  std::array<Value, 4> c = philoxBlock(e, b, h, q, firsts);
  // Lane 4 j + r takes word r of block j: interleave (c0, c1) and (c2, c3)
  // pairwise, then the two pair vectors.
  SmallVector<int64_t> pairs, quads;
  for (int64_t j = 0; j < n; ++j) {
    pairs.push_back(j);
    pairs.push_back(n + j);
  }
  for (int64_t j = 0; j < n; ++j)
    for (int64_t r = 0; r < 4; ++r)
      quads.push_back(r < 2 ? 2 * j + r : 2 * n + 2 * j + (r - 2));
  Value c01 = vector::ShuffleOp::create(b_, c[0], c[1], pairs);
  Value c23 = vector::ShuffleOp::create(b_, c[2], c[3], pairs);
  Value w = vector::ShuffleOp::create(b_, c01, c23, quads);
  Value keep = arith::CmpIOp::create(
      b_, arith::CmpIPredicate::uge, w,
      vector::BroadcastOp::create(b_, vw, e.dropThreshold));
  VectorType vf = VectorType::get({W}, f32_);
  return arith::SelectOp::create(
      b_, keep, vector::BroadcastOp::create(b_, vf, e.dropScale),
      arith::ConstantOp::create(b_, b_.getZeroAttr(vf)));
}

} // namespace attnc::codegen
