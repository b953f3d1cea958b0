//===- MmaSyncBackwardPairs.cpp - What the backward's pair terms read -----===//
//
// The tensor-core backward's per-pair inputs computed ahead of the pairs
// (MmaSyncBackward.h): score_mod's and score_grad's diagonal values (once
// per distinct kv - q), a side's values (a query's or a key's, once for
// the pairs that share it), the separable logs' terms and the pairs'
// keep flags; and the parameter-gradient sums held in registers (an
// item's, a key's in _bwd_kv, a query's in _bwd_q) and their adds into
// the gradient buffer.
//
//===----------------------------------------------------------------------===//
#include "MmaSyncBackward.h"

using namespace mlir;

namespace attnc::codegen {

bool TensorCoreBackward::diagonalsShared() {
  scoreDiag_ = diagonalValues(v_.getScoreBlock(), {0});
  gradDiag_ = diagonalValues(*v_.getGradBlock(), {0, 5});
  // Not where score_mod also gathers per query or key (synaptic's qamp[b,
  // h, q], key_factor[b, h, kv]) and D > 64: with the accumulators (dK and
  // dV, or dQ) those values already fill the registers, and the diagonal
  // values' made _bwd_kv's loop spill (static model, sm_80 D=128: 0 -> 9
  // local-memory instructions per tile).
  return (!scoreDiag_.ops.empty() || !gradDiag_.ops.empty()) &&
         !(scoreDiag_.positionGathers && std::max(D, DV) > 64);
}

void TensorCoreBackward::beginTileDiagonals(Value base, Value bI32,
                                            Value hI32) {
  diagAt_.clear();
  diagBase_ = base;
  for (IRMapping *m : {&diagScoreArgs_, &diagGradArgs_})
    m->clear();
  diagScoreArgs_.map(v_.getScoreBlock().getArgument(1), bI32);
  diagScoreArgs_.map(v_.getScoreBlock().getArgument(2), hI32);
  diagGradArgs_.map(v_.getGradBlock()->getArgument(1), bI32);
  diagGradArgs_.map(v_.getGradBlock()->getArgument(2), hI32);
  scoreTile_ =
      diagonalTile(scoreDiag_, v_.getScoreBlock(), diagBase_, diagScoreArgs_);
  gradTile_ =
      diagonalTile(gradDiag_, *v_.getGradBlock(), diagBase_, diagGradArgs_);
}

std::pair<IRMapping, IRMapping> &TensorCoreBackward::tileDiagonal(int64_t off) {
  auto [slot, fresh] = diagAt_.try_emplace(off);
  if (fresh) {
    slot->second.first = diagonalAt(scoreDiag_, v_.getScoreBlock(), scoreTile_,
                                    off, diagScoreArgs_);
    if (!gradDiag_.ops.empty())
      slot->second.second = diagonalAt(gradDiag_, *v_.getGradBlock(), gradTile_,
                                       off, diagGradArgs_);
  }
  return slot->second;
}

void TensorCoreBackward::beginSides() {
  Block &score = v_.getScoreBlock(), &grad = *v_.getGradBlock();
  // Arguments: score_mod's (score, b, h, q, kv), score_grad's and dy.
  scoreOfQuery_ = uniformValues(score, {0, 4});
  gradOfQuery_ = uniformValues(grad, {0, 4, 5});
  auto hasSide = [](Block &blk, const llvm::DenseSet<Value> &side,
                    const llvm::DenseSet<Value> &other) {
    for (Operation &op : blk.without_terminator())
      for (Value r : op.getResults())
        if (side.contains(r) && !other.contains(r))
          return true;
    return false;
  };
  llvm::DenseSet<Value> scoreOfKey = uniformValues(score, {0, 3}),
                        gradOfKey = uniformValues(grad, {0, 3, 5});
  hoistsQueries_ = hasSide(score, scoreOfQuery_, scoreOfKey) ||
                   hasSide(grad, gradOfQuery_, gradOfKey);
  hoistsKeys_ = hasSide(score, scoreOfKey, scoreOfQuery_) ||
                hasSide(grad, gradOfKey, gradOfQuery_);
  separable_ = separableLogs(score);
}

TensorCoreBackward::SideValues
TensorCoreBackward::queryValues(Value bI32, Value hI32, Value qpos) {
  Value kv0 = cI32(0);
  return {hoistUniform(v_.getScoreBlock(), {0, 4},
                       {cF32(0.0), bI32, hI32, qpos, kv0}),
          hoistUniform(*v_.getGradBlock(), {0, 4, 5},
                       {cF32(0.0), bI32, hI32, qpos, kv0, cF32(0.0)})};
}

TensorCoreBackward::SideValues
TensorCoreBackward::keyValues(Value bI32, Value hI32, Value kv) {
  Value q0 = cI32(0);
  return {
      hoistUniform(v_.getScoreBlock(), {0, 3}, {cF32(0.0), bI32, hI32, q0, kv}),
      hoistUniform(*v_.getGradBlock(), {0, 3, 5},
                   {cF32(0.0), bI32, hI32, q0, kv, cF32(0.0)})};
}

Value TensorCoreBackward::logsInRange(const SideValues &side, bool query) {
  Value ok = arith::ConstantOp::create(b_, b_.getBoolAttr(true));
  for (const SeparableLog &l : separable_)
    ok = arith::AndIOp::create(
        b_, ok,
        inLogRange(b_, b_.getLoc(),
                   side.score.lookup(query ? l.row : l.column)));
  return ok;
}

SmallVector<Value> TensorCoreBackward::logTerms(const SideValues &side,
                                                bool query) {
  SmallVector<Value> out;
  for (const SeparableLog &l : separable_)
    out.push_back(
        query ? queryLogTerm(b_, b_.getLoc(), l, side.score.lookup(l.row))
              : lg2Flushing(b_, b_.getLoc(), side.score.lookup(l.column)));
  return out;
}

SmallVector<Value> TensorCoreBackward::pairLogs(ArrayRef<Value> queryTerms,
                                                ArrayRef<Value> keyTerms) {
  SmallVector<Value> out;
  for (auto [i, l] : llvm::enumerate(separable_))
    out.push_back(pairLog(b_, b_.getLoc(), l, keyTerms[i], queryTerms[i]));
  return out;
}

void TensorCoreBackward::bindPair(
    const SideValues *query, const SideValues *key,
    const std::pair<IRMapping, IRMapping> *diagonal, ArrayRef<Value> logs) {
  if (!query && !key) {
    pairScoreDiagonal_ = diagonal ? &diagonal->first : nullptr;
    pairGradDiagonal_ = diagonal ? &diagonal->second : nullptr;
    return;
  }
  for (bool grad : {false, true}) {
    IRMapping &m = grad ? pairGrad_ : pairScore_;
    const llvm::DenseSet<Value> &ofQuery = grad ? gradOfQuery_ : scoreOfQuery_;
    m.clear();
    if (query)
      m = grad ? query->grad : query->score;
    // The key's values that vary with the key (the block's arguments are
    // the pair's own, emitModifier's).
    if (key)
      for (auto [from, to] : (grad ? key->grad : key->score).getValueMap())
        if (!isa<BlockArgument>(from) && !ofQuery.contains(from))
          m.map(from, to);
    if (diagonal)
      for (auto [from, to] :
           (grad ? diagonal->second : diagonal->first).getValueMap())
        m.map(from, to);
  }
  for (auto [l, v] : llvm::zip(separable_, logs))
    pairScore_.map(l.log->getResult(0), v);
  pairScoreDiagonal_ = &pairScore_;
  pairGradDiagonal_ = &pairGrad_;
}

SmallVector<Value> TensorCoreBackward::keepFlags(
    const Tile &t, ArrayRef<Value> base,
    function_ref<std::pair<Value, Value>(int64_t)> posAndKey, Value bI32,
    Value hI32) {
  Value masked = arith::XOrIOp::create(
      b_, t.skipMask, arith::ConstantOp::create(b_, b_.getBoolAttr(true)));
  return ifYield(masked, base, [&] {
    SmallVector<Value> out;
    for (size_t at = 0; at < base.size(); ++at) {
      std::pair<Value, Value> qk = posAndKey(int64_t(at));
      out.push_back(keptByMask(base[at], bI32, hI32, qk.first, qk.second));
    }
    return out;
  });
}

void TensorCoreBackward::zeroSums() {
  int64_t n = keySlot(kinds_.cols.size(), 0);
  for (int64_t i = 0; i < n; ++i)
    store(cF32(0.0), sums_, cIdx(i));
}

void TensorCoreBackward::addSums(Value bI32, Value hI32, ArrayRef<Value> kv,
                                 ArrayRef<Value> keyLive) {
  Block &grad = *v_.getGradBlock();
  Value lane = arith::RemUIOp::create(b_, tid, cIdx(32));
  auto add = [&](attn::AccumulateOp a, Value sum, Value key) {
    IRMapping m;
    m.map(grad.getArgument(1), bI32);
    m.map(grad.getArgument(2), hI32);
    if (key)
      m.map(grad.getArgument(4), key);
    m.map(a.getValue(), sum);
    addToGradients(a, m);
  };
  for (auto [i, a] : llvm::enumerate(kinds_.item)) {
    Value s = load(sums_, cIdx(int64_t(i)));
    for (int64_t off : {16, 8, 4, 2, 1})
      s = arith::AddFOp::create(b_, s, mf.shflXor(s, off));
    ifThen(arith::CmpIOp::create(b_, arith::CmpIPredicate::eq, lane, cIdx(0)),
           [&] { add(a, s, Value()); });
  }
  Value quadLead =
      arith::CmpIOp::create(b_, arith::CmpIPredicate::eq, tig2, cIdx(0));
  for (auto [i, a] : llvm::enumerate(kinds_.cols))
    for (int64_t k = 0; k < 2; ++k) {
      Value s = load(sums_, cIdx(keySlot(i, k)));
      for (int64_t off : {1, 2})
        s = arith::AddFOp::create(b_, s, mf.shflXor(s, off));
      ifThen(arith::AndIOp::create(b_, quadLead, keyLive[k]),
             [&] { add(a, s, kv[k]); });
    }
}

void TensorCoreBackward::addRowSums(ArrayRef<attn::AccumulateOp> accs,
                                    Value sums, Value bI32,
                                    ArrayRef<Value> hI32, ArrayRef<Value> qpos,
                                    ArrayRef<Value> live) {
  Block &grad = *v_.getGradBlock();
  Value quadLead =
      arith::CmpIOp::create(b_, arith::CmpIPredicate::eq, tig2, cIdx(0));
  for (auto [i, acc] : llvm::enumerate(accs))
    for (int64_t k = 0; k < 2; ++k) {
      attn::AccumulateOp a = acc;
      // A row's pairs are over its quad's four lanes.
      Value s = load(sums, cIdx(2 * int64_t(i) + k));
      for (int64_t off : {1, 2})
        s = arith::AddFOp::create(b_, s, mf.shflXor(s, off));
      ifThen(arith::AndIOp::create(b_, quadLead, live[k]), [&] {
        IRMapping m;
        m.map(grad.getArgument(1), bI32);
        m.map(grad.getArgument(2), hI32[k]);
        m.map(grad.getArgument(3), qpos[k]);
        m.map(a.getValue(), s);
        addToGradients(a, m);
      });
    }
}

} // namespace attnc::codegen
