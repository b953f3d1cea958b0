//===- TiledProgram.cpp - The flash algorithm, written once ---------------===//
//
// The forward and backward kernels as flash IR (TiledProgram.h says what
// they compute and in which convention). Element-wise steps are
// flash.rows_map / flash.scores_map bodies of arith and math, so the
// arithmetic of the online softmax is here and nowhere else.
//
//===----------------------------------------------------------------------===//
#include "attnc/Tiled/TiledProgram.h"

#include "mlir/IR/ImplicitLocOpBuilder.h"

#include <cmath>
#include <limits>

using namespace mlir;
using namespace mlir::flash;

namespace attnc {
namespace {

/// How far (base-2 exponent units) a tile's row maximum may exceed the
/// running one before the forward's reference maximum moves: below it the
/// probabilities stay under 2^8 and nothing is rescaled.
constexpr double kLazyMax = 8.0;

class KernelWriter {
public:
  KernelWriter(ModuleOp module, attn::VariantOp v)
      : b_(v.getLoc(), v.getContext()), v_(v) {
    v.getContext()->loadDialect<FlashDialect, arith::ArithDialect,
                                math::MathDialect>();
    b_.setInsertionPointToEnd(module.getBody());
    f32_ = b_.getF32Type();
  }

  KernelOp kernel(StringRef kind, StringRef form, const FlashConfig &c,
                  StringRef name) {
    const rt::KernelSpec &s = c.spec;
    Type dt = s.dtype == rt::DType::F16    ? Type(b_.getF16Type())
              : s.dtype == rt::DType::BF16 ? Type(b_.getBF16Type())
                                           : Type(f32_);
    auto k = KernelOp::create(b_, name, kind, form, v_.getSymName(), dt,
                              s.headDim, s.vHeadDim, s.blockM, s.blockN,
                              s.warps, c.vectorWidth, s.keyOffsets,
                              s.stages);
    dropout_ = s.dropout;
    queryGradsHere_ = c.queryGradsInQueryKernel;
    b_.createBlock(&k.getBody());
    return k;
  }

  /// An f32 constant inside a map body.
  Value f32(double x) {
    return arith::ConstantOp::create(b_, b_.getF32FloatAttr(float(x)));
  }

  /// flash.rows_map over `inputs`; `fn` builds the body from the row's
  /// values.
  Value rowsMap(ValueRange inputs,
                function_ref<Value(ArrayRef<Value>)> fn) {
    auto op = RowsMapOp::create(b_, RowsType::get(b_.getContext()), inputs);
    yieldBody(op.getBody(), inputs.size(), fn);
    return op.getResult();
  }

  /// flash.scores_map over tiles `scores` and per-row `rows`.
  Value scoresMap(ValueRange scores, ValueRange rows,
                  function_ref<Value(ArrayRef<Value>)> fn) {
    auto op = ScoresMapOp::create(b_, ScoresType::get(b_.getContext()), scores,
                                  rows);
    yieldBody(op.getBody(), scores.size() + rows.size(), fn);
    return op.getResult();
  }

  /// A loop's body block with `lead` leading arguments and the iteration
  /// values'; `fn` fills it and returns what it yields.
  void loopBody(Region &r, TypeRange lead, TypeRange iters,
                function_ref<SmallVector<Value>(Block &)> fn) {
    OpBuilder::InsertionGuard g(b_);
    SmallVector<Type> types(lead.begin(), lead.end());
    types.append(iters.begin(), iters.end());
    SmallVector<Location> locs(types.size(), b_.getLoc());
    Block *body = b_.createBlock(&r, {}, types, locs);
    YieldOp::create(b_, fn(*body));
  }

