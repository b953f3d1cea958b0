//===- ScoreGradEmission.cpp - One (query, key) pair of the backward ------===//
//
// score_grad emitted for one pair of a tile (BackwardBuilder.h), and its
// accumulates into the parameter-gradient buffer: read-add-write on the
// CPU, where each thread has its own buffer; atomic adds on the GPU.
//
//===----------------------------------------------------------------------===//
#include "BackwardBuilder.h"

#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;

namespace attnc::codegen {

void BackwardBuilder::bindGradients(Value grads, bool atomic) {
  grads_ = grads;
  atomicGrads_ = atomic;
  gradBase_.clear();
  Value next = cIdx(0);
  for (size_t i = 0; i < info_.params.size(); ++i) {
    gradBase_.push_back({});
    if (!rt::isFloatDType(info_.params[i].dtype))
      continue;
    gradBase_.back() = next;
    Value n = cIdx(1);
    for (Value d : capDims_[i])
      n = mul(n, d);
    next = add(next, n);
  }
}

bool BackwardBuilder::accumulates() {
  bool any = false;
  v_.getGradBlock()->walk([&](attn::AccumulateOp) { any = true; });
  return any;
}

void BackwardBuilder::bindElsewhere(flash::ScoreGradOp dx) {
  if (elsewhereOf_ == dx.getOperation())
    return;
  elsewhereOf_ = dx;
  elsewhere_.clear();
  std::optional<StringRef> mode = dx.getAccumulate();
  if (!mode || *mode == "all")
    return;
  AccumulateKinds kinds = classifyAccumulates(v_);
  v_.getGradBlock()->walk([&](attn::AccumulateOp a) {
    bool ofQuery = llvm::is_contained(kinds.rows, a);
    if (ofQuery != (*mode == "query"))
      elsewhere_.insert(a);
  });
}

void BackwardBuilder::emitAccumulate(attn::AccumulateOp a, IRMapping &map) {
  if (elsewhere_.contains(a))
    return;
  auto slot = accumulateSlots_.find(a);
  if (slot == accumulateSlots_.end())
    return addToGradients(a, map);
  Value v = materialize(a.getValue(), map);
  if (accumulateKeep_)
    v = select(accumulateKeep_, v, cF32(0.0));
  auto [mem, at] = slot->second;
  // Reassociable: a per-row sum may be vectorized across keys. Where the
  // score's products are fused (the GPU forms), so is the term's last
  // product with this add (alibi's dslope: one FMA per pair, not two ops).
  arith::FastMathFlags flags = arith::FastMathFlags::reassoc;
  if (fuseScoreProducts_)
    flags = flags | arith::FastMathFlags::contract;
  Value sum = arith::AddFOp::create(
      b_, load(mem, at), v, arith::FastMathFlagsAttr::get(b_.getContext(), flags));
  store(sum, mem, at);
}

void BackwardBuilder::addToGradients(attn::AccumulateOp a, IRMapping &map) {
  size_t pi = 0;
  while (info_.params[pi].name != a.getParam())
    ++pi;
  Value off = cIdx(0);
  for (auto [d, idx] : llvm::enumerate(a.getIndices())) {
    // Clamped as the gather that read the element, then widened unsigned.
    Value i = clampedIndex(pi, d, materialize(idx, map));
    off = add(mul(off, capDims_[pi][d]),
              arith::IndexCastUIOp::create(b_, b_.getIndexType(), i));
  }
  Value at = add(gradBase_[pi], off);
  Value v = materialize(a.getValue(), map);
  if (atomicGrads_)
    memref::AtomicRMWOp::create(b_, arith::AtomicRMWKind::addf, v, grads_,
                                ValueRange{at});
  else
    store(arith::AddFOp::create(b_, load(grads_, at), v), grads_, at);
}

Value BackwardBuilder::emitGrad(Block &block, IRMapping &map,
                                bool accumulate) {
  // (one this kernel adds: a sum whose accumulates are all the other
  // kernel's is pure here, computed where its value is used)
  auto hasAccumulate = [&](attn::SumOp s) {
    bool any = false;
    s.getBody().walk(
        [&](attn::AccumulateOp a) { any |= !elsewhere_.contains(a); });
    return any;
  };
  for (Operation &op : block) {
    if (auto y = dyn_cast<attn::YieldOp>(op))
      return materialize(y.getValue(), map);
    if (!accumulate)
      continue; // pure ops are materialized where they are used
    if (auto a = dyn_cast<attn::AccumulateOp>(op)) {
      emitAccumulate(a, map);
    } else if (auto s = dyn_cast<attn::SumOp>(op); s && hasAccumulate(s)) {
      // The sum's terms, with their accumulates, in index order.
      attn::forEachValueRead(s, [&](Value v) { materialize(v, map); });
      Block &body = s.getBody().front();
      Value ub = toIdx(maxI(map.lookup(s.getCount()), cI32(0)));
      auto f = loop(cIdx(0), ub, 1, {cF32(0.0)}, [&](Value i, ValueRange acc) {
        IRMapping inner = map;
        inner.map(body.getArgument(0),
                  arith::IndexCastOp::create(b_, i32_, i));
        Value t = emitGrad(body, inner, /*accumulate=*/true);
        return SmallVector<Value>{arith::AddFOp::create(b_, acc[0], t)};
      });
      map.map(s.getResult(), f.getResult(0));
    }
  }
  llvm_unreachable("score_grad ends with attn.yield");
}

std::pair<Value, Value> BackwardBuilder::pairValues(
    PairSection sec, const Entry &e, Value s, Value dp, Value lse,
    Value delta, Value b, Value h, Value qpos, Value kv) {
  Value sm = scaledScore(s, e.scale, b, h, qpos, kv, pairScoreDiagonal_);
  // score_grad takes the scaled score too (CSE shares the product: the
  // same fast-math flags as scaledScore's, else LLVM merges the two and
  // drops its contract).
  Value xs = arith::MulFOp::create(b_, s, e.scale, scoreProductFlags());
  Value p = probability(e, s, sm, lse);
  // Dropout's factor, where the section drops (b, h, qpos, kv are i32).
  Value z = sec.dropP || sec.dropDp ? dropoutFactor(e, b, h, qpos, kv) : Value();
  // dS as the tiled program writes it.
  SmallVector<Value> args;
  for (Value t : sec.ds.getScores())
    args.push_back(t.getDefiningOp<flash::ProbabilitiesOp>() ? p
                   : t.getDefiningOp<flash::DropoutOp>()
                       ? Value(arith::MulFOp::create(b_, dp, z))
                       : dp);
  for (Value r : sec.ds.getRows()) {
    auto rows = r.getDefiningOp<flash::LoadRowsOp>();
    args.push_back(rows && rows.getValue() == "delta" ? delta : lse);
  }
  Value ds = emitMapBody(sec.ds.getBody().front(), args);
  Block &grad = *v_.getGradBlock();
  IRMapping map;
  if (pairGradDiagonal_)
    map = *pairGradDiagonal_;
  SmallVector<Value> gargs = {xs, b, h, qpos, kv, ds};
  map.map(grad.getArguments(), gargs);
  bindElsewhere(sec.dx);
  Value dx = emitGrad(grad, map, sec.dx.getAccumulate().has_value());
  if (sec.dropP)
    p = arith::MulFOp::create(b_, p, z);
  return {p, unscaledDx_ ? dx : Value(arith::MulFOp::create(b_, dx, e.scale))};
}

Value BackwardBuilder::probability(const Entry &e, Value /*s*/, Value sm,
                                   Value lse) {
  // P = e^(sm - lse) as 2^((sm - lse) log2 e): the forward's exponent form,
  // not the accurate exp of user code.
  return math::Exp2Op::create(
      b_, arith::MulFOp::create(b_, arith::SubFOp::create(b_, sm, lse),
                                e.log2e));
}

} // namespace attnc::codegen

