//===- BlockMaskBuilder.cpp - The block-mask builder ------------------------===//
//
// For data-dependent masks: evaluates mask_mod over every (Q tile, KV
// tile) pair and stores its class, on the CPU over a range of items or on
// the GPU with one block per item.
//
//===----------------------------------------------------------------------===//
#include "ProgramBuilder.h"

using namespace mlir;
namespace abi = attnc::rt::abi;

namespace attnc::codegen {

LogicalResult ProgramBuilder::buildMaskBuilder(StringRef name,
                                               gpu::GPUModuleOp gpuModule) {
  auto dyn = [&](Type t) { return MemRefType::get({ShapedType::kDynamic}, t); };
  SmallVector<Type> args = {dyn(i64_), dyn(f32_), dyn(b_.getI8Type())};
  for (const rt::ParamSpec &p : info_.params)
    if (p.isTensor)
      args.push_back(dyn(storageType(ctx_, p.dtype)));
  OpBuilder::InsertionGuard guard(b_);
  Block *entry = createRangeEntry(name, args, gpuModule);
  b_.setInsertionPointToStart(entry);
  ValueRange fargs = entry->getArguments();
  ip_ = fargs[0];
  fp_ = fargs[1];
  Value out = fargs[2];
  captures_.clear();
  capDims_.clear();
  capStrides_.clear();
  scalars_.clear();
  loadEntryValues(fargs, 3);
  Value c0 = cIdx(0), c1 = cIdx(1);
  // CPU: items [begin, end), each KV tile in turn. GPU: one block per item
  // (the last operand is the launch's first item), its threads striding
  // over the KV tiles.
  Value begin, end, jBegin = c0, jStep = c1;
  if (gpuModule) {
    begin = add(toIdx(fargs.back()), gpu::BlockIdOp::create(b_, gpu::Dimension::x));
    end = add(begin, c1);
    jBegin = gpu::ThreadIdOp::create(b_, gpu::Dimension::x);
    jStep = gpu::BlockDimOp::create(b_, gpu::Dimension::x);
  } else {
    begin = toIdx(fargs[fargs.size() - 2]);
    end = toIdx(fargs.back());
  }
  Value B = ipAt(abi::kB), Hq = ipAt(abi::kHq), Lq = ipAt(abi::kLq),
        nQT = ipAt(abi::kNumQTiles), nKT = ipAt(abi::kNumKTiles),
        sB = ipAt(abi::kBMStrideB), sH = ipAt(abi::kBMStrideH);
  Value shared = arith::CmpIOp::create(b_, arith::CmpIPredicate::eq, sH, c0);
  Value heads = select(shared, c1, Hq);
  auto i8 = [&](int64_t c) {
    return arith::ConstantOp::create(b_, b_.getI8IntegerAttr(c));
  };
  loop0(begin, end, 1, [&](Value item) {
    Value qt = arith::RemUIOp::create(b_, item, nQT);
    Value t = arith::DivUIOp::create(b_, item, nQT);
    Value h = arith::RemUIOp::create(b_, t, heads);
    Value bb = arith::DivUIOp::create(b_, t, heads);
    Value kvLen = ipAt(add(cIdx(layout_.seqBase), bb));
    Value qpos0 = ipAt(add(add(cIdx(layout_.seqBase), B), bb));
    Value kvpos0 = firstKeyPosition(B, bb);
    Value r0 = mul(qt, cIdx(BM));
    Value rows = minI(cIdx(BM), sub(Lq, r0));
    Value bI32 = arith::IndexCastOp::create(b_, i32_, bb);
    Value hI32 = headIndex(h);
    loop0(jBegin, nKT, jStep, [&](Value j) {
      Value kv0 = mul(j, cIdx(BN));
      Value cols = maxI(c0, minI(cIdx(BN), sub(kvLen, kv0)));
      auto count = loop(c0, rows, 1, {c0}, [&](Value r, ValueRange it) {
        Value qpos = arith::IndexCastOp::create(b_, i32_, add(add(qpos0, r0), r));
        auto inner = loop(c0, cols, 1, {it[0]}, [&](Value c, ValueRange it2) {
          Value kvpos = keyPos(kvpos0, add(kv0, c));
          Value m = emitModifier(v_.getMaskBlock(), {bI32, hI32, qpos, kvpos});
          Value one = arith::IndexCastOp::create(
              b_, b_.getIndexType(), arith::ExtUIOp::create(b_, i64_, m));
          return SmallVector<Value>{add(it2[0], one)};
        });
        return SmallVector<Value>{inner.getResult(0)};
      });
      Value total = mul(rows, cols);
      Value n = count.getResult(0);
      Value none = arith::CmpIOp::create(b_, arith::CmpIPredicate::eq, n, c0);
      Value all = arith::CmpIOp::create(b_, arith::CmpIPredicate::eq, n, total);
      Value cls = select(none, i8(abi::kEmpty),
                         select(all, i8(abi::kFull), i8(abi::kPartial)));
      Value at = add(add(mul(bb, sB), mul(h, sH)), add(mul(qt, nKT), j));
      store(cls, out, at);
    });
  });
  if (gpuModule)
    gpu::ReturnOp::create(b_);
  else
    func::ReturnOp::create(b_);
  return success();
}

} // namespace attnc::codegen