  /// The forward: O and LSE of a work item (TiledProgram.h). With
  /// `scaleInExponent` the scores stay products and every exponent's
  /// factor log2(e) becomes |scale| log2(e), the LSE's m |scale| m. With
  /// `sumsInAccumulator` (and no dropout: its sums keep the probabilities
  /// P V drops) the sums that divide O are a column of the accumulator, P
  /// [V | 1], rescaled with O; the f32 sums of the unrounded P stay, for
  /// the LSE only (flash.rescale_sum lse_only: a form skips them where no
  /// LSE is written), so that the LSE keeps f32's accuracy where P's
  /// rounding (2^-9 in bf16) would move it by up to 2e-3.
  void forward(bool scaleInExponent, bool sumsInAccumulator) {
    sumsInAccumulator &= !dropout_;
    MLIRContext *ctx = b_.getContext();
    Type accT = AccType::get(ctx), rowsT = RowsType::get(ctx),
         partT = PartialsType::get(ctx);
    Value item = WorkItemOp::create(b_, ItemType::get(ctx));
    Value q = LoadQueryOp::create(b_, QueryType::get(ctx), item, "q",
                                  scaleInExponent);
    // The factor taking a score (or product) into base-2 exponent units:
    // log2(e), or c = |scale| log2(e), one value per row fixed before the
    // loop (the LSE takes |scale| itself).
    Value scale, c;
    if (scaleInExponent) {
      scale = ScoreScaleOp::create(b_, rowsT);
      c = rowsMap({scale}, [&](ArrayRef<Value> x) -> Value {
        return arith::MulFOp::create(b_, x[0], f32(M_LOG2E));
      });
    }
    auto log2Factor = [&](ArrayRef<Value> x, size_t at) -> Value {
      return scaleInExponent ? x[at] : f32(M_LOG2E);
    };
    auto with = [&](SmallVector<Value> in, Value extra) {
      if (scaleInExponent)
        in.push_back(extra);
      return in;
    };
    // exp2((a - b) c) over a map's arguments (a, b, then c when the scale
    // is in the exponents): the difference first. One FMA, a c - round(b c),
    // is off by b c's rounding, which grows with |b| (at |m| ~ 1e9 it moves
    // a row's exponents by units, at 1e30 by 2^76: a row of scores all near
    // -1e30, a "soft" mask, came out NaN); a - b is exact near the maximum
    // and 0 at it, at any magnitude short of overflow.
    auto exp2OfDifference = [&](ArrayRef<Value> x) -> Value {
      return math::Exp2Op::create(
          b_, arith::MulFOp::create(b_, arith::SubFOp::create(b_, x[0], x[1]),
                                    log2Factor(x, 2)));
    };
    Value acc0 = ZeroAccOp::create(b_, accT, "v", sumsInAccumulator);
    Value m0 = FillRowsOp::create(
        b_, rowsT, b_.getF32FloatAttr(-std::numeric_limits<float>::infinity()));
    Value l0 = ZeroPartialsOp::create(b_, partT);
    auto loop = ForTilesOp::create(b_, TypeRange{accT, rowsT, partT}, item,
                                   ValueRange{acc0, m0, l0});
    loopBody(loop.getBody(), {TileType::get(ctx)}, {accT, rowsT, partT},
             [&](Block &body) {
      Value t = body.getArgument(0), acc = body.getArgument(1),
            m = body.getArgument(2), l = body.getArgument(3);
      Value kv = LoadKeyValueOp::create(b_, KeyValueType::get(ctx), t);
      Value s = ProductOp::create(b_, ScoresType::get(ctx), q, kv, "k");
      s = ApplyModsOp::create(b_, ScoresType::get(ctx), s, t, scaleInExponent);
      // The online softmax: the new running maximum (a row with no key
      // yet keeps -inf and exponentiates against 0), the old sums' and
      // accumulator's rescale, and this tile's probabilities. The maximum
      // moves only where the tile's exceeds it by more than kLazyMax in
      // exponent units (FlashAttention-4's conditional rescale): below
      // that the row keeps its reference, its probabilities reach at most
      // 2^kLazyMax (O and the sums are f32; P in f16 at most 65504), its
      // rescale factor is exactly 1, and a GPU form skips the
      // accumulator's rescale where a whole warp's rows kept theirs. O =
      // acc / l and the LSE do not depend on the reference. A NaN
      // difference (no key yet: -inf - -inf; NaN scores) moves it.
      Value tmax = RowMaxOp::create(b_, rowsT, s);
      Value mNew = rowsMap(with({m, tmax}, c), [&](ArrayRef<Value> x) -> Value {
        Value rise = arith::MulFOp::create(
            b_, arith::SubFOp::create(b_, x[1], x[0]), log2Factor(x, 2));
        Value keep = arith::CmpFOp::create(b_, arith::CmpFPredicate::OLE, rise,
                                           f32(kLazyMax));
        return arith::SelectOp::create(
            b_, keep, x[0], arith::MaximumFOp::create(b_, x[0], x[1]));
      });
      Value mUse = rowsMap({mNew}, [&](ArrayRef<Value> x) -> Value {
        Value none = arith::CmpFOp::create(
            b_, arith::CmpFPredicate::OEQ, x[0],
            f32(-std::numeric_limits<double>::infinity()));
        return arith::SelectOp::create(b_, none, f32(0.0), x[0]);
      });
      Value alpha = rowsMap(with({m, mUse}, c), exp2OfDifference);
      Value p = scoresMap({s}, with({mUse}, c), exp2OfDifference);
      Value lNew = RescaleSumOp::create(b_, partT, l, alpha,
                                        RowSumOp::create(b_, partT, p),
                                        sumsInAccumulator);
      Value scaled = ScaleAccOp::create(b_, accT, acc, alpha);
      // Dropout after the statistics: the sums keep every probability,
      // P.V takes the kept ones, scaled.
      Value pv = dropout_ ? Value(DropoutOp::create(b_, ScoresType::get(ctx),
                                                    p, t))
                          : p;
      Value accNew = AccumulateOp::create(b_, accT, scaled, pv, kv, "pv",
                                          sumsInAccumulator);
      return SmallVector<Value>{accNew, mNew, lNew};
    });
    // The epilogue: O = acc / l (0 for a row with no key: l = 0; a NaN l
    // from non-finite scores propagates), LSE = m + ln l (-inf where l = 0).
    Value l = CompleteOp::create(b_, rowsT, loop.getResult(2));
    Value lO = sumsInAccumulator
                   ? Value(AccSumsOp::create(b_, rowsT, loop.getResult(0)))
                   : l;
    Value invL = rowsMap({lO}, [&](ArrayRef<Value> x) -> Value {
      Value pos = arith::CmpFOp::create(b_, arith::CmpFPredicate::UNE, x[0],
                                        f32(0.0));
      return arith::SelectOp::create(
          b_, pos, arith::DivFOp::create(b_, f32(1.0), x[0]), f32(0.0));
    });
    Value lse = rowsMap(with({loop.getResult(1), l}, scale),
                        [&](ArrayRef<Value> x) -> Value {
      Value pos = arith::CmpFOp::create(b_, arith::CmpFPredicate::UNE, x[1],
                                        f32(0.0));
      Value m = scaleInExponent ? arith::MulFOp::create(b_, x[0], x[2]) : x[0];
      Value mUse = arith::SelectOp::create(b_, pos, m, f32(0.0));
      Value lg = arith::AddFOp::create(
          b_, mUse,
          arith::MulFOp::create(b_, math::Log2Op::create(b_, x[1]), f32(M_LN2)));
      return arith::SelectOp::create(
          b_, pos, lg, f32(-std::numeric_limits<double>::infinity()));
    });
    StoreOutputOp::create(b_, item, loop.getResult(0), invL, lse);
  }

