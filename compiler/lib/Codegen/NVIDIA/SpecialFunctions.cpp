//===- SpecialFunctions.cpp - exp, log and tanh on the GPU's MUFU unit ----===//
//
// exp(x)  = 2^t * (1 + c ln2), t = x log2(e) rounded, c its rounding error
//           (an fma and the low part of log2(e)): the product's rounding
//           costs |x| 2^-24 relative otherwise (40 ulp at x = 80); x is
//           clamped to [-104, 104] first (beyond, e^x is inf or 0 in f32)
//           so that c stays finite. One ex2, ~3 ulp.
// log(x)  = lg2(x) ln2: one lg2; absolute error ~1.2e-7 (what scores need;
//           relative error grows where log(x) nears 0).
// tanh(x) = sign(x) (1 - 2 / (2^(2|x| log2 e) + 1)) for |x| >= 0.55, and an
//           odd polynomial of degree 9 below (where the form above cancels):
//           one ex2 and one rcp, ~2 ulp (fitted and measured in f32 with
//           correctly rounded ex2 and rcp; the hardware adds its 2 ulp).
// x / y   = div.full.f32: a reciprocal on the unit and a multiply, with
//           the operands scaled where |y| is outside [2^-126, 2^126];
//           within 2 ulp over the full range (Triton's `/`, nvcc's
//           -prec-div=false) where IEEE's div.rn costs ~12 instructions
//           and a slow-path branch per division. A divisor the same for
//           a loop's iterations (softcap's cap) has its reciprocal and
//           scale computed once, before the loop: two multiplies per
//           division (emitDivision).
//
//===----------------------------------------------------------------------===//
#include "SpecialFunctions.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Interfaces/LoopLikeInterface.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

using namespace mlir;

