//===- TileClassification.cpp - Empty, partial and full KV tiles ------------===//
//
// The class of a (Q tile, KV tile) pair at run time: from the closed-form
// mask analysis (ranges of affine forms over the tile, undecided where an
// i32 value may wrap), from a precomputed block mask for data-dependent
// masks, or full when there is no mask; and the loop over visited tiles.
//
//===----------------------------------------------------------------------===//
#include "ProgramBuilder.h"

#include <climits>
#include <functional>

using namespace mlir;
namespace abi = attnc::rt::abi;

namespace attnc::codegen {

void ProgramBuilder::forEachVisitedTile(const Item &it,
                                  function_ref<void(const Tile &)> body) {
  // The mask's q/kv-independent values, once per work item.
  IRMapping inv;
  inv.map(v_.getMaskBlock().getArgument(0), it.bI32);
  inv.map(v_.getMaskBlock().getArgument(1), it.hI32);
  materializeMaskInvariants(inv);
  loop0(it.jlo, it.jhi, 1, [&](Value j) {
    Tile t = tileAt(it, j, inv);
    ifThen(t.visit, [&] { body(t); });
  });
}

ProgramBuilder::Tile ProgramBuilder::tileAt(const Item &it, Value j,
                                            IRMapping &inv, Value noTail,
                                            Value cls) {
  Tile t;
  t.j = j;
  t.kv0 = mul(j, cIdx(BN));
  t.cols = minI(cIdx(BN), sub(it.kvLen, t.kv0));
  t.khi = sub(add(t.kv0, t.cols), cIdx(1));
  t.pos0 = keyOffsets() ? addPos(t.kv0, it.kvpos0) : t.kv0;
  // The mask sees positions: keys kv0..khi are at pos0..pos0 + cols - 1.
  t.cls = cls ? cls
              : classify(it.b, it.h, it.qt, j, it.qlo, it.qhi, t.kv0, t.khi,
                         keyOffsets() ? it.kvpos0 : Value(), inv);
  auto i8 = [&](int64_t c) {
    return arith::ConstantOp::create(b_, b_.getI8IntegerAttr(c));
  };
  t.visit = arith::CmpIOp::create(b_, arith::CmpIPredicate::ne, t.cls,
                                  i8(abi::kEmpty));
  Value full = arith::CmpIOp::create(b_, arith::CmpIPredicate::eq, t.cls,
                                     i8(abi::kFull));
  if (!noTail)
    noTail = arith::CmpIOp::create(b_, arith::CmpIPredicate::eq, t.cols,
                                   cIdx(BN));
  t.skipMask = arith::AndIOp::create(b_, full, noTail);
  return t;
}

void ProgramBuilder::materializeMaskInvariants(IRMapping &inv) {
  if (mask_.kind != rt::MaskKind::Closed)
    return;
  std::function<void(const AffineForm &)> form = [&](const AffineForm &f) {
    for (auto [val, coef] : f.inv)
      materialize(val, inv);
    for (const DivTerm &d : f.divs)
      form(*d.inner);
  };
  for (const MaskNode &n : mask_.nodes) {
    if (n.kind == MaskNode::Invariant)
      materialize(n.value, inv);
    if (n.kind != MaskNode::Atom)
      continue;
    form(n.form);
    for (const AffineForm &c : n.checks)
      form(c);
  }
}

/// The tile's class as an i8 (abi::TileClass).
Value ProgramBuilder::classify(Value b, Value h, Value qt, Value j, Value qlo,
                         Value qhi, Value klo, Value khi, Value kvShift,
                         IRMapping &inv) {
  auto i8 = [&](int64_t c) {
    return arith::ConstantOp::create(b_, b_.getI8IntegerAttr(c));
  };
  if (mask_.kind == rt::MaskKind::None)
    return i8(abi::kFull);
  if (mask_.kind == rt::MaskKind::Data) {
    // From the block mask when one was given; otherwise partial.
    Value has = arith::CmpIOp::create(b_, arith::CmpIPredicate::ne,
                                      load(ip_, cIdx(abi::kHasBlockMask)),
                                      arith::ConstantOp::create(
                                          b_, b_.getI64IntegerAttr(0)));
    auto ifOp = scf::IfOp::create(b_, TypeRange{b_.getI8Type()}, has,
                                  /*withElse=*/true);
    {
      OpBuilder::InsertionGuard g(b_);
      b_.setInsertionPointToStart(ifOp.thenBlock());
      Value off = add(add(mul(b, ipAt(abi::kBMStrideB)),
                          mul(h, ipAt(abi::kBMStrideH))),
                      add(mul(qt, ipAt(abi::kNumKTiles)), j));
      scf::YieldOp::create(b_, load(bm_, off));
      b_.setInsertionPointToStart(ifOp.elseBlock());
      scf::YieldOp::create(b_, Value(i8(abi::kPartial)));
    }
    return ifOp.getResult(0);
  }
  // Closed form: (mayBeTrue, mayBeFalse) per node, in i1.
  Value t = arith::ConstantOp::create(b_, b_.getBoolAttr(true));
  Value f = arith::ConstantOp::create(b_, b_.getBoolAttr(false));
  auto toI64 = [&](Value x) { return arith::IndexCastOp::create(b_, i64_, x); };
  Value qlo64 = toI64(qlo), qhi64 = toI64(qhi), klo64 = toI64(klo),
        khi64 = toI64(khi), shift64 = kvShift ? toI64(kvShift) : Value();
  auto c64 = [&](int64_t x) {
    return arith::ConstantOp::create(b_, b_.getI64IntegerAttr(x));
  };
  std::vector<std::pair<Value, Value>> tv;
  for (const MaskNode &n : mask_.nodes) {
    switch (n.kind) {
    case MaskNode::True: tv.push_back({t, f}); break;
    case MaskNode::False: tv.push_back({f, t}); break;
    case MaskNode::Not: tv.push_back({tv[n.lhs].second, tv[n.lhs].first}); break;
    case MaskNode::And:
      tv.push_back({arith::AndIOp::create(b_, tv[n.lhs].first, tv[n.rhs].first),
                    arith::OrIOp::create(b_, tv[n.lhs].second,
                                         tv[n.rhs].second)});
      break;
    case MaskNode::Or:
      tv.push_back({arith::OrIOp::create(b_, tv[n.lhs].first, tv[n.rhs].first),
                    arith::AndIOp::create(b_, tv[n.lhs].second,
                                          tv[n.rhs].second)});
      break;
    case MaskNode::Invariant: {
      Value x = materialize(n.value, inv);
      tv.push_back({x, arith::XOrIOp::create(b_, x, t)});
      break;
    }
    case MaskNode::Atom: {
      // The range of an affine form over the tile (i64, no overflow for
      // i32 positions): c * x over x in [lo, hi] peaks at an end chosen by
      // c's sign, known at compile time; division terms divide the range of
      // their inner form (monotone for a positive constant divisor).
      std::function<std::pair<Value, Value>(const AffineForm &)> rangeOf =
          [&](const AffineForm &form) -> std::pair<Value, Value> {
        Value base = c64(form.c0);
        if (form.ckv && shift64) // kv = row + shift: ckv * shift joins c0
          base = add(base, mul(c64(form.ckv), shift64));
        for (auto [val, coef] : form.inv)
          base = add(base, mul(arith::ExtSIOp::create(b_, i64_,
                                                      materialize(val, inv)),
                               c64(coef)));
        auto ext = [&](int64_t c, Value lo, Value hi, bool wantMax) {
          bool useHi = (c >= 0) == wantMax;
          return mul(c64(c), useHi ? hi : lo);
        };
        Value lo = add(base, add(ext(form.cq, qlo64, qhi64, false),
                                 ext(form.ckv, klo64, khi64, false)));
        Value hi = add(base, add(ext(form.cq, qlo64, qhi64, true),
                                 ext(form.ckv, klo64, khi64, true)));
        for (const DivTerm &d : form.divs) {
          auto [ilo, ihi] = rangeOf(*d.inner);
          Value a = arith::DivSIOp::create(b_, ilo, c64(d.divisor));
          Value z = arith::DivSIOp::create(b_, ihi, c64(d.divisor));
          lo = add(lo, ext(d.coef, a, z, false));
          hi = add(hi, ext(d.coef, a, z, true));
        }
        return {lo, hi};
      };
      auto [lo, hi] = rangeOf(n.form);
      Value zero = c64(0);
      using P = arith::CmpIPredicate;
      auto cmp = [&](P p, Value a, Value c) {
        return arith::CmpIOp::create(b_, p, a, c);
      };
      std::pair<Value, Value> r;
      switch (n.pred) {
      case P::slt: r = {cmp(P::slt, lo, zero), cmp(P::sge, hi, zero)}; break;
      case P::sle: r = {cmp(P::sle, lo, zero), cmp(P::sgt, hi, zero)}; break;
      case P::sgt: r = {cmp(P::sgt, hi, zero), cmp(P::sle, lo, zero)}; break;
      case P::sge: r = {cmp(P::sge, hi, zero), cmp(P::slt, lo, zero)}; break;
      default: {
        Value straddles = arith::AndIOp::create(b_, cmp(P::sle, lo, zero),
                                                cmp(P::sge, hi, zero));
        Value exact = arith::AndIOp::create(b_, cmp(P::eq, lo, zero),
                                            cmp(P::eq, hi, zero));
        Value notExact = arith::XOrIOp::create(b_, exact, t);
        r = n.pred == P::eq ? std::pair{straddles, notExact}
                            : std::pair{notExact, straddles};
      }
      }
      // Undecided (both may hold) where an i32 value computed on the way
      // from q and kv may wrap over this tile.
      Value wraps = f;
      for (const AffineForm &c : n.checks) {
        auto [clo, chi] = rangeOf(c);
        wraps = arith::OrIOp::create(
            b_, wraps,
            arith::OrIOp::create(b_, cmp(P::slt, clo, c64(INT32_MIN)),
                                 cmp(P::sgt, chi, c64(INT32_MAX))));
      }
      tv.push_back({arith::OrIOp::create(b_, r.first, wraps),
                    arith::OrIOp::create(b_, r.second, wraps)});
      break;
    }
    }
  }
  auto [mayTrue, mayFalse] = tv.back();
  Value cls = select(mayFalse, i8(abi::kPartial), i8(abi::kFull));
  return select(mayTrue, cls, i8(abi::kEmpty));
}

} // namespace attnc::codegen