namespace attnc::codegen {

AccumulateKinds classifyAccumulates(attn::VariantOp v) {
  AccumulateKinds kinds;
  Block &grad = *v.getGradBlock();
  // score_grad's arguments: score, b, h, q, kv, dy.
  llvm::DenseSet<Value> ofRow = ProgramBuilder::uniformValues(grad, {0, 4, 5}),
                        ofCol = ProgramBuilder::uniformValues(grad, {0, 3, 5});
  grad.walk([&](attn::AccumulateOp a) {
    auto within = [&](const llvm::DenseSet<Value> &u) {
      return a->getBlock() == &grad &&
             llvm::all_of(a.getIndices(), [&](Value i) { return u.contains(i); });
    };
    bool row = within(ofRow), col = within(ofCol);
    (row && col ? kinds.item : row ? kinds.rows : col ? kinds.cols : kinds.pairs)
        .push_back(a);
  });
  return kinds;
}

FailureOr<PairSection> findPairSection(Block &body) {
  PairSection sec;
  for (Operation &op : body.without_terminator()) {
    bool known = true;
    llvm::TypeSwitch<Operation *>(&op)
        .Case([&](flash::LoadKeyValueOp o) { sec.kv = o; })
        .Case([&](flash::LoadQueryOp o) {
          (o.getTensor() == "q" ? sec.q : sec.dO) = o;
        })
        .Case([&](flash::LoadRowsOp o) {
          (o.getValue() == "lse" ? sec.lse : sec.delta) = o;
        })
        .Case([&](flash::ProductOp o) { (o.getWith() == "k" ? sec.s : sec.dp) = o; })
        .Case([&](flash::ProbabilitiesOp o) { sec.p = o; })
        .Case([&](flash::DropoutOp o) {
          (o.getScores().getDefiningOp<flash::ProbabilitiesOp>() ? sec.dropP
                                                                 : sec.dropDp) = o;
        })
        .Case([&](flash::ScoresMapOp o) { sec.ds = o; })
        .Case([&](flash::ScoreGradOp o) { sec.dx = o; })
        .Case([&](flash::AccumulateOp o) {
          StringRef k = o.getKind();
          (k == "dq" ? sec.dq : k == "dk" ? sec.dk : sec.dv) = o;
        })
        .Case([&](flash::AddOwnedQueryGradOp o) { sec.ownedDq = o; })
        .Default([&](Operation *) { known = false; });
    if (!known)
      return op.emitOpError("is not part of a backward tile");
  }
  if (!sec.s || !sec.dp || !sec.p || !sec.ds || !sec.dx)
    return body.getParentOp()->emitOpError(
        "lacks the backward's products or pair terms");
  return sec;
}

} // namespace attnc::codegen
