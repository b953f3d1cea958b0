//===- ScoreModDerivative.cpp - score_mod's reverse-mode derivative -------===//
//
// Builds a variant's score_grad region: a clone of score_mod's ops (the
// forward values the rules read), then one reverse sweep that carries the
// adjoint of every f32 value from the result back to the arguments. Only
// f32 values have adjoints: integers and booleans (positions, masks,
// comparisons) are not differentiable, so a rule never propagates into
// them. The rules:
//
//   addf, subf, negf, mulf, divf, fma   the usual ones
//   remf (fmod a, b)                    da = g, db = -g * (a - r) / b
//   minimumf / maximumf                 g to the operand chosen (a on a tie)
//   select                              g to the operand chosen
//   exp exp2 log log2 sqrt rsqrt tanh   from the result where it is cheaper
//   sin cos erf log1p expm1
//   log(a * b), log(a / b)              as log a +- log b: g (1/a), +-g (1/b)
//   absf                                g * sign(a) (0 at 0, as torch)
//   floor ceil sitofp uitofp constant   no gradient
//   gather (float)                      attn.accumulate @t[indices], g
//   scalar (float)                      attn.accumulate @s[], g
//   sum                                 a sum of the body's adjoints
//
// A sum's term t_i may read float values of the enclosing region; the
// adjoint of such a value v is sum_i g * dt_i/dv, which is again an
// attn.sum whose body is the forward body followed by its own reverse
// sweep. One such sum is built per outer value (the first also holds the
// body's accumulates); a body with accumulates but no outer float value
// gets one sum yielding 0 for its side effects.
//
//===----------------------------------------------------------------------===//
#include "attnc/Autodiff/ScoreModDerivative.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/ImplicitLocOpBuilder.h"
#include "mlir/IR/Matchers.h"
#include "mlir/Transforms/RegionUtils.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/MathExtras.h"

#include <cmath>

using namespace mlir;

namespace attnc {
namespace {

/// The adjoints of one region's values, and the rules that build them.
class Adjoints {
public:
  /// `accumulate`: whether gathers and scalars emit attn.accumulate (off in
  /// the second and later adjoint sums of one attn.sum, so each parameter
  /// element is accumulated once per iteration).
  Adjoints(ImplicitLocOpBuilder &b, bool accumulate)
      : b_(b), accumulate_(accumulate) {}

  void seed(Value v, Value g) { adj_[v] = g; }
  Value of(Value v) const { return adj_.lookup(v); }

  /// The reverse sweep over `ops`, given in forward order.
  LogicalResult sweep(ArrayRef<Operation *> ops) {
    for (Operation *op : llvm::reverse(ops)) {
      if (op->getNumResults() != 1)
        continue;
      Value g = adj_.lookup(op->getResult(0));
      if (!g)
        continue;
      b_.setLoc(op->getLoc());
      if (failed(rule(op, g)))
        return failure();
    }
    return success();
  }

private:
  Value cst(double x) {
    return arith::ConstantOp::create(b_, b_.getF32FloatAttr(x));
  }
  Value mul(Value x, Value y) { return arith::MulFOp::create(b_, x, y); }
  Value div(Value x, Value y) { return arith::DivFOp::create(b_, x, y); }
  Value neg(Value x) { return arith::NegFOp::create(b_, x); }
  Value pick(Value cond, Value x, Value y) {
    return arith::SelectOp::create(b_, cond, x, y);
  }
  Value cmp(arith::CmpFPredicate p, Value x, Value y) {
    return arith::CmpFOp::create(b_, p, x, y);
  }

  /// x / b where x is a product (arith.mulf, through up to four levels)
  /// with b as one of its factors: the product rebuilt without it, or null.
  /// The chain rule meets such a quotient where a value is multiplied by b
  /// and divided by it on the way to an argument; cancelling b there keeps
  /// the derivative the same function (the fp64 reference runs this same
  /// region) where b is finite and nonzero, and avoids 0/0 and inf/inf.
  Value withoutFactor(Value x, Value b, int depth = 0) {
    auto m = x.getDefiningOp<arith::MulFOp>();
    if (!m || depth > 4)
      return {};
    if (m.getLhs() == b)
      return m.getRhs();
    if (m.getRhs() == b)
      return m.getLhs();
    if (Value l = withoutFactor(m.getLhs(), b, depth + 1))
      return mul(l, m.getRhs());
    if (Value r = withoutFactor(m.getRhs(), b, depth + 1))
      return mul(m.getLhs(), r);
    return {};
  }

  /// adj[v] += g, for a non-constant f32 value.
  void add(Value v, Value g) {
    if (!v.getType().isF32() || matchPattern(v, m_Constant()))
      return;
    Value &a = adj_[v];
    a = a ? Value(arith::AddFOp::create(b_, a, g)) : g;
  }

