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
// With fastmath `afn` (score_mod and score_grad in the tensor-core kernels,
// which round P and dS to 16 bits: ProgramBuilder::scoreFlags), the forms
// that need only absolute accuracy (P's rounding is a relative 2^-9 to
// 2^-12):
// tanh(x) = 1 - 2 / (2^(2x log2 e) + 1) for every x: one ex2, one rcp, no
//           polynomial, no select, no sign, within 2e-7 absolute (its
//           relative error grows as tanh(x) nears 0); c * tanh(x) with c
//           the same for every score (softcap's cap) puts c in the last
//           FMA, and tanh(y / c') takes the division into its exponent,
//           with y's own invariant factor (the score's scale) where it
//           has one: one multiply per score (lowerTanhAbsolute);
// exp(x)  = 2^(x log2 e) (the product's rounding costs |x| 2^-24 relative);
// x / y   = (x s) k as above with x s reassociable (the score's scale and
//           s fold into one factor).
// Their products carry `reassoc nsz`, so LLVM folds a chain of factors the
// same for every score into one multiply. Never 1/y itself as a factor:
// it overflows for |y| < 2^-128 where (x s) k does not. A quotient that
// floor or ceil takes (floordiv, floormod) is IEEE's division everywhere.
//
//===----------------------------------------------------------------------===//
#include "SpecialFunctions.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/IR/Dominance.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Interfaces/FunctionInterfaces.h"
#include "mlir/Interfaces/LoopLikeInterface.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

#include <limits>

using namespace mlir;

