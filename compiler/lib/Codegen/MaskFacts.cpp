//===- MaskFacts.cpp - -attn-mask-facts: score_mod under the mask's facts -===//
//
// The facts are the conjuncts of mask_mod's result that order the two
// positions: `q >= kv` (canonical form `kv <= q`), `q > kv`, and the same
// with q and kv swapped. Each holds for every score the softmax keeps; a
// score the mask drops is -inf whatever score_mod returned for it. So in
// score_mod and score_grad (whose pairs with a dropped score have P = 0 and
// dS = 0: what they add to a capture's gradient is 0 times a finite value),
// `abs(q - kv)` may become `q - kv` where q >= kv is a fact (`abs(kv - q)`
// too), and `kv - q` where kv >= q is. On the GPU that turns a distance
// penalty's per-diagonal `barrier * f32(|kv - q|)` (an add for the
// difference, a multiply with the absolute value) into alibi's one FMA.
// i32 semantics are kept: for q >= kv >= 0 (positions are never negative)
// q - kv neither wraps nor differs from its absolute value.
//
// A gather's index may change for dropped scores only; the kernels clamp
// every index into its capture (memory safety does not rest on the facts),
// and the runtime's modifier program (the fp64 reference, `--checked`) is
// made from the variant as written.
//
//===----------------------------------------------------------------------===//
#include "attnc/Codegen/MaskFacts.h"
#include "attnc/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"

using namespace mlir;

namespace attnc {

#define GEN_PASS_DEF_ATTNMASKFACTS
#include "attnc/Passes.h.inc"

namespace {

/// Which order of the positions every kept score has.
struct Order {
  bool qAtLeastKv = false, kvAtLeastQ = false;
};

/// The order facts among the conjuncts of `v` (an i1 of the mask block,
/// whose arguments are b, h, q, kv).
void collect(Value v, Value q, Value kv, Order &o) {
  if (auto a = v.getDefiningOp<arith::AndIOp>()) {
    collect(a.getLhs(), q, kv, o);
    collect(a.getRhs(), q, kv, o);
    return;
  }
  auto c = v.getDefiningOp<arith::CmpIOp>();
  if (!c)
    return;
  Value l = c.getLhs(), r = c.getRhs();
  using P = arith::CmpIPredicate;
  P p = c.getPredicate();
  // l >= r or l > r, as (greater, lesser).
  Value hi, lo;
  if (p == P::sge || p == P::sgt) {
    hi = l;
    lo = r;
  } else if (p == P::sle || p == P::slt) {
    hi = r;
    lo = l;
  } else {
    return;
  }
  o.qAtLeastKv |= hi == q && lo == kv;
  o.kvAtLeastQ |= hi == kv && lo == q;
}

/// `abs(x - y)` or `abs(y - x)` of the block's arguments x and y, as x - y
/// where x >= y is a fact.
int rewrite(Block &block, Value x, Value y) {
  SmallVector<math::AbsIOp> abs;
  block.walk([&](math::AbsIOp a) { abs.push_back(a); });
  int n = 0;
  for (math::AbsIOp a : abs) {
    auto d = a.getOperand().getDefiningOp<arith::SubIOp>();
    if (!d || !((d.getLhs() == x && d.getRhs() == y) ||
                (d.getLhs() == y && d.getRhs() == x)))
      continue;
    OpBuilder b(a);
    Value diff = d.getLhs() == x
                     ? d.getResult()
                     : Value(arith::SubIOp::create(b, a.getLoc(), x, y));
    a.replaceAllUsesWith(diff);
    a.erase();
    if (d->use_empty())
      d.erase();
    ++n;
  }
  return n;
}

} // namespace

int simplifyUnderMask(attn::VariantOp v) {
  Block &mask = v.getMaskBlock();
  Order o;
  collect(mask.getTerminator()->getOperand(0), mask.getArgument(2),
          mask.getArgument(3), o);
  if (o.qAtLeastKv ==
      o.kvAtLeastQ) // no fact (or only q == kv: nothing to gain)
    return 0;
  int n = 0;
  // score_mod's and score_grad's arguments: score, b, h, q, kv[, dy].
  for (Region *r : {&v.getScoreMod(), &v.getScoreGrad()}) {
    if (r->empty())
      continue;
    Block &block = r->front();
    Value q = block.getArgument(3), kv = block.getArgument(4);
    n += o.qAtLeastKv ? rewrite(block, q, kv) : rewrite(block, kv, q);
  }
  return n;
}

namespace {
struct MaskFactsPass : impl::AttnMaskFactsBase<MaskFactsPass> {
  void runOnOperation() override {
    for (auto v : getOperation().getOps<attn::VariantOp>())
      simplifyUnderMask(v);
  }
};
} // namespace

} // namespace attnc