  LogicalResult rule(Operation *op, Value g) {
    Value r = op->getResult(0);
    auto arg = [&](unsigned i) { return op->getOperand(i); };
    using P = arith::CmpFPredicate;
    return TypeSwitch<Operation *, LogicalResult>(op)
        .Case([&](arith::AddFOp) {
          add(arg(0), g);
          add(arg(1), g);
          return success();
        })
        .Case([&](arith::SubFOp) {
          add(arg(0), g);
          add(arg(1), neg(g));
          return success();
        })
        .Case([&](arith::NegFOp) {
          add(arg(0), neg(g));
          return success();
        })
        .Case([&](arith::MulFOp) {
          add(arg(0), mul(g, arg(1)));
          add(arg(1), mul(g, arg(0)));
          return success();
        })
        .Case([&](arith::DivFOp) { // r = a / b: db = -g r / b
          // Where the sweep multiplied g by b itself (softcap's cap *
          // tanh(s / cap): g = (dy cap)(1 - t^2)), g / b is g without
          // that factor: equal in real arithmetic, a rounding fewer, and
          // finite where b is 0 or infinite (see withoutFactor).
          if (Value q = withoutFactor(g, arg(1))) {
            add(arg(0), q);
            add(arg(1), neg(mul(q, r)));
            return success();
          }
          add(arg(0), div(g, arg(1)));
          add(arg(1), neg(div(mul(g, r), arg(1))));
          return success();
        })
        .Case([&](arith::RemFOp) { // r = a - trunc(a / b) b
          add(arg(0), g);
          Value quotient = div(arith::SubFOp::create(b_, arg(0), r), arg(1));
          add(arg(1), neg(mul(g, quotient)));
          return success();
        })
        .Case<arith::MinimumFOp, arith::MaximumFOp>([&](Operation *m) {
          bool isMin = isa<arith::MinimumFOp>(m);
          Value first = cmp(isMin ? P::OLE : P::OGE, arg(0), arg(1));
          Value zero = cst(0.0);
          add(arg(0), pick(first, g, zero));
          add(arg(1), pick(first, zero, g));
          return success();
        })
        .Case([&](arith::SelectOp) {
          Value zero = cst(0.0);
          add(arg(1), pick(arg(0), g, zero));
          add(arg(2), pick(arg(0), zero, g));
          return success();
        })
        .Case([&](math::FmaOp) {
          add(arg(0), mul(g, arg(1)));
          add(arg(1), mul(g, arg(0)));
          add(arg(2), g);
          return success();
        })
        .Case([&](math::ExpOp) {
          add(arg(0), mul(g, r));
          return success();
        })
        .Case([&](math::Exp2Op) {
          Value gr = mul(g, r); // one op per statement: a fixed order
          add(arg(0), mul(gr, cst(llvm::numbers::ln2)));
          return success();
        })
        .Case([&](math::ExpM1Op) {
          add(arg(0), mul(g, arith::AddFOp::create(b_, r, cst(1.0))));
          return success();
        })
        .Case([&](math::LogOp) {
          // log(a b) and log(a / b), the product or quotient read by the
          // log alone: the derivative of log a ± log b, a's adjoint g (1/a)
          // and b's ± g (1/b), where the chain rule through the product
          // gave (g / (a b)) b (a product past f32's range turned it into
          // 0 or inf). 1/a depends on a alone: where a is a query's value
          // (synaptic's qamp[b, h, q]), the kernels compute it once per
          // row, the pair a multiply.
          Operation *d = arg(0).getDefiningOp();
          if (d && isa<arith::MulFOp, arith::DivFOp>(d) && arg(0).hasOneUse()) {
            Value a = d->getOperand(0), c = d->getOperand(1);
            add(a, mul(g, div(cst(1.0), a)));
            Value gc = mul(g, div(cst(1.0), c));
            add(c, isa<arith::DivFOp>(d) ? neg(gc) : gc);
            return success();
          }
          add(arg(0), div(g, arg(0)));
          return success();
        })
        .Case([&](math::Log2Op) {
          add(arg(0), div(mul(g, cst(1.0 / llvm::numbers::ln2)), arg(0)));
          return success();
        })
        .Case([&](math::Log1pOp) {
          add(arg(0), div(g, arith::AddFOp::create(b_, arg(0), cst(1.0))));
          return success();
        })
        .Case([&](math::SqrtOp) { // 1 / (2 sqrt a)
          add(arg(0), div(mul(g, cst(0.5)), r));
          return success();
        })
        .Case([&](math::RsqrtOp) { // -a^(-3/2) / 2 = -r / (2a)
          add(arg(0), neg(div(mul(mul(g, cst(0.5)), r), arg(0))));
          return success();
        })
        .Case([&](math::TanhOp) {
          Value one = cst(1.0);
          add(arg(0), mul(g, arith::SubFOp::create(b_, one, mul(r, r))));
          return success();
        })
        .Case([&](math::SinOp) {
          add(arg(0), mul(g, math::CosOp::create(b_, arg(0))));
          return success();
        })
        .Case([&](math::CosOp) {
          add(arg(0), neg(mul(g, math::SinOp::create(b_, arg(0)))));
          return success();
        })
        .Case([&](math::ErfOp) { // 2 / sqrt(pi) exp(-a^2)
          Value e = math::ExpOp::create(b_, neg(mul(arg(0), arg(0))));
          add(arg(0), mul(mul(g, cst(2.0 / std::sqrt(llvm::numbers::pi))), e));
          return success();
        })
        .Case([&](math::AbsFOp) {
          Value zero = cst(0.0);
          Value negative = cmp(P::OLT, arg(0), zero);
          Value negG = neg(g);
          Value notPositive = pick(negative, negG, zero);
          Value positive = cmp(P::OGT, arg(0), zero);
          add(arg(0), pick(positive, g, notPositive));
          return success();
        })
        .Case([&](attn::GatherOp x) {
          if (accumulate_)
            attn::AccumulateOp::create(b_, x.getCaptureAttr(), x.getIndices(),
                                       g);
          return success();
        })
        .Case([&](attn::ScalarOp x) {
          if (accumulate_)
            attn::AccumulateOp::create(b_, x.getParamAttr(), ValueRange{}, g);
          return success();
        })
        .Case([&](attn::SumOp s) { return sumRule(s, g); })
        .Case<arith::ConstantOp, arith::SIToFPOp, arith::UIToFPOp,
              math::FloorOp, math::CeilOp>(
            [&](Operation *) { return success(); })
        .Default([&](Operation *o) {
          return o->emitOpError(
              "has no derivative rule: score_mod cannot be differentiated");
        });
  }