  /// One kept pair's terms on a tile, shared by both backward kernels:
  /// P from the LSE, dS = P (dP - delta) and dX (with the parameters'
  /// accumulates `accumulate` says, flash.score_grad's: empty for none).
  std::pair<Value, Value> pairTerms(Value s, Value dp, Value lse, Value delta,
                                    Value tile, StringRef accumulate) {
    MLIRContext *ctx = b_.getContext();
    Value p = ProbabilitiesOp::create(b_, ScoresType::get(ctx), s, lse, tile);
    // With dropout, O = (P z) V: dP becomes dP z (delta = rowsum(dO O) is
    // unchanged) and dV takes P z (backwardKeyValue).
    if (dropout_)
      dp = DropoutOp::create(b_, ScoresType::get(ctx), dp, tile);
    Value ds = scoresMap({p, dp}, {delta}, [&](ArrayRef<Value> x) -> Value {
      return arith::MulFOp::create(b_, x[0],
                                   arith::SubFOp::create(b_, x[1], x[2]));
    });
    Value dx = ScoreGradOp::create(
        b_, ScoresType::get(ctx), s, ds, lse, tile,
        accumulate.empty() ? StringAttr() : b_.getStringAttr(accumulate));
    return {p, dx};
  }

  /// `_bwd_q`: delta and dQ of a work item.
  void backwardQuery() {
    MLIRContext *ctx = b_.getContext();
    Type accT = AccType::get(ctx), rowsT = RowsType::get(ctx);
    Value item = WorkItemOp::create(b_, ItemType::get(ctx));
    Value q = LoadQueryOp::create(b_, QueryType::get(ctx), item, "q");
    Value dO = LoadQueryOp::create(b_, QueryType::get(ctx), item, "do");
    Value lse = LoadRowsOp::create(b_, rowsT, item, "lse");
    Value delta = LoadRowsOp::create(b_, rowsT, item, "delta");
    Value dq0 = ZeroAccOp::create(b_, accT, "k");
    auto loop = ForTilesOp::create(b_, TypeRange{accT}, item, ValueRange{dq0});
    loopBody(loop.getBody(), {TileType::get(ctx)}, {accT}, [&](Block &body) {
      Value t = body.getArgument(0), dq = body.getArgument(1);
      Value kv = LoadKeyValueOp::create(b_, KeyValueType::get(ctx), t);
      Value s = ProductOp::create(b_, ScoresType::get(ctx), q, kv, "k");
      Value dp = ProductOp::create(b_, ScoresType::get(ctx), dO, kv, "v");
      Value dx = pairTerms(s, dp, lse, delta, t, queryGradsHere_ ? "query" : "")
                     .second;
      return SmallVector<Value>{
          AccumulateOp::create(b_, accT, dq, dx, kv, "dq")};
    });
    StoreGradOp::create(b_, item, loop.getResult(0), "dq");
  }