namespace attnc {
namespace {

struct Emit {
  PatternRewriter &b;
  Location loc;
  Value c(float v) {
    return arith::ConstantOp::create(b, loc, b.getF32FloatAttr(v));
  }
  Value intrinsic(const char *name, Value x) {
    return LLVM::CallIntrinsicOp::create(b, loc, b.getF32Type(),
                                         b.getStringAttr(name), ValueRange{x})
        .getResult(0);
  }
  Value mul(Value x, Value y) { return arith::MulFOp::create(b, loc, x, y); }
  Value add(Value x, Value y) { return arith::AddFOp::create(b, loc, x, y); }
  Value fma(Value x, Value y, Value z) {
    return math::FmaOp::create(b, loc, x, y, z);
  }
  Value ex2(Value x) { return intrinsic("llvm.nvvm.ex2.approx.f32", x); }
  /// For arguments >= 0 (no subnormal result to keep).
  Value ex2Ftz(Value x) {
    return intrinsic("llvm.nvvm.ex2.approx.ftz.f32", x);
  }
  Value lg2(Value x) { return intrinsic("llvm.nvvm.lg2.approx.f", x); }
  Value rcp(Value x) { return intrinsic("llvm.nvvm.rcp.approx.ftz.f", x); }
};

constexpr float kLog2E = 1.44269502f;          // log2(e), rounded
constexpr float kLog2ELow = 1.92596299e-8f;    // log2(e) - kLog2E
constexpr float kLn2 = 0.693147182f;

Value emitExp(Emit &e, Value x) {
  // Clamped so that the error term stays finite: 2^(+-150) is already inf
  // or 0. Minimum/maximum pass NaN on (and with it the result).
  Value xc = arith::MinimumFOp::create(
      e.b, e.loc, arith::MaximumFOp::create(e.b, e.loc, x, e.c(-104.0f)),
      e.c(104.0f));
  Value t = e.mul(xc, e.c(kLog2E));
  Value err = e.fma(xc, e.c(kLog2E), arith::NegFOp::create(e.b, e.loc, t));
  Value c = e.fma(xc, e.c(kLog2ELow), err);
  return e.mul(e.ex2(t), e.fma(c, e.c(kLn2), e.c(1.0f)));
}

Value emitTanh(Emit &e, Value x) {
  Value a = math::AbsFOp::create(e.b, e.loc, x);
  // |x| >= 0.55: 1 - 2 / (e^(2|x|) + 1); e^(2|x|) = inf gives 1.
  Value big = e.fma(e.c(-2.0f), e.rcp(e.add(e.ex2Ftz(e.mul(a, e.c(2 * kLog2E))),
                                           e.c(1.0f))),
                    e.c(1.0f));
  // |x| < 0.55: |x| + |x|^3 p(x^2) (least squares on relative error).
  Value s = e.mul(a, a);
  Value p = e.fma(s, e.c(0.016652398f), e.c(-0.052783404f));
  p = e.fma(s, p, e.c(0.13322437f));
  p = e.fma(s, p, e.c(-0.33333018f));
  Value small = e.fma(e.mul(a, s), p, a);
  Value useSmall = arith::CmpFOp::create(e.b, e.loc, arith::CmpFPredicate::OLT,
                                         a, e.c(0.55f));
  Value t = arith::SelectOp::create(e.b, e.loc, useSmall, small, big);
  // NaN: |x| < 0.55 is false and big is NaN (ex2 and rcp pass it on).
  // llvm.copysign (PTX copysign), not math.copysign: the GPU lowering
  // sends that to libdevice.
  return LLVM::CallIntrinsicOp::create(e.b, e.loc, e.b.getF32Type(),
                                       e.b.getStringAttr("llvm.copysign.f32"),
                                       ValueRange{t, x})
      .getResult(0);
}

/// x / y. Where y is the same for every iteration of the loop around the
/// division (softcap's cap in the tile loop), its part is computed once
/// where y is defined: the scale s that div.full applies to both operands
/// (1/4 for |y| > 2^126, 2^24 for |y| < 2^-126, else 1) and k = 1/(y s)
/// correctly rounded; each division is then (x s) k, two multiplies where
/// div.full issued three (its two scalings predicated per division), and
/// within 1.5 ulp. Elsewhere div.full.
Value emitDivision(Emit &e, Operation *op) {
  Value x = op->getOperand(0), y = op->getOperand(1);
  auto loop = op->getParentOfType<LoopLikeOpInterface>();
  if (!loop || !loop.isDefinedOutsideOfLoop(y))
    return LLVM::CallIntrinsicOp::create(e.b, e.loc, e.b.getF32Type(),
                                         e.b.getStringAttr("llvm.nvvm.div.full"),
                                         ValueRange{x, y})
        .getResult(0);
  Value s, k;
  {
    OpBuilder::InsertionGuard guard(e.b);
    if (Operation *def = y.getDefiningOp())
      e.b.setInsertionPointAfter(def);
    else
      e.b.setInsertionPointToStart(cast<BlockArgument>(y).getOwner());
    Value a = math::AbsFOp::create(e.b, e.loc, y);
    auto less = [&](Value l, float r) {
      return arith::CmpFOp::create(e.b, e.loc, arith::CmpFPredicate::OLT, l,
                                   e.c(r));
    };
    Value huge = arith::CmpFOp::create(e.b, e.loc, arith::CmpFPredicate::OGT,
                                       a, e.c(0x1p126f));
    s = arith::SelectOp::create(
        e.b, e.loc, huge, e.c(0.25f),
        arith::SelectOp::create(e.b, e.loc, less(a, 0x1p-126f), e.c(0x1p24f),
                                e.c(1.0f)));
    k = LLVM::CallIntrinsicOp::create(e.b, e.loc, e.b.getF32Type(),
                                      e.b.getStringAttr("llvm.nvvm.rcp.rn.f"),
                                      ValueRange{e.mul(y, s)})
            .getResult(0);
  }
  return e.mul(e.mul(x, s), k);
}

struct SpecialFunction : RewritePattern {
  SpecialFunction(MLIRContext *ctx)
      : RewritePattern(MatchAnyOpTypeTag(), /*benefit=*/2, ctx) {}
  LogicalResult matchAndRewrite(Operation *op,
                                PatternRewriter &rewriter) const override {
    if (!isa<math::ExpOp, math::LogOp, math::TanhOp, arith::DivFOp>(op) ||
        !op->getResult(0).getType().isF32())
      return failure();
    Emit e{rewriter, op->getLoc()};
    if (isa<arith::DivFOp>(op)) {
      rewriter.replaceOp(op, emitDivision(e, op));
      return success();
    }
    Value x = op->getOperand(0);
    Value r;
    if (isa<math::ExpOp>(op))
      r = emitExp(e, x);
    else if (isa<math::LogOp>(op))
      r = e.mul(e.lg2(x), e.c(kLn2));
    else
      r = emitTanh(e, x);
    rewriter.replaceOp(op, r);
    return success();
  }
};

} // namespace

LogicalResult lowerSpecialFunctions(ModuleOp module) {
  RewritePatternSet patterns(module.getContext());
  patterns.add<SpecialFunction>(module.getContext());
  return applyPatternsGreedily(module, std::move(patterns));
}

} // namespace attnc
