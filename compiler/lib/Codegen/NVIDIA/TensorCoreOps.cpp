//===- TensorCoreOps.cpp - The tensor-core forward's ops on registers ----===//
//
// The flash ops of a tile's body as the tensor-core forms hold them: S and
// P as accumulator fragments (element (mt, nt, c) of a thread at
// (mt * NT + nt) * 4 + c), O likewise per Dv n-tile, a row's values once
// per thread row: the products (mma.sync here, wgmma in WgmmaTileLoop.cpp),
// score_mod and mask_mod per element, dropout, the row maxima and sums (a
// row spans the 4 lanes of a quad: two shuffles), the probabilities'
// exp2 and the rescales.
//
//===----------------------------------------------------------------------===//
#include "TensorCoreKernel.h"

using namespace mlir;

namespace attnc::codegen {

std::optional<SmallVector<Value>>
TensorCoreKernel::exp2OfDifferenceFactor(flash::ScoresMapOp m) {
  Block &body = m.getBody().front();
  if (m.getScores().size() != 1 || m.getRows().size() < 1)
    return std::nullopt;
  // The factor is the rows' c (the scale in the exponents: no score_mod)
  // or a constant (log2 e, after a score_mod).
  SmallVector<Operation *> ops;
  for (Operation &op : body)
    if (!isa<arith::ConstantOp>(op))
      ops.push_back(&op);
  if (ops.size() != 4)
    return std::nullopt;
  auto sub = dyn_cast<arith::SubFOp>(ops[0]);
  auto mul = dyn_cast<arith::MulFOp>(ops[1]);
  auto exp = dyn_cast<math::Exp2Op>(ops[2]);
  auto yield = dyn_cast<flash::YieldOp>(ops[3]);
  if (!sub || !mul || !exp || !yield || sub.getLhs() != body.getArgument(0) ||
      sub.getRhs() != body.getArgument(1) || mul.getLhs() != sub ||
      exp.getOperand() != mul || yield.getValues().size() != 1 ||
      yield.getValues()[0] != exp)
    return std::nullopt;
  if (auto cst = mul.getRhs().getDefiningOp<arith::ConstantOp>()) {
    auto f = dyn_cast<FloatAttr>(cst.getValue());
    if (!f)
      return std::nullopt;
    return SmallVector<Value>(2 * MT, cF32(f.getValueAsDouble()));
  }
  auto arg = dyn_cast<BlockArgument>(mul.getRhs());
  if (!arg || arg.getOwner() != &body || arg.getArgNumber() < 2)
    return std::nullopt;
  return regs[m.getRows()[arg.getArgNumber() - 1]];
}

SmallVector<Value> TensorCoreKernel::probabilities(flash::ScoresMapOp m,
                                                   ArrayRef<Value> c) {
  const int64_t R = 2 * MT;
  Value scores = m.getScores()[0];
  const SmallVector<Value> &s = regs[scores];
  const SmallVector<Value> &rowsM = regs[m.getRows()[0]];
  auto af = affine_.find(scores);
  const AffineScores *affine = af == affine_.end() ? nullptr : &af->second;
  // The FMA's factor and addend per row: c and -m c, or (scores alpha x +
  // beta) alpha c and (beta - m) c, where |m c| and |beta c| are small.
  SmallVector<Value> factor(c.begin(), c.end()), addend(R);
  Value small = arith::ConstantOp::create(b_, b_.getBoolAttr(true));
  auto below = [&](Value x) {
    return arith::CmpFOp::create(b_, arith::CmpFPredicate::OLT,
                                 math::AbsFOp::create(b_, x), cF32(1024.0f));
  };
  for (int64_t r = 0; r < R; ++r) {
    Value mc = arith::MulFOp::create(b_, rowsM[r], c[r]);
    small = andI(small, below(mc));
    addend[r] = arith::NegFOp::create(b_, mc);
    if (affine) {
      factor[r] = arith::MulFOp::create(b_, affine->alpha, c[r]);
      small =
          andI(small, below(arith::MulFOp::create(b_, affine->beta[r], c[r])));
      addend[r] = arith::MulFOp::create(
          b_, arith::SubFOp::create(b_, affine->beta[r], rowsM[r]), c[r]);
    }
  }
  // One branch for the warp (a vote), so that it never diverges.
  Value everyRow = NVVM::VoteSyncOp::create(b_, b_.getI1Type(), cI32(-1), small,
                                            NVVM::VoteSyncKind::all);
  auto element = [&](bool fused) {
    SmallVector<Value> out;
    for (int64_t mt = 0; mt < MT; ++mt)
      for (int64_t nt = 0; nt < NT; ++nt)
        for (int64_t e = 0; e < 4; ++e) {
          int64_t r = mt * 2 + (e >> 1), at = (mt * NT + nt) * 4 + e;
          if (fused) {
            out.push_back(
                ex2(math::FmaOp::create(b_, s[at], factor[r], addend[r])));
            continue;
          }
          Value y =
              affine ? Value(arith::AddFOp::create(
                           b_, arith::MulFOp::create(b_, affine->alpha, s[at]),
                           affine->beta[r]))
                     : s[at];
          out.push_back(ex2(arith::MulFOp::create(
              b_, arith::SubFOp::create(b_, y, rowsM[r]), c[r])));
        }
    return out;
  };
  return ifElseYield(everyRow, SmallVector<Type>(s.size(), f32_),
                     [&] { return element(true); },
                     [&] { return element(false); });
}

Value TensorCoreKernel::mapBody(Block &body, ValueRange args) {
  return emitMapBody(body, args, [&](Operation &op, ArrayRef<Value> x) {
    return isa<math::Exp2Op>(op) ? ex2(x[0]) : Value();
  });
}

TensorCoreKernel::ColumnValues TensorCoreKernel::scoreColumnValues() {
  Block &block = v_.getScoreBlock();
  llvm::DenseSet<Value> ofColumn = uniformValues(block, {0, 3}),
                        ofRow = uniformValues(block, {0, 4});
  for (Operation &op : block.without_terminator())
    for (Value r : op.getResults())
      if (ofColumn.contains(r) && !ofRow.contains(r))
        return block.getArgument(2).use_empty() ? ColumnValues::OfKey
                                                : ColumnValues::OfKeyAndHead;
  return ColumnValues::None;
}

Value TensorCoreKernel::additiveOfDiagonals() {
  Block &block = v_.getScoreBlock();
  Value s = block.getArgument(0);
  auto add = cast<attn::YieldOp>(block.getTerminator())
                 .getValue()
                 .getDefiningOp<arith::AddFOp>();
  if (!add || (add.getLhs() == s) == (add.getRhs() == s))
    return Value();
  Value g = add.getLhs() == s ? add.getRhs() : add.getLhs();
  // What reads the score or the key other than through a diagonal value
  // (whose results the tile's mapping gives: a difference itself is not
  // one of them).
  llvm::DenseSet<Operation *> diagonal(diagonals_.ops.begin(),
                                       diagonals_.ops.end());
  llvm::DenseSet<Value> dependent = {s, block.getArgument(4)};
  std::function<void(Block &)> visit = [&](Block &blk) {
    for (Operation &op : blk) {
      if (diagonal.contains(&op))
        continue;
      bool dep = false;
      attn::forEachValueRead(&op,
                             [&](Value v) { dep |= dependent.contains(v); });
      if (dep)
        for (Value r : op.getResults())
          dependent.insert(r);
      for (Region &region : op.getRegions())
        for (Block &inner : region)
          visit(inner);
    }
  };
  visit(block);
  return dependent.contains(g) ? Value() : g;
}

SmallVector<Value> TensorCoreKernel::scoreValues(Value v) {
  const SmallVector<Value> &x = regs[v];
  auto af = affine_.find(v);
  if (af == affine_.end())
    return x;
  SmallVector<Value> out;
  for (int64_t mt = 0; mt < MT; ++mt)
    for (int64_t nt = 0; nt < NT; ++nt)
      for (int64_t c = 0; c < 4; ++c)
        out.push_back(arith::AddFOp::create(
            b_,
            arith::MulFOp::create(b_, af->second.alpha,
                                  x[(mt * NT + nt) * 4 + c]),
            af->second.beta[mt * 2 + (c >> 1)]));
  return out;
}

SmallVector<IRMapping> TensorCoreKernel::columnValues(ArrayRef<Value> kvpos) {
  // With the item's head: every row of the tile has it (the loop's version
  // for one head per item, lowerOp).
  SmallVector<IRMapping> column;
  for (Value kv : kvpos)
    column.push_back(hoistUniform(v_.getScoreBlock(), {0, 3},
                                  {e.zeroF, it.bI32, it.hI32, cI32(0), kv}));
  return column;
}

TensorCoreKernel::ModifiedScores
TensorCoreKernel::modifiedScores(ArrayRef<Value> S, ArrayRef<Value> kvpos) {
  // The separable logs' version where every x of the warp's rows and y of
  // its key columns is in [2^-62, 2^62] (so is every product, and none is
  // past f32's range: the reference's f32 product would be inf or 0
  // there). Its scores are never affine: such a log varies with the key,
  // so score_mod is not s plus values of diagonals. Not in an mma.sync
  // tile of more than 64 keys (64 scores and 32 key columns per thread):
  // there the two versions in the loop spilled 26 local-memory
  // instructions per tile into it (synaptic, D=64, sm_80: 3 with the
  // separated version alone, 0 with the other), at 64 keys none; the
  // wgmma form's consumers have 232 registers and none at 128.
  if (!hoistColumns_ || !rowLogsValid_ || (!L.wgmma && NT > 8) ||
      (shareDiagonals_ && diagonals_.bucket && additiveOfDiagonals()))
    return modifiedScoresOf(S, kvpos, false, {});
  // The column values once, for both versions; their range as the least
  // and greatest f32 bit pattern, two integer ops per value (a negative
  // y's pattern is below every positive one, a NaN's above +inf's).
  SmallVector<IRMapping> column = columnValues(kvpos);
  Value lo, hi;
  for (IRMapping &c : column)
    for (const SeparableLog &l : *separable_) {
      Value bits = arith::BitcastOp::create(b_, i32_, c.lookup(l.column));
      lo = lo ? Value(arith::MinSIOp::create(b_, lo, bits)) : bits;
      hi = hi ? Value(arith::MaxSIOp::create(b_, hi, bits)) : bits;
    }
  Value valid =
      andI(rowLogsValid_,
           andI(cmp(arith::CmpIPredicate::sge, lo, cI32(0x20800000)),   // 2^-62
                cmp(arith::CmpIPredicate::sle, hi, cI32(0x5e800000)))); // 2^62
  Value warpValid = NVVM::VoteSyncOp::create(b_, b_.getI1Type(), cI32(-1),
                                             valid, NVVM::VoteSyncKind::all);
  return {ifElseYield(
              warpValid, SmallVector<Type>(S.size(), f32_),
              [&] { return modifiedScoresOf(S, kvpos, true, column).scores; },
              [&] { return modifiedScoresOf(S, kvpos, false, column).scores; }),
          std::nullopt};
}

TensorCoreKernel::ModifiedScores
TensorCoreKernel::modifiedScoresOf(ArrayRef<Value> S, ArrayRef<Value> kvpos,
                                   bool separated,
                                   ArrayRef<IRMapping> columns) {
  Block &block = v_.getScoreBlock();
  llvm::DenseSet<Value> ofRow;
  SmallVector<IRMapping> column(columns.begin(), columns.end());
  // ln x per row and separable log (rowSign ln x: a lg2 and a multiply in
  // the tile, held across the loop beside the rows' x that the other
  // version reads, they spilled: synaptic, D=128, sm_80), and lg2 y per key
  // column of the thread: x and y are normal (modifiedScores), so the
  // flushing lg2 is exact enough, one MUFU.
  SmallVector<SmallVector<Value>> rowLogs, columnLogs;
  if (separated)
    for (const IRMapping &row : scoreRow) {
      IRMapping m = row; // (x is one of its values)
      SmallVector<Value> logs;
      for (const SeparableLog &l : *separable_)
        logs.push_back(queryLogTerm(b_, b_.getLoc(), l, materialize(l.row, m)));
      rowLogs.push_back(logs);
    }
  if (hoistColumns_) {
    ofRow = uniformValues(block, {0, 4});
    if (column.empty())
      column = columnValues(kvpos);
    if (separated)
      for (IRMapping &c : column) {
        SmallVector<Value> logs;
        for (const SeparableLog &l : *separable_)
          logs.push_back(lg2(c.lookup(l.column)));
        columnLogs.push_back(logs);
      }
  }
  // Diagonal values per distinct kv - q of the thread's elements: row r is
  // at rows[0]'s position + 16 (r / 2) + 8 (r % 2) (computeRows; rows past
  // the item's end are clamped, but they are never stored), key k at
  // kvpos[0]'s + 8 (k / 2) + k % 2; computed at their first element, so
  // that few are live at once.
  DiagonalTile tileDiagonals =
      shareDiagonals_
          ? diagonalTile(diagonals_, block,
                         arith::SubIOp::create(b_, kvpos[0], rows[0].qpos),
                         scoreRow[0])
          : DiagonalTile();
  // Element (mt, nt, c) is on diagonal base + at(mt, nt, c).
  auto atOf = [](int64_t mt, int64_t nt, int64_t c) {
    return 8 * nt + (c & 1) - 16 * mt - 8 * (c >> 1);
  };
  auto elements = [&](function_ref<const IRMapping &(int64_t)> diagonalOf) {
    SmallVector<Value> sv;
    for (int64_t mt = 0; mt < MT; ++mt)
      for (int64_t nt = 0; nt < NT; ++nt)
        for (int64_t c = 0; c < 4; ++c) {
          int64_t r = mt * 2 + (c >> 1), k = nt * 2 + (c & 1);
          // The row's values, and the column's where hoisted (emitModifier
          // maps the block's arguments per element).
          IRMapping m = scoreRow[r];
          if (hoistColumns_)
            for (auto [from, to] : column[k].getValueMap())
              if (!isa<BlockArgument>(from) && !ofRow.contains(from))
                m.map(from, to);
          if (shareDiagonals_)
            for (auto [from, to] : diagonalOf(atOf(mt, nt, c)).getValueMap())
              m.map(from, to);
          // ln x (signed) + lg2 y (signed) ln 2: one FMA per score.
          if (separated)
            for (auto [i, l] : llvm::enumerate(*separable_))
              m.map(l.log->getResult(0), pairLog(b_, b_.getLoc(), l,
                                                 columnLogs[k][i],
                                                 rowLogs[r][i]));
          sv.push_back(scaledScore(S[(mt * NT + nt) * 4 + c], e.scale, it.bI32,
                                   rows[r].hI32, rows[r].qpos, kvpos[k], &m));
        }
    return sv;
  };
  auto perDiagonal = [&] {
    llvm::DenseMap<int64_t, IRMapping> diagonal;
    return elements([&](int64_t at) -> const IRMapping & {
      auto [slot, fresh] = diagonal.try_emplace(at);
      if (fresh)
        slot->second =
            diagonalAt(diagonals_, block, tileDiagonals, at, scoreRow[0]);
      return slot->second;
    });
  };
  if (!shareDiagonals_ || !diagonals_.bucket)
    return {perDiagonal(), std::nullopt};
  // A bucketed modifier (relative_bias's bias[h, min(q - kv, 255)]): where
  // the bucket is the same on each of the warp's threads' diagonals (a
  // tile past the last bucket, most of a long sequence's), every diagonal
  // value is, and one computes them all: one gather per tile, not one per
  // diagonal. The same values either way, to the bit.
  const int64_t atLo = atOf(MT - 1, 0, 2), atHi = atOf(0, NT - 1, 1);
  Value same =
      bucketConstant(diagonals_, tileDiagonals, atLo, atHi, scoreRow[0]);
  Value g = additiveOfDiagonals();
  if (!g) {
    Value warpSame = NVVM::VoteSyncOp::create(b_, b_.getI1Type(), cI32(-1),
                                              same, NVVM::VoteSyncKind::all);
    return {ifElseYield(
                warpSame, SmallVector<Type>(S.size(), f32_),
                [&] {
                  IRMapping one = diagonalAt(diagonals_, block, tileDiagonals,
                                             atLo, scoreRow[0]);
                  return elements(
                      [&](int64_t) -> const IRMapping & { return one; });
                },
                perDiagonal),
            std::nullopt};
  }
  // An additive one (s + g, g constant on the tile's diagonals): the tile
  // keeps S and its values are scale S + g per row (AffineScores; scale >
  // 0, so the maximum is taken on S); else alpha 1 and beta 0 over the
  // per-diagonal values.
  const int64_t R = 2 * MT;
  same = andI(same, arith::CmpFOp::create(b_, arith::CmpFPredicate::OGT,
                                          e.scale, cF32(0.0)));
  Value warpSame = NVVM::VoteSyncOp::create(b_, b_.getI1Type(), cI32(-1), same,
                                            NVVM::VoteSyncKind::all);
  SmallVector<Value> out = ifElseYield(
      warpSame, SmallVector<Type>(S.size() + 1 + R, f32_),
      [&] {
        IRMapping one =
            diagonalAt(diagonals_, block, tileDiagonals, atLo, scoreRow[0]);
        SmallVector<Value> y(S.begin(), S.end());
        y.push_back(e.scale);
        for (int64_t r = 0; r < R; ++r) {
          IRMapping m = scoreRow[r];
          for (auto [from, to] : one.getValueMap())
            m.map(from, to);
          for (auto [a, x] :
               llvm::zip(block.getArguments(),
                         ValueRange{e.zeroF, it.bI32, rows[r].hI32,
                                    rows[r].qpos, kvpos[0]}))
            m.map(a, x);
          y.push_back(materialize(g, m));
        }
        return y;
      },
      [&] {
        SmallVector<Value> y = perDiagonal();
        y.push_back(cF32(1.0));
        y.append(R, cF32(0.0));
        return y;
      });
  return {
      SmallVector<Value>(out.begin(), out.begin() + S.size()),
      AffineScores{out[S.size()],
                   SmallVector<Value>(out.begin() + S.size() + 1, out.end())}};
}

/// The ops on a tile's registers: its scores, probabilities and the
/// accumulator (products, modifiers, dropout, maps, rescale).
std::optional<LogicalResult> TensorCoreKernel::lowerTileOp(Operation &op) {
  auto rowsOf = [&](Value v) -> const SmallVector<Value> & { return regs[v]; };
  if (std::optional<LogicalResult> r = lowerProductOp(op))
    return *r;
  if (auto a = dyn_cast<flash::ApplyModsOp>(op)) {
    const SmallVector<Value> &S = regs[a.getScores()];
    // score_mod(S x scale) on every element; mask_mod on partial tiles and
    // tails only.
    SmallVector<Value> kvpos(NT * 2);
    for (int64_t nt = 0; nt < NT; ++nt)
      for (int64_t c = 0; c < 2; ++c)
        kvpos[nt * 2 + c] =
            keyPos(tile.pos0, add(mul(tig, cIdx(2)), cIdx(8 * nt + c)));
    ModifiedScores mod = a.getUnscaled() ? ModifiedScores{S, std::nullopt}
                                         : modifiedScores(S, kvpos);
    const SmallVector<Value> &sv = mod.scores;
    // (regs and affine_ are per loop version: this one's, or none)
    if (mod.affine)
      affine_[a] = *mod.affine;
    else
      affine_.erase(a);
    // (a masked score is -inf either way: alpha > 0)
    regs[a] = ifYield(
        arith::XOrIOp::create(b_, tile.skipMask,
                              arith::ConstantOp::create(b_, b_.getBoolAttr(true))),
        sv, [&] {
          SmallVector<Value> out;
          for (int64_t mt = 0; mt < MT; ++mt)
            for (int64_t nt = 0; nt < NT; ++nt)
              for (int64_t c = 0; c < 4; ++c) {
                int64_t r = mt * 2 + (c >> 1);
                Value col = add(mul(tig, cIdx(2)), cIdx(8 * nt + (c & 1)));
                Value in = cmp(arith::CmpIPredicate::slt, col, tile.cols);
                Value keep = keptByMask(in, it.bI32, rows[r].hI32, rows[r].qpos,
                                        kvpos[nt * 2 + (c & 1)], &maskRow[r]);
                out.push_back(select(keep, sv[(mt * NT + nt) * 4 + c], e.ninf));
              }
          return out;
        });
    return success();
  }
  if (auto d = dyn_cast<flash::DropoutOp>(op)) {
    // A thread's two neighbouring keys 8 nt + 2 tig + {0, 1} (kv0 is a
    // multiple of 16, the first key's position one of 4: resolveProblem)
    // share one Philox block per row.
    const SmallVector<Value> &x = regs[d.getScores()];
    SmallVector<Value> out(x.size());
    for (int64_t mt = 0; mt < MT; ++mt)
      for (int64_t nt = 0; nt < NT; ++nt)
        for (int64_t half = 0; half < 2; ++half) {
          int64_t r = mt * 2 + half;
          Value kv = keyPos(tile.pos0, add(mul(tig, cIdx(2)), cIdx(8 * nt)));
          std::array<Value, 4> block =
              philoxBlock(e, it.bI32, rows[r].hI32, rows[r].qpos, kv);
          for (int64_t c = 0; c < 2; ++c) {
            Value k = c ? Value(arith::AddIOp::create(b_, kv, cI32(1))) : kv;
            int64_t at = (mt * NT + nt) * 4 + 2 * half + c;
            out[at] = arith::MulFOp::create(b_, x[at],
                                            dropoutFactorOf(e, block, k));
          }
        }
    regs[d] = out;
    return success();
  }
  if (auto m = dyn_cast<flash::ScoresMapOp>(op)) {
    if (std::optional<SmallVector<Value>> factor = exp2OfDifferenceFactor(m)) {
      regs[m] = probabilities(m, *factor);
      return success();
    }
    SmallVector<SmallVector<Value>> scores;
    for (Value t : m.getScores())
      scores.push_back(scoreValues(t));
    SmallVector<Value> out;
    for (int64_t mt = 0; mt < MT; ++mt)
      for (int64_t nt = 0; nt < NT; ++nt)
        for (int64_t c = 0; c < 4; ++c) {
          int64_t r = mt * 2 + (c >> 1), at = (mt * NT + nt) * 4 + c;
          SmallVector<Value> args;
          for (const SmallVector<Value> &t : scores)
            args.push_back(t[at]);
          for (Value in : m.getRows())
            args.push_back(rowsOf(in)[r]);
          out.push_back(mapBody(m.getBody().front(), args));
        }
    regs[m] = out;
    return success();
  }
  if (auto s = dyn_cast<flash::ScaleAccOp>(op)) {
    // The overlapped loop: the previous tile's P V completes here (its
    // group is the only one left), and its stage is free.
    if (pendingPv && s.getAcc() == pendingPv->accArg) {
      regs[s.getAcc()] = wg.wait(0, pendingPv->acc, pendingPv->aRegs);
      releaseStage(pendingPv->stage);
      pendingPv.reset();
    }
    const SmallVector<Value> &o = regs[s.getAcc()];
    const SmallVector<Value> &alpha = rowsOf(s.getScale());
    // Where every row of the warp kept its maximum (the algorithm's lazy
    // maximum: a factor of exactly 1), the accumulator is left as it is:
    // one vote and a branch the whole warp takes, instead of Dv / 2
    // multiplies per thread in most tiles.
    Value moved = arith::ConstantOp::create(b_, b_.getBoolAttr(false));
    for (Value a : alpha)
      moved = arith::OrIOp::create(
          b_, moved,
          arith::CmpFOp::create(b_, arith::CmpFPredicate::UNE, a, cF32(1.0)));
    Value anyRow = NVVM::VoteSyncOp::create(b_, b_.getI1Type(), cI32(-1), moved,
                                            NVVM::VoteSyncKind::any);
    regs[s] = ifYield(anyRow, o, [&] {
      SmallVector<Value> out;
      for (int64_t mt = 0; mt < MT; ++mt)
        for (int64_t dt = 0; dt < DT; ++dt)
          for (int64_t c = 0; c < 4; ++c)
            out.push_back(arith::MulFOp::create(b_, o[(mt * DT + dt) * 4 + c],
                                                alpha[mt * 2 + (c >> 1)]));
      // (the sums' n-tiles, where the accumulator has them)
      for (size_t at = out.size(); at < o.size(); ++at)
        out.push_back(arith::MulFOp::create(
            b_, o[at], alpha[(at - MT * DT * 4) / 4 * 2 + ((at % 4) >> 1)]));
      return out;
    });
    return success();
  }
  return std::nullopt;
}

/// The products: S = Q K^T and O += P V (mma.sync; the wgmma form's in
/// WgmmaTileLoop.cpp).
std::optional<LogicalResult> TensorCoreKernel::lowerProductOp(Operation &op) {
  if (auto p = dyn_cast<flash::ProductOp>(op)) {
    if (p.getWith() != "k")
      return op.emitOpError("the mma.sync forward form takes Q K^T only");
    Value kBase = regs[p.getKv()][0];
    if (L.wgmma) {
      regs[p] = wgmmaScores(kBase);
      return success();
    }
    // S = Q K^T: each K fragment (K rows are B's columns, ldmatrix without
    // .trans) feeds every m-tile of the warp.
    SmallVector<SmallVector<Frag>> S(MT, SmallVector<Frag>(NT, Frag(4, e.zeroF)));
    for (int64_t ks = 0; ks < KS; ++ks) {
      SmallVector<Frag> a;
      for (int64_t mt = 0; mt < MT; ++mt)
        a.push_back(L.qInRegisters ? qf[mt][ks] : qFragment(mt, ks));
      for (int64_t nt2 = 0; nt2 < NT / 2; ++nt2) {
        Value key = add(mul(divu(mat, 2), cIdx(8)), r8);
        Frag fr = ldmatrix(sharedPlace(kBase, L.ldK, L.swizzleK, D / 8, key,
                                       remu(mat, 2), 16 * nt2, 2 * ks),
                           false);
        for (int64_t mt = 0; mt < MT; ++mt)
          for (int64_t h = 0; h < 2; ++h)
            S[mt][2 * nt2 + h] =
                mma(a[mt], {fr[2 * h], fr[2 * h + 1]}, S[mt][2 * nt2 + h]);
      }
    }
    SmallVector<Value> flat;
    for (auto &m : S)
      for (auto &f : m)
        flat.append(f.begin(), f.end());
    regs[p] = flat;
    return success();
  }
  if (auto a = dyn_cast<flash::AccumulateOp>(op)) {
    if (a.getKind() != "pv")
      return op.emitOpError("the mma.sync forward form lowers pv only");
    const SmallVector<Value> &P = regs[a.getScores()];
    const SmallVector<Value> &o = regs[a.getAcc()];
    Value vBase = add(regs[a.getWith()][0], cIdx(L.vOffset));
    if (L.wgmma) {
      regs[a] = wgmmaPv(pvOperands(P), o, vBase);
      return success();
    }
    SmallVector<SmallVector<Frag>> O(MT, SmallVector<Frag>(DT));
    for (int64_t mt = 0; mt < MT; ++mt)
      for (int64_t dt = 0; dt < DT; ++dt)
        for (int64_t c = 0; c < 4; ++c)
          O[mt][dt].push_back(o[(mt * DT + dt) * 4 + c]);
    // The sums (row_sums): P times a B of ones, per m-tile, after O's.
    SmallVector<Frag> sums;
    Value one;
    if (a.getRowSums()) {
      for (int64_t mt = 0; mt < MT; ++mt)
        sums.push_back(Frag(o.begin() + MT * DT * 4 + mt * 4,
                            o.begin() + MT * DT * 4 + mt * 4 + 4));
      Value c1 = arith::ConstantOp::create(b_, b_.getFloatAttr(elem_, 1.0));
      one = mf.packPair(c1, c1);
    }
    // O += P V: P's accumulator fragments are the A fragments of the second
    // MMA (converted in registers); each V fragment (ldmatrix.trans) feeds
    // every m-tile.
    auto packP = [&](int64_t mt, int64_t nt, int64_t c) {
      int64_t at = (mt * NT + nt) * 4 + c;
      return packF32Pair(P[at], P[at + 1]);
    };
    for (int64_t kk = 0; kk < KP; ++kk) {
      SmallVector<Frag> fa;
      for (int64_t mt = 0; mt < MT; ++mt)
        fa.push_back({packP(mt, 2 * kk, 0), packP(mt, 2 * kk, 2),
                      packP(mt, 2 * kk + 1, 0), packP(mt, 2 * kk + 1, 2)});
      for (int64_t dt2 = 0; dt2 < DT / 2; ++dt2) {
        Value key = add(mul(remu(mat, 2), cIdx(8)), r8);
        Frag fr = ldmatrix(sharedPlace(vBase, L.ldV, L.swizzleV, DV / 8, key,
                                       divu(mat, 2), 16 * kk, 2 * dt2),
                           true);
        for (int64_t mt = 0; mt < MT; ++mt)
          for (int64_t h = 0; h < 2; ++h)
            O[mt][2 * dt2 + h] =
                mma(fa[mt], {fr[2 * h], fr[2 * h + 1]}, O[mt][2 * dt2 + h]);
      }
      for (size_t mt = 0; mt < sums.size(); ++mt)
        sums[mt] = mma(fa[mt], {one, one}, sums[mt]);
    }
    SmallVector<Value> out;
    for (auto &m : O)
      for (auto &f : m)
        out.append(f.begin(), f.end());
    for (const Frag &f : sums)
      out.append(f.begin(), f.end());
    regs[a] = out;
    return success();
  }
  return std::nullopt;
}

/// The ops on per-row values: maxima, sums and their maps.
std::optional<LogicalResult> TensorCoreKernel::lowerRowOp(Operation &op) {
  const int64_t R = 2 * MT;
  auto rowsOf = [&](Value v) -> const SmallVector<Value> & { return regs[v]; };
  if (auto m = dyn_cast<flash::RowMaxOp>(op)) {
    // A row's maximum over its 4 lanes (xor 1, 2).
    const SmallVector<Value> &y = regs[m.getScores()];
    SmallVector<Value> out(R);
    for (int64_t r = 0; r < R; ++r) {
      int64_t mt = r / 2, half = r % 2;
      Value mx = e.ninf;
      for (int64_t nt = 0; nt < NT; ++nt)
        for (int64_t c = 2 * half; c < 2 * half + 2; ++c)
          mx = arith::MaximumFOp::create(b_, mx, y[(mt * NT + nt) * 4 + c]);
      mx = arith::MaximumFOp::create(b_, mx, shfl(mx, 1));
      out[r] = arith::MaximumFOp::create(b_, mx, shfl(mx, 2));
      if (auto af = affine_.find(m.getScores()); af != affine_.end())
        out[r] = arith::AddFOp::create(
            b_, arith::MulFOp::create(b_, af->second.alpha, out[r]),
            af->second.beta[r]);
    }
    regs[m] = out;
    return success();
  }
  // This lane's part of each row (flash.complete adds the lanes).
  auto partialSums = [&](flash::RowSumOp s) {
    const SmallVector<Value> &p = regs[s.getScores()];
    SmallVector<Value> out(R, e.zeroF);
    for (int64_t mt = 0; mt < MT; ++mt)
      for (int64_t nt = 0; nt < NT; ++nt)
        for (int64_t c = 0; c < 4; ++c) {
          int64_t r = mt * 2 + (c >> 1);
          out[r] = arith::AddFOp::create(b_, out[r], p[(mt * NT + nt) * 4 + c]);
        }
    return out;
  };
  auto lseOnly = [](Operation *user) {
    auto r = dyn_cast<flash::RescaleSumOp>(user);
    return r && r.getLseOnly();
  };
  if (auto s = dyn_cast<flash::RowSumOp>(op)) {
    // Sums for the LSE alone are added where it is written (below).
    if (!s->use_empty() && llvm::all_of(s->getUsers(), lseOnly))
      return success();
    regs[s] = partialSums(s);
    return success();
  }
  if (auto m = dyn_cast<flash::RowsMapOp>(op)) {
    SmallVector<Value> out(R);
    for (int64_t r = 0; r < R; ++r) {
      SmallVector<Value> args;
      for (Value in : m.getInputs())
        args.push_back(rowsOf(in)[r]);
      out[r] = mapBody(m.getBody().front(), args);
    }
    regs[m] = out;
    return success();
  }
  if (auto s = dyn_cast<flash::RescaleSumOp>(op)) {
    auto rescaled = [&](const SmallVector<Value> &add) {
      SmallVector<Value> out(R);
      for (int64_t r = 0; r < R; ++r)
        out[r] = arith::AddFOp::create(
            b_,
            arith::MulFOp::create(b_, rowsOf(s.getSum())[r],
                                  rowsOf(s.getScale())[r]),
            add[r]);
      return out;
    };
    auto rowSum = s.getAdd().getDefiningOp<flash::RowSumOp>();
    if (!s.getLseOnly() || !rowSum) {
      regs[s] = rescaled(rowsOf(s.getAdd()));
      return success();
    }
    // O's sums are the accumulator's: these, the f32 sums of the unrounded
    // probabilities, only where the call writes the LSE (a uniform branch;
    // the adds skipped in a call without it).
    regs[s] = ifYield(e.hasLse, rowsOf(s.getSum()),
                      [&] { return rescaled(partialSums(rowSum)); });
    return success();
  }
  if (auto a = dyn_cast<flash::AccSumsOp>(op)) {
    // The sums' n-tile of m-tile mt: rows g (c 0, 1) and g + 8 (c 2, 3),
    // the same value in both columns (each is all of the row's sum).
    const SmallVector<Value> &acc = regs[a.getAcc()];
    SmallVector<Value> out(R);
    for (int64_t r = 0; r < R; ++r)
      out[r] = acc[MT * DT * 4 + (r / 2) * 4 + 2 * (r % 2)];
    regs[a] = out;
    return success();
  }
  if (auto c = dyn_cast<flash::CompleteOp>(op)) {
    SmallVector<Value> out(R);
    for (int64_t r = 0; r < R; ++r) {
      Value l = rowsOf(c.getSums())[r];
      l = arith::AddFOp::create(b_, l, shfl(l, 1));
      out[r] = arith::AddFOp::create(b_, l, shfl(l, 2));
    }
    regs[c] = out;
    return success();
  }
  return std::nullopt;
}

} // namespace attnc::codegen