  /// `_bwd_kv`: dK, dV and the parameters' gradients of a KV tile.
  void backwardKeyValue() {
    MLIRContext *ctx = b_.getContext();
    Type accT = AccType::get(ctx), rowsT = RowsType::get(ctx);
    Value item = WorkItemOp::create(b_, ItemType::get(ctx));
    Value kv = LoadKeyValueOp::create(
        b_, KeyValueType::get(ctx),
        KvTileOfOp::create(b_, TileType::get(ctx), item));
    Value dk0 = ZeroAccOp::create(b_, accT, "k");
    Value dv0 = ZeroAccOp::create(b_, accT, "v");
    auto loop = ForQueryTilesOp::create(b_, TypeRange{accT, accT}, item,
                                        ValueRange{dk0, dv0});
    loopBody(loop.getBody(), {ItemType::get(ctx), TileType::get(ctx)},
             {accT, accT}, [&](Block &body) {
      Value qi = body.getArgument(0), t = body.getArgument(1),
            dk = body.getArgument(2), dv = body.getArgument(3);
      Value q = LoadQueryOp::create(b_, QueryType::get(ctx), qi, "q");
      Value dO = LoadQueryOp::create(b_, QueryType::get(ctx), qi, "do");
      Value lse = LoadRowsOp::create(b_, rowsT, qi, "lse");
      Value delta = LoadRowsOp::create(b_, rowsT, qi, "delta");
      Value s = ProductOp::create(b_, ScoresType::get(ctx), q, kv, "k");
      Value dp = ProductOp::create(b_, ScoresType::get(ctx), dO, kv, "v");
      auto [p, dx] =
          pairTerms(s, dp, lse, delta, t, queryGradsHere_ ? "others" : "all");
      if (dropout_) // dV takes the kept probabilities, scaled
        p = DropoutOp::create(b_, ScoresType::get(ctx), p, t);
      Value dvNew = AccumulateOp::create(b_, accT, dv, p, dO, "dv");
      Value dkNew = AccumulateOp::create(b_, accT, dk, dx, q, "dk");
      AddOwnedQueryGradOp::create(b_, qi, dx, kv);
      return SmallVector<Value>{dkNew, dvNew};
    });
    StoreGradOp::create(b_, item, loop.getResult(0), "dk");
    StoreGradOp::create(b_, item, loop.getResult(1), "dv");
  }

private:
  void yieldBody(Region &r, size_t n, function_ref<Value(ArrayRef<Value>)> fn) {
    OpBuilder::InsertionGuard g(b_);
    SmallVector<Type> types(n, f32_);
    SmallVector<Location> locs(n, b_.getLoc());
    Block *body = b_.createBlock(&r, {}, types, locs);
    SmallVector<Value> args(body->getArguments());
    YieldOp::create(b_, ValueRange{fn(args)});
  }

