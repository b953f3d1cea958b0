//===- VectorTiles.cpp - Vector micro-kernels over stack tiles ------------===//
//
// What the CPU forms (forward and backward) multiply and load tiles with:
// the register-blocked outer-product micro-kernel of both matrix products,
// and a K or V row read 8 elements at a time where the stride allows.
//
//===----------------------------------------------------------------------===//
#include "ProgramBuilder.h"

using namespace mlir;

namespace attnc::codegen {

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