  LogicalResult sumRule(attn::SumOp s, Value g) {
    Block &body = s.getBody().front();
    llvm::SetVector<Value> outer; // float values of this region it reads
    attn::forEachValueRead(s, [&](Value v) {
      if (v.getType().isF32() && !matchPattern(v, m_Constant()))
        outer.insert(v);
    });
    bool reads = false; // float gathers or scalars: accumulates
    s.getBody().walk([&](Operation *op) {
      reads |= isa<attn::GatherOp, attn::ScalarOp>(op) &&
               op->getResult(0).getType().isF32();
    });
    size_t count = std::max<size_t>(outer.size(), reads && accumulate_);
    Type f32 = b_.getF32Type(), i32 = b_.getI32Type();
    Value term = cast<attn::YieldOp>(body.getTerminator()).getValue();
    for (size_t k = 0; k < count; ++k) {
      auto adjoint = attn::SumOp::create(b_, f32, s.getCount());
      {
        OpBuilder::InsertionGuard guard(b_);
        Block *blk = new Block;
        adjoint.getBody().push_back(blk);
        IRMapping map;
        map.map(body.getArgument(0), blk->addArgument(i32, s.getLoc()));
        b_.setInsertionPointToEnd(blk);
        SmallVector<Operation *> ops;
        for (Operation &op : body.without_terminator())
          ops.push_back(b_.clone(op, map));
        Adjoints inner(b_, accumulate_ && k == 0);
        inner.seed(map.lookupOrDefault(term), g);
        if (failed(inner.sweep(ops)))
          return failure();
        b_.setLoc(s.getLoc());
        Value y = k < outer.size() ? inner.of(outer[k]) : Value();
        attn::YieldOp::create(b_, y ? y : cst(0.0));
      }
      if (k < outer.size())
        add(outer[k], adjoint.getResult());
    }
    return success();
  }

  ImplicitLocOpBuilder &b_;
  bool accumulate_;
  llvm::DenseMap<Value, Value> adj_;
};

} // namespace

LogicalResult buildScoreGrad(attn::VariantOp v) {
  Region &region = v.getScoreGrad();
  region.dropAllReferences();
  region.getBlocks().clear();
  ImplicitLocOpBuilder b(v.getLoc(), v.getContext());
  Type f32 = b.getF32Type(), i32 = b.getI32Type();
  Block *blk = new Block;
  region.push_back(blk);
  for (Type t : {f32, i32, i32, i32, i32, f32})
    blk->addArgument(t, v.getLoc());
  b.setInsertionPointToEnd(blk);

  Block &fwd = v.getScoreBlock();
  IRMapping map;
  for (unsigned i = 0; i < 5; ++i)
    map.map(fwd.getArgument(i), blk->getArgument(i));
  SmallVector<Operation *> ops;
  for (Operation &op : fwd.without_terminator())
    ops.push_back(b.clone(op, map));
  Value y = map.lookupOrDefault(
      cast<attn::YieldOp>(fwd.getTerminator()).getValue());

  Adjoints adjoints(b, /*accumulate=*/true);
  adjoints.seed(y, blk->getArgument(5));
  if (failed(adjoints.sweep(ops)))
    return failure();
  b.setLoc(fwd.getTerminator()->getLoc());
  Value dscore = adjoints.of(blk->getArgument(0));
  if (!dscore)
    dscore = arith::ConstantOp::create(b, b.getF32FloatAttr(0.0));
  attn::YieldOp::create(b, dscore);

  // The forward values no rule read, and adjoints that lead nowhere.
  IRRewriter rewriter(v.getContext());
  (void)runRegionDCE(rewriter, region);
  return success();
}

} // namespace attnc