  ImplicitLocOpBuilder b_;
  attn::VariantOp v_;
  Type f32_;
  bool dropout_ = false;
  bool queryGradsHere_ = false; // FlashConfig::queryGradsInQueryKernel
};

} // namespace

KernelOp buildForwardKernel(ModuleOp module, attn::VariantOp variant,
                            StringRef form, const FlashConfig &config,
                            StringRef name) {
  KernelWriter w(module, variant);
  KernelOp k = w.kernel("forward", form, config, name);
  w.forward(config.scaleInExponent && scoreModIsIdentity(variant),
            config.sumsInAccumulator);
  return k;
}

std::pair<KernelOp, KernelOp>
buildBackwardKernels(ModuleOp module, attn::VariantOp variant, StringRef form,
                     const FlashConfig &config, StringRef name) {
  KernelWriter q(module, variant);
  KernelOp kq = q.kernel("bwd_q", form, config, (name + "_bwd_q").str());
  q.backwardQuery();
  KernelWriter kv(module, variant);
  KernelOp kkv = kv.kernel("bwd_kv", form, config, (name + "_bwd_kv").str());
  kv.backwardKeyValue();
  return {kq, kkv};
}

FlashConfig configOf(KernelOp k) {
  FlashConfig c;
  Type t = k.getDtype();
  c.spec.dtype = t.isF16() ? rt::DType::F16 : t.isBF16() ? rt::DType::BF16
                                                          : rt::DType::F32;
  c.spec.headDim = int64_t(k.getHeadDim());
  c.spec.vHeadDim = int64_t(k.getVHeadDim());
  c.spec.blockM = int64_t(k.getBlockM());
  c.spec.blockN = int64_t(k.getBlockN());
  c.spec.warps = int64_t(k.getWarps());
  c.spec.form = k.getForm().str();
  c.vectorWidth = int64_t(k.getVectorWidth());
  c.spec.dropout = false;
  k.walk([&](DropoutOp) { c.spec.dropout = true; });
  k.walk([&](ZeroAccOp z) { c.sumsInAccumulator |= z.getRowSums(); });
  c.spec.keyOffsets = k.getKeyOffsets();
  c.spec.stages = int64_t(k.getStages());
  return c;
}

bool scoreModIsIdentity(attn::VariantOp variant) {
  Block &score = variant.getScoreBlock();
  Operation *term = score.getTerminator();
  return score.getOperations().size() == 1 && term->getNumOperands() == 1 &&
         term->getOperand(0) == score.getArgument(0);
}

attn::VariantOp variantOf(KernelOp k) {
  return SymbolTable::lookupNearestSymbolFrom<attn::VariantOp>(
      k, k.getVariantAttr());
}

} // namespace attnc
