//===- SplitMerge.cpp - The split-KV merge entry ----------------------------===//
//
// A split launch leaves S partial rows per output row: each split's output
// normalized over its own keys, and its LSE (-inf when it saw no key). The
// merge weighs them by exp(LSE_s - max LSE), so that
//   O = sum_s w_s O_s / sum_s w_s,  LSE = max LSE + log(sum_s w_s),
// exactly what one pass over every key gives; a row no split saw is 0 with
// LSE -inf, and a NaN LSE (non-finite scores) propagates. On the CPU a func
// over [begin, end) rows; on the GPU one block per row, its threads over
// the value dims.
//
//===----------------------------------------------------------------------===//
#include "ProgramBuilder.h"

using namespace mlir;
namespace abi = attnc::rt::abi;

namespace attnc::codegen {

LogicalResult ProgramBuilder::buildMerge(StringRef name,
                                         gpu::GPUModuleOp gpuModule) {
  auto dyn = [&](Type t) { return MemRefType::get({ShapedType::kDynamic}, t); };
  OpBuilder::InsertionGuard guard(b_);
  Block *entry = createRangeEntry(
      name, {dyn(elem_), dyn(f32_), dyn(elem_), dyn(f32_), dyn(i64_)},
      gpuModule);
  b_.setInsertionPointToStart(entry);
  ValueRange fargs = entry->getArguments();
  Value opart = fargs[0], lpart = fargs[1], o = fargs[2], lse = fargs[3];
  ip_ = fargs[4];
  Value c0 = cIdx(0);
  Value B = ipAt(abi::kB), Hq = ipAt(abi::kHq), Lq = ipAt(abi::kLq);
  Value S = ipAt(abi::kNumSplits);
  Value rowsAll = mul(mul(B, Hq), Lq);
  SmallVector<Value> os, ls;
  for (int d = 0; d < 4; ++d)
    os.push_back(ipAt(abi::kOutStride + d));
  for (int d = 0; d < 3; ++d)
    ls.push_back(ipAt(abi::kOutLseStride + d));
  Value hasLse = arith::CmpIOp::create(
      b_, arith::CmpIPredicate::ne, load(ip_, cIdx(abi::kOutHasLse)),
      arith::ConstantOp::create(b_, b_.getI64IntegerAttr(0)));
  Value ninf = cF32(-std::numeric_limits<double>::infinity());
  Value zero = cF32(0.0), one = cF32(1.0);
  Value log2e = cF32(1.4426950408889634), ln2 = cF32(0.6931471805599453);

  Value wbuf; // the CPU's weights, one per split
  auto mergeRow = [&](Value r, Value tid, int64_t lanes) {
    // The largest LSE, then the weights' sum.
    Value m = loop(c0, S, 1, {ninf}, [&](Value s, ValueRange it) {
                return SmallVector<Value>{arith::MaximumFOp::create(
                    b_, it[0], load(lpart, add(mul(s, rowsAll), r)))};
              }).getResult(0);
    Value empty = arith::CmpFOp::create(b_, arith::CmpFPredicate::OEQ, m, ninf);
    Value mSafe = select(empty, zero, m);
    auto weight = [&](Value s) {
      Value x = arith::SubFOp::create(b_, load(lpart, add(mul(s, rowsAll), r)),
                                      mSafe);
      return math::Exp2Op::create(b_, arith::MulFOp::create(b_, x, log2e));
    };
    Value w = loop(c0, S, 1, {zero}, [&](Value s, ValueRange it) {
                return SmallVector<Value>{
                    arith::AddFOp::create(b_, it[0], weight(s))};
              }).getResult(0);
    Value invW = select(empty, zero, arith::DivFOp::create(b_, one, w));
    // The row's coordinates in O and LSE.
    Value i = arith::RemUIOp::create(b_, r, Lq);
    Value t = arith::DivUIOp::create(b_, r, Lq);
    Value h = arith::RemUIOp::create(b_, t, Hq);
    Value bb = arith::DivUIOp::create(b_, t, Hq);
    Value oRow = add(add(mul(bb, os[0]), mul(h, os[1])), mul(i, os[2]));
    auto rowBase = [&](Value s) { return mul(add(mul(s, rowsAll), r), cIdx(DV)); };
    auto put = [&](Value d, Value sum) {
      Value x = arith::MulFOp::create(b_, sum, invW);
      store(fromF32(x), o, add(oRow, mul(d, os[3])));
    };
    if (lanes == 1) {
      // The CPU: the weights once into a buffer, then each value dim.
      loop0(c0, S, 1, [&](Value s) { store(weight(s), wbuf, s); });
      loop0(c0, cIdx(DV), 1, [&](Value d) {
        Value sum = loop(c0, S, 1, {zero}, [&](Value s, ValueRange it) {
                      Value x = toF32(load(opart, add(rowBase(s), d)));
                      return SmallVector<Value>{arith::AddFOp::create(
                          b_, it[0], arith::MulFOp::create(b_, load(wbuf, s), x))};
                    }).getResult(0);
        put(d, sum);
      });
    } else {
      // The GPU: thread tid's value dims d = tid + k * lanes, accumulated
      // in registers over the splits.
      int64_t per = (DV + lanes - 1) / lanes;
      auto dim = [&](int64_t k) { return add(tid, cIdx(k * lanes)); };
      auto inRange = [&](Value d) {
        return arith::CmpIOp::create(b_, arith::CmpIPredicate::ult, d, cIdx(DV));
      };
      SmallVector<Value> init(per, zero);
      scf::ForOp accLoop =
          loop(c0, S, 1, init, [&](Value s, ValueRange it) {
            Value ws = weight(s);
            SmallVector<Value> next;
            for (int64_t k = 0; k < per; ++k) {
              // Threads past DV read the row's element 0 (never stored).
              Value d = dim(k);
              Value at = add(rowBase(s), select(inRange(d), d, c0));
              next.push_back(arith::AddFOp::create(
                  b_, it[k],
                  arith::MulFOp::create(b_, ws, toF32(load(opart, at)))));
            }
            return next;
          });
      SmallVector<Value> acc(accLoop.getResults());
      for (int64_t k = 0; k < per; ++k) {
        if (lanes * per == DV)
          put(dim(k), acc[k]);
        else
          ifThen(inRange(dim(k)), [&] { put(dim(k), acc[k]); });
      }
    }
    Value first = arith::CmpIOp::create(b_, arith::CmpIPredicate::eq, tid, c0);
    ifThen(arith::AndIOp::create(b_, hasLse, first), [&] {
      Value lg = arith::AddFOp::create(
          b_, mSafe,
          arith::MulFOp::create(b_, math::Log2Op::create(b_, w), ln2));
      Value at = add(add(mul(bb, ls[0]), mul(h, ls[1])), mul(i, ls[2]));
      store(select(empty, ninf, lg), lse, at);
    });
  };

  if (gpuModule) {
    Value r = add(toIdx(fargs[5]), gpu::BlockIdOp::create(b_, gpu::Dimension::x));
    Value tid = gpu::ThreadIdOp::create(b_, gpu::Dimension::x);
    mergeRow(r, tid, abi::kMergeThreads);
    gpu::ReturnOp::create(b_);
  } else {
    wbuf = alloca(abi::kMaxSplits);
    loop0(toIdx(fargs[5]), toIdx(fargs[6]), 1,
          [&](Value r) { mergeRow(r, c0, 1); });
    func::ReturnOp::create(b_);
  }
  return success();
}

} // namespace attnc::codegen