namespace attnc {
namespace {

struct Emit {
  RewriterBase &b;
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
  /// Where no subnormal result needs keeping (arguments >= 0, or afn's
  /// absolute accuracy).
  Value ex2Ftz(Value x) {
    return intrinsic("llvm.nvvm.ex2.approx.ftz.f32", x);
  }
  Value lg2(Value x) { return intrinsic("llvm.nvvm.lg2.approx.f", x); }
  Value rcp(Value x) { return intrinsic("llvm.nvvm.rcp.approx.ftz.f", x); }
};

constexpr float kLog2E = 1.44269502f;          // log2(e), rounded
constexpr float kLog2ELow = 1.92596299e-8f;    // log2(e) - kLog2E

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

/// Whether `y` is the same for every instance of `op`: defined outside the
/// loop around it, or in a region enclosing op's (the wgmma consumer's
/// first tile, peeled before its loop, takes softcap's cap from the
/// kernel's entry as the loop does).
bool invariantFor(Operation *op, Value y) {
  if (auto loop = op->getParentOfType<LoopLikeOpInterface>();
      loop && loop.isDefinedOutsideOfLoop(y))
    return true;
  Region *r = y.getParentRegion();
  return r != op->getParentRegion() && r->isAncestor(op->getParentRegion());
}

/// A product whose factors may be reassociated (afn's chains).
Value mulReassoc(Emit &e, Value x, Value y) {
  return arith::MulFOp::create(e.b, e.loc, x, y,
                               arith::FastMathFlags::reassoc |
                                   arith::FastMathFlags::nsz);
}

bool isApproximate(Operation *op) {
  auto fm = op->getAttrOfType<arith::FastMathFlagsAttr>("fastmath");
  return fm &&
         arith::bitEnumContainsAll(fm.getValue(), arith::FastMathFlags::afn);
}

/// Builds what depends on `v` alone once, right after v is defined.
void setInsertionAfterDef(OpBuilder &b, Value v) {
  if (Operation *def = v.getDefiningOp())
    b.setInsertionPointAfter(def);
  else
    b.setInsertionPointToStart(cast<BlockArgument>(v).getOwner());
}

/// The part of x / y computed once for a divisor the same for every
/// division: the scale s that div.full applies to both operands (1/4 for
/// |y| > 2^126, 2^24 for |y| < 2^-126, else 1) and k = 1/(y s) correctly
/// rounded, a normal number of magnitude at most 2^126 (1/y itself
/// overflows for |y| < 2^-128). x / y = (x s) k, within 1.5 ulp.
struct InvariantDivisor {
  Value s, k;
};

InvariantDivisor invariantDivisor(Emit &e, Value y) {
  OpBuilder::InsertionGuard guard(e.b);
  setInsertionAfterDef(e.b, y);
  Value a = math::AbsFOp::create(e.b, e.loc, y);
  auto less = [&](Value l, float r) {
    return arith::CmpFOp::create(e.b, e.loc, arith::CmpFPredicate::OLT, l,
                                 e.c(r));
  };
  Value huge = arith::CmpFOp::create(e.b, e.loc, arith::CmpFPredicate::OGT, a,
                                     e.c(0x1p126f));
  Value s = arith::SelectOp::create(
      e.b, e.loc, huge, e.c(0.25f),
      arith::SelectOp::create(e.b, e.loc, less(a, 0x1p-126f), e.c(0x1p24f),
                              e.c(1.0f)));
  Value k =
      LLVM::CallIntrinsicOp::create(e.b, e.loc, e.b.getF32Type(),
                                    e.b.getStringAttr("llvm.nvvm.rcp.rn.f"),
                                    ValueRange{e.mul(y, s)})
          .getResult(0);
  return {s, k};
}

/// scale s k2 computed once, where both `scale` and `k2` are defined (null
/// where neither definition dominates the other), its magnitude clamped
/// to the largest float: where the product would overflow, |cap| is
/// below 2^-126 |scale| (k2 <= 2^127.6 for |cap| s >= 2^-126), and the
/// score c tanh(.) it feeds is within |c| of any value: an exponent
/// smaller than the exact one moves no output (a zero score stays 0, not
/// 0 x inf).
Value combinedFactor(Emit &e, Operation *at, Value scale, Value s, Value k2) {
  DominanceInfo dom(at->getParentOfType<FunctionOpInterface>());
  OpBuilder::InsertionGuard guard(e.b);
  if (dom.properlyDominates(scale, k2.getDefiningOp()))
    setInsertionAfterDef(e.b, k2);
  else if (scale.getDefiningOp() &&
           dom.properlyDominates(k2, scale.getDefiningOp()))
    setInsertionAfterDef(e.b, scale);
  else
    return {};
  Value f = e.mul(e.mul(scale, s), k2);
  Value mag =
      arith::MinimumFOp::create(e.b, e.loc, math::AbsFOp::create(e.b, e.loc, f),
                                e.c(std::numeric_limits<float>::max()));
  return LLVM::CallIntrinsicOp::create(e.b, e.loc, e.b.getF32Type(),
                                       e.b.getStringAttr("llvm.copysign.f32"),
                                       ValueRange{mag, f})
      .getResult(0);
}

/// An afn tanh's 2^ argument, 2x log2 e. Where x is an afn division by a
/// divisor the same for every instance (softcap's score / cap), the
/// division is taken in: (n s) (k 2 log2 e), the second factor computed
/// once (below 2^128). Where n is the score, S x scale with the scale the
/// same for every score too, one factor for all three (combinedFactor): one
/// multiply per score where the division and the products took three or
/// four. Else n s reassociable (two multiplies), or x (2 log2 e).
Value tanhExponent(Emit &e, Value x) {
  auto div = x.getDefiningOp<arith::DivFOp>();
  if (!div || !div->hasOneUse() || !isApproximate(div) ||
      !invariantFor(div, div.getRhs()))
    return mulReassoc(e, x, e.c(2 * kLog2E));
  InvariantDivisor d = invariantDivisor(e, div.getRhs());
  Value k2;
  {
    OpBuilder::InsertionGuard guard(e.b);
    setInsertionAfterDef(e.b, d.k);
    k2 = e.mul(d.k, e.c(2 * kLog2E));
  }
  if (auto score = div.getLhs().getDefiningOp<arith::MulFOp>();
      score && invariantFor(div, score.getRhs()))
    if (Value f = combinedFactor(e, div, score.getRhs(), d.s, k2))
      return e.mul(score.getLhs(), f);
  return e.mul(mulReassoc(e, div.getLhs(), d.s), k2);
}

/// The loop-invariant factor c of an afn tanh's only use, c * tanh(x)
/// (softcap's cap), or null.
Value invariantScaleOf(Operation *tanh) {
  if (!tanh->hasOneUse())
    return {};
  auto mul = dyn_cast<arith::MulFOp>(*tanh->user_begin());
  if (!mul)
    return {};
  Value c = mul.getLhs() == tanh->getResult(0) ? mul.getRhs() : mul.getLhs();
  return invariantFor(mul, c) ? c : Value();
}

/// An afn tanh: 1 - 2 / (e^(2x) + 1), one ex2 and one rcp: 1 at +inf (the
/// rcp of inf is 0), -1 where e^(2x) flushes to 0, NaN for NaN. Where its
/// only use is c * tanh(x) with c the same for every instance (softcap's
/// cap), c + c (-2 / (e^(2x) + 1)): c in the last FMA, a multiply per score
/// fewer, the same values at the ends, finite for every finite c, and NaN
/// for c = inf at x = 0, as inf * 0.
void lowerTanhAbsolute(Emit &e, Operation *tanh) {
  auto div = tanh->getOperand(0).getDefiningOp<arith::DivFOp>();
  Value t = e.ex2Ftz(tanhExponent(e, tanh->getOperand(0)));
  if (Value c = invariantScaleOf(tanh)) {
    // c + c (-2 / (e^(2x) + 1)): the fma's product is exact, so c up to
    // the largest float stays finite (c - 2c r overflowed -2c past 1.7e38);
    // -2 / (e^(2x) + 1) as rcp(-e^(2x) / 2 - 1/2), an FMA where the add was.
    Value m = e.rcp(e.fma(t, e.c(-0.5f), e.c(-0.5f)));
    Operation *mul = *tanh->user_begin();
    e.b.setInsertionPoint(mul);
    e.b.replaceOp(mul, e.fma(m, c, c));
    e.b.eraseOp(tanh);
  } else {
    Value r = e.rcp(e.add(t, e.c(1.0f)));
    e.b.replaceOp(tanh, e.fma(e.c(-2.0f), r, e.c(1.0f)));
  }
  if (div && div->use_empty())
    e.b.eraseOp(div);
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

/// x / y. Where y is the same for every instance of the division
/// (invariantFor: softcap's cap in the tile loop), (x s) k with s and k
/// computed once (invariantDivisor): two multiplies where div.full issued
/// three (its two scalings predicated per division), within 1.5 ulp; afn
/// lets x s reassociate (the score's scale and s fold into one factor).
/// Elsewhere div.full.
Value emitDivision(Emit &e, Operation *op, bool approximate) {
  Value x = op->getOperand(0), y = op->getOperand(1);
  if (!invariantFor(op, y))
    return LLVM::CallIntrinsicOp::create(e.b, e.loc, e.b.getF32Type(),
                                         e.b.getStringAttr("llvm.nvvm.div.full"),
                                         ValueRange{x, y})
        .getResult(0);
  InvariantDivisor d = invariantDivisor(e, y);
  return e.mul(approximate ? mulReassoc(e, x, d.s) : e.mul(x, d.s), d.k);
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
    bool afn = isApproximate(op);
    if (isa<arith::DivFOp>(op)) {
      // floor(x / y) and ceil(x / y) (floordiv, floormod) keep IEEE's
      // division, fast-math flags dropped (afn would let LLVM approximate
      // it): an integer quotient must stay exact, where a reciprocal's
      // product may land an ulp below it and the floor a whole step off.
      if (llvm::any_of(op->getUsers(), [](Operation *u) {
            return isa<math::FloorOp, math::CeilOp>(u);
          })) {
        if (!op->hasAttr("fastmath"))
          return failure();
        rewriter.modifyOpInPlace(op, [&] { op->removeAttr("fastmath"); });
        return success();
      }
      rewriter.replaceOp(op, emitDivision(e, op, afn));
      return success();
    }
    Value x = op->getOperand(0);
    Value r;
    if (isa<math::ExpOp>(op))
      r = afn ? e.ex2Ftz(mulReassoc(e, x, e.c(kLog2E))) : emitExp(e, x);
    else if (isa<math::LogOp>(op))
      r = e.mul(e.lg2(x), e.c(kLn2));
    else
      r = emitTanh(e, x); // afn's are lowered first
    rewriter.replaceOp(op, r);
    return success();
  }
};

} // namespace

LogicalResult lowerSpecialFunctions(ModuleOp module) {
  // afn tanh first: it takes in an afn division that feeds it.
  SmallVector<Operation *> tanhs;
  module.walk([&](math::TanhOp op) {
    if (isApproximate(op) && op.getType().isF32())
      tanhs.push_back(op);
  });
  IRRewriter rewriter(module.getContext());
  for (Operation *op : tanhs) {
    rewriter.setInsertionPoint(op);
    Emit e{rewriter, op->getLoc()};
    lowerTanhAbsolute(e, op);
  }
  RewritePatternSet patterns(module.getContext());
  patterns.add<SpecialFunction>(module.getContext());
  return applyPatternsGreedily(module, std::move(patterns));
}

} // namespace attnc
