//===- CpuKernel.cpp - The CPU form of the flash program --------------------===//
//
// A func over a range of work items: Q, K^T, V, S/P and the accumulator in
// stack-allocated f32 tiles, register-blocked vector micro-kernels for both
// matrix products, scalar modifiers and softmax that LLVM vectorizes.
//
//===----------------------------------------------------------------------===//
#include "attnc/Codegen/KernelForm.h"
#include "ProgramBuilder.h"

using namespace mlir;
namespace abi = attnc::rt::abi;

namespace attnc::codegen {
namespace {

/// The CPU form's lowering of a forward flash.kernel. Tiles live in
/// stack-allocated f32 buffers: Q, K^T, V, the scores and the accumulator;
/// each per-row value is a buffer of block_m. The element-wise and per-row
/// ops between the products run in one loop over the live rows: a row's
/// scores are rewritten in place, W keys at a time, as the reduction that
/// needs them (row_max, row_sum) reads them, and its per-row values are
/// scalars until they are needed past the loop. The accumulator's rescale
/// is folded into the P V product's initial values.
class CpuKernel : public ProgramBuilder {
public:
  CpuKernel(ModuleOp module, attn::VariantOp v, const MaskAnalysis &mask,
            const FlashConfig &cfg)
      : ProgramBuilder(module, v, mask, cfg) {
    // Register blocking: RB rows at a time; CB vectors of keys (QK^T) and
    // CBP vectors of value dims (P.V), as many as the register file holds
    // (32 vector registers with AVX-512, 16 otherwise) and as divide the
    // tile evenly.
    RB = BM % 4 == 0 ? 4 : 1;
    int64_t cap = VW == 16 ? 4 : 2;
    auto fit = [&](int64_t n) {
      for (int64_t c : {4, 2, 1})
        if (c <= cap && n % c == 0)
          return c;
      return int64_t(1);
    };
    CB = fit(BN / VW);
    VWP = VW == 16 && DV % 16 == 0 ? 16 : 8;
    CBP = fit(DV / VWP);
  }
  LogicalResult lower(flash::KernelOp kernel);

private:
  /// A tile of scores: its buffer and the element-wise ops
  /// (flash.apply_mods, flash.scores_map) that make it from the product
  /// last written there. `applied` says how many of a buffer's ops its
  /// rows hold.
  struct ScoreTile {
    Value buffer;
    SmallVector<Operation *> chain;
  };
  /// The row a row loop is at, and the per-row values it holds as scalars.
  struct RowScope {
    Value r;
    DenseMap<Value, Value> scalar;
    IRMapping scoreRow, maskRow; // score_mod's and mask_mod's row values
    Value bI32, hI32, qpos;
  };

  LogicalResult lowerOps(Block::iterator from, Block::iterator to);
  LogicalResult lowerOp(Operation &op, Block::iterator &next,
                        Block::iterator end);
  void loadQuery();
  void loadKeyValue();
  void product(Value result);
  void accumulatePV(flash::AccumulateOp op);
  /// Ops [from, to) that work row by row, lowered in one loop over the
  /// item's rows.
  LogicalResult lowerRowRun(ArrayRef<Operation *> run);
  Value rowValue(RowScope &rs, Value rows);
  /// Writes the pending ops of `s` into its row `rs.r` and reduces it
  /// (`max`, `add`) unless `kind` is empty; returns the reduction.
  Value materializeRow(RowScope &rs, Value s, StringRef kind);
  Value rowBuffer(Value v);

  int64_t RB = 1, CB = 1, VWP = 8, CBP = 1;
  Entry e;
  Item it;
  Tile tile;
  Value Qs, Kt, Vs, Acc, rowsUp;
  Operation *allocAnchor = nullptr;
  DenseMap<Value, ScoreTile> scores;
  DenseMap<Value, SmallVector<Operation *>> applied; // buffer -> its ops
  func::FuncOp fn_;
  DenseMap<Value, Value> buffers;  // rows, partials, acc values -> memrefs
  DenseMap<Value, Value> accScale; // acc from flash.scale_acc -> its rows
};

Value CpuKernel::rowBuffer(Value v) {
  if (Value b = buffers.lookup(v))
    return b;
  // One buffer per value, made at the function's entry and zeroed there:
  // rows past an item's end are never written and stay finite.
  OpBuilder::InsertionGuard g(b_);
  b_.setInsertionPoint(allocAnchor);
  Value buf = alloca(BM);
  loop0(cIdx(0), cIdx(BM), 1, [&](Value r) { store(cF32(0.0), buf, r); });
  buffers[v] = buf;
  return buf;
}

LogicalResult CpuKernel::lower(flash::KernelOp kernel) {
  SmallVector<Type> args = kernelArgs(); // ..., begin
  args.push_back(i64_);                  // end
  OpBuilder::InsertionGuard guard(b_);
  b_.setInsertionPoint(kernel);
  auto fn = func::FuncOp::create(b_, kernel.getSymName(),
                                 b_.getFunctionType(args, {}));
  fn_ = fn;
  Block *entry = fn.addEntryBlock();
  // Allocations (rowBuffer) go before this marker, ahead of the loops.
  b_.setInsertionPointToStart(entry);
  allocAnchor = cIdx(0).getDefiningOp();
  e = loadEntry(fn.getArguments());
  {
    OpBuilder::InsertionGuard g(b_);
    b_.setInsertionPoint(allocAnchor);
    Qs = alloca(BM * D);
    Kt = alloca(D * BN);
    Vs = alloca(BN * DV);
  }
  Block &body = kernel.getBlock();
  if (failed(lowerOps(body.begin(), body.end())))
    return failure();
  func::ReturnOp::create(b_);
  return success();
}

LogicalResult CpuKernel::lowerOps(Block::iterator from, Block::iterator to) {
  for (Block::iterator i = from; i != to;) {
    Operation &op = *i++;
    if (failed(lowerOp(op, i, to)))
      return failure();
  }
  return success();
}

/// Ops that work row by row.
static bool isRowwise(Operation &op) {
  return isa<flash::ApplyModsOp, flash::DropoutOp, flash::RowMaxOp,
             flash::RowSumOp,
             flash::RowsMapOp, flash::ScoresMapOp, flash::RescaleSumOp,
             flash::CompleteOp, flash::StoreOutputOp>(op);
}

LogicalResult CpuKernel::lowerOp(Operation &op, Block::iterator &next,
                                 Block::iterator end) {
  Value c0 = cIdx(0);
  if (auto w = dyn_cast<flash::WorkItemOp>(op)) {
    // The rest of the kernel runs once per work item of the range.
    (void)w;
    Value first = toIdx(fn_.getArgument(fn_.getNumArguments() - 2));
    Value last = toIdx(fn_.getArgument(fn_.getNumArguments() - 1));
    LogicalResult result = success();
    loop0(first, last, 1, [&](Value item) {
      it = decodeItem(e, item);
      // The matrix products cover the live rows rounded up to the
      // register block (decode: 4 rows, not 64); the extra rows of Qs are
      // zero.
      rowsUp = mul(arith::CeilDivUIOp::create(b_, it.rows, cIdx(RB)), cIdx(RB));
      result = lowerOps(next, end);
    });
    next = end;
    return result;
  }
  if (isa<flash::LoadQueryOp>(op)) {
    loadQuery();
    return success();
  }
  if (auto z = dyn_cast<flash::ZeroAccOp>(op)) {
    {
      OpBuilder::InsertionGuard g(b_);
      b_.setInsertionPoint(allocAnchor);
      Acc = alloca(BM * DV);
    }
    buffers[z] = Acc;
    loop0(c0, cIdx(BM * DV), 1, [&](Value x) { store(cF32(0.0), Acc, x); });
    return success();
  }
  if (auto f = dyn_cast<flash::FillRowsOp>(op)) {
    Value buf = rowBuffer(f);
    Value x = cF32(f.getValue().convertToFloat());
    loop0(c0, cIdx(BM), 1, [&](Value r) { store(x, buf, r); });
    return success();
  }
  if (auto z = dyn_cast<flash::ZeroPartialsOp>(op)) {
    Value buf = rowBuffer(z);
    loop0(c0, cIdx(BM), 1, [&](Value r) { store(cF32(0.0), buf, r); });
    return success();
  }
  if (auto loopOp = dyn_cast<flash::ForTilesOp>(op)) {
    // Iteration values live in their initial values' buffers, updated in
    // place; what a tile yields from elsewhere is copied back.
    Block &body = loopOp.getBody().front();
    SmallVector<Value> iterBufs;
    for (Value init : loopOp.getInits())
      iterBufs.push_back(buffers.lookup(init));
    LogicalResult result = success();
    forEachVisitedTile(it, [&](const Tile &t) {
      tile = t;
      for (auto [arg, buf] : llvm::zip(body.getArguments().drop_front(),
                                       iterBufs))
        buffers[arg] = buf;
      // A row value yielded into a slot shares its buffer when it is made
      // by a run of row-wise ops that holds every read of the slot's old
      // value (the run writes each row's new value after reading its old
      // one).
      auto y = cast<flash::YieldOp>(body.getTerminator());
      for (auto [i, v] : llvm::enumerate(y.getValues())) {
        Operation *def = v.getDefiningOp();
        if (!isa<flash::RowsType, flash::PartialsType>(v.getType()) ||
            buffers.count(v) || !def || !isRowwise(*def))
          continue;
        Block::iterator start(def), stop(def);
        while (start != body.begin() && isRowwise(*std::prev(start)))
          --start;
        while (stop != body.end() && isRowwise(*stop))
          ++stop;
        Value old = body.getArgument(i + 1);
        bool inside = llvm::all_of(old.getUsers(), [&](Operation *u) {
          for (Block::iterator k = start; k != stop; ++k)
            if (&*k == u)
              return true;
          return false;
        });
        if (inside)
          buffers[v] = iterBufs[i];
      }
      if (failed(lowerOps(body.begin(), Block::iterator(y))))
        result = failure();
      for (auto [i, v] : llvm::enumerate(y.getValues())) {
        Value from = buffers.lookup(v);
        if (from && from != iterBufs[i]) {
          int64_t n = isa<flash::AccType>(v.getType()) ? BM * DV : BM;
          loop0(cIdx(0), cIdx(n), 1,
                [&](Value x) { store(load(from, x), iterBufs[i], x); });
        }
      }
    });
    for (auto [res, buf] : llvm::zip(loopOp.getResults(), iterBufs))
      buffers[res] = buf;
    return result;
  }
  if (isa<flash::LoadKeyValueOp>(op)) {
    loadKeyValue();
    return success();
  }
  if (auto p = dyn_cast<flash::ProductOp>(op)) {
    product(p);
    return success();
  }
  if (auto s = dyn_cast<flash::ScaleAccOp>(op)) {
    buffers[s] = buffers.lookup(s.getAcc());
    accScale[s] = s.getScale();
    return success();
  }
  if (auto a = dyn_cast<flash::AccumulateOp>(op)) {
    if (a.getKind() != "pv")
      return op.emitOpError("the CPU forward form lowers pv only");
    accumulatePV(a);
    return success();
  }
  if (isRowwise(op)) {
    // The run of row-wise ops that starts here.
    SmallVector<Operation *> run = {&op};
    while (next != end && isRowwise(*next))
      run.push_back(&*next++);
    return lowerRowRun(run);
  }
  return op.emitOpError("is not lowered by the CPU forward form");
}

void CpuKernel::loadQuery() {
  Value c0 = cIdx(0);
  const SmallVector<Value> &qs = e.qs;
  // Q tile -> Qs (f32); rows past the end are zero.
  loop0(c0, cIdx(BM), 1, [&](Value r) {
    loop0(c0, cIdx(D), 1,
          [&](Value d) { store(cF32(0.0), Qs, add(mul(r, cIdx(D)), d)); });
  });
  loop0(c0, it.rows, 1, [&](Value r) {
    auto [hr, ir] = rowCoords(e, it, r);
    Value rowBase = add(add(mul(it.b, qs[0]), mul(hr, qs[1])), mul(ir, qs[2]));
    loop0(c0, cIdx(D), 1, [&](Value d) {
      store(toF32(load(e.q, add(rowBase, mul(d, qs[3])))), Qs,
            add(mul(r, cIdx(D)), d));
    });
  });
}

void CpuKernel::loadKeyValue() {
  Value c0 = cIdx(0), c1 = cIdx(1);
  Value kv0 = tile.kv0, cols = tile.cols;
  // K^T and V tiles (f32); columns past the end are zero. Contiguous and
  // paged K/V get their own copy of the loop: a page-table test per row
  // would keep LLVM from optimizing the contiguous one (it made causal
  // prefill ~1.8x slower).
  Value paged = arith::CmpIOp::create(b_, arith::CmpIPredicate::ne,
                                      ipAt(abi::kPageSize), c0);
  auto loadTiles = [&](bool pagedRows) {
    loop0(c0, cIdx(BN), 1, [&](Value c) {
      Value inRange =
          arith::CmpIOp::create(b_, arith::CmpIPredicate::slt, c, cols);
      Value row = minI(add(kv0, c), sub(add(kv0, cols), c1));
      Value kRow = pagedRows
                       ? pagedRowOffset(it, row, it.kBase, e.ks[2], abi::kKStride)
                       : add(it.kBase, mul(row, e.ks[2]));
      Value vRow = pagedRows
                       ? pagedRowOffset(it, row, it.vBase, e.vs[2], abi::kVStride)
                       : add(it.vBase, mul(row, e.vs[2]));
      // Rows with unit stride along D (every usual layout) are read 8
      // elements at a time; other strides element by element. K is stored
      // transposed, V as is.
      forTileRow(e.k, kRow, e.ks[3], D, inRange, [&](Value d, Value x) {
        store(x, Kt, add(mul(d, cIdx(BN)), c));
      });
      forTileRow(
          e.v, vRow, e.vs[3], DV, inRange,
          [&](Value d, Value x) { store(x, Vs, add(mul(c, cIdx(DV)), d)); },
          [&](Value d, Value x8) {
            vector::StoreOp::create(b_, x8, Vs,
                                    ValueRange{add(mul(c, cIdx(DV)), d)});
          });
    });
  };
  ifThenElse(paged, [&] { loadTiles(true); }, [&] { loadTiles(false); });
}

void CpuKernel::product(Value result) {
  Value S;
  {
    OpBuilder::InsertionGuard g(b_);
    b_.setInsertionPoint(allocAnchor);
    S = alloca(BM * BN);
  }
  scores[result] = ScoreTile{S, {}};
  applied[S] = {};
  VectorType vecQK = VectorType::get({VW}, f32_);
  // S = Qs . Kt, register-blocked: RB rows x CB vectors of VW keys per
  // step over d, so each loaded K vector and broadcast Q value feeds
  // several FMAs. Padding rows of Qs are zero.
  loop0(cIdx(0), rowsUp, RB, [&](Value r) {
    loop0(cIdx(0), cIdx(BN), VW * CB, [&](Value cv) {
      Value zero =
          arith::ConstantOp::create(b_, DenseElementsAttr::get(vecQK, 0.0f));
      SmallVector<Value> init(RB * CB, zero);
      SmallVector<Value> dl =
          outerProduct(Qs, D, Kt, BN, r, cv, D, RB, CB, vecQK, init);
      for (int64_t i = 0; i < RB; ++i)
        for (int64_t j = 0; j < CB; ++j)
          vector::StoreOp::create(b_, dl[i * CB + j], S,
                                  ValueRange{add(mul(add(r, cIdx(i)), cIdx(BN)),
                                                 add(cv, cIdx(j * VW)))});
    });
  });
}

void CpuKernel::accumulatePV(flash::AccumulateOp a) {
  Value AccBuf = buffers.lookup(a.getAcc());
  ScoreTile p = scores.lookup(a.getScores());
  Value P = p.buffer;
  assert(applied[P] == p.chain && "P V reads a tile with pending ops");
  Value scaleRows = accScale.lookup(a.getAcc());
  Value Alpha = scaleRows ? buffers.lookup(scaleRows) : Value();
  buffers[a] = AccBuf;
  VectorType vecPV = VectorType::get({VWP}, f32_);
  // acc = acc * alpha + P . V, register-blocked like QK^T: RB rows x CBP
  // vectors of VWP value dims per step over the keys.
  loop0(cIdx(0), rowsUp, RB, [&](Value r) {
    loop0(cIdx(0), cIdx(DV), VWP * CBP, [&](Value d0) {
      SmallVector<Value> init;
      for (int64_t i = 0; i < RB; ++i) {
        Value alphaV = Alpha ? Value(vector::BroadcastOp::create(
                                   b_, vecPV, load(Alpha, add(r, cIdx(i)))))
                             : Value();
        for (int64_t j = 0; j < CBP; ++j) {
          Value at =
              add(mul(add(r, cIdx(i)), cIdx(DV)), add(d0, cIdx(j * VWP)));
          Value x = vector::LoadOp::create(b_, vecPV, AccBuf, ValueRange{at});
          init.push_back(alphaV ? Value(arith::MulFOp::create(b_, x, alphaV))
                                : x);
        }
      }
      SmallVector<Value> pv =
          outerProduct(P, BN, Vs, DV, r, d0, BN, RB, CBP, vecPV, init);
      for (int64_t i = 0; i < RB; ++i)
        for (int64_t j = 0; j < CBP; ++j)
          vector::StoreOp::create(b_, pv[i * CBP + j], AccBuf,
                                  ValueRange{add(mul(add(r, cIdx(i)), cIdx(DV)),
                                                 add(d0, cIdx(j * VWP)))});
    });
  });
}

Value CpuKernel::rowValue(RowScope &rs, Value rows) {
  if (Value x = rs.scalar.lookup(rows))
    return x;
  Value x = load(buffers.lookup(rows), rs.r);
  rs.scalar[rows] = x;
  return x;
}

Value CpuKernel::materializeRow(RowScope &rs, Value s, StringRef kind) {
  ScoreTile &tile_ = scores[s];
  Value S = tile_.buffer;
  // The ops of the chain the buffer does not hold yet.
  SmallVector<Operation *> &done = applied[S];
  assert(done.size() <= tile_.chain.size() &&
         std::equal(done.begin(), done.end(), tile_.chain.begin()) &&
         "a tile whose buffer was rewritten by another chain");
  struct {
    SmallVector<Operation *> pending;
  } st{SmallVector<Operation *>(tile_.chain.begin() + done.size(),
                                tile_.chain.end())};
  done = tile_.chain;
  int64_t W = VW;
  VectorType vF = VectorType::get({W}, f32_);
  VectorType vI = VectorType::get({W}, i32_);
  Value sRow = mul(rs.r, cIdx(BN));
  bool mods = llvm::any_of(st.pending,
                           [](Operation *o) { return isa<flash::ApplyModsOp>(o); });
  bool drops = llvm::any_of(
      st.pending, [](Operation *o) { return isa<flash::DropoutOp>(o); });
  Block &scoreBlock = v_.getScoreBlock(), &maskBlock = v_.getMaskBlock();
  llvm::DenseSet<Value> scoreU, maskU;
  Value vScale, vNinf, iota, kv0I32, colsI32;
  if (mods) {
    // Values that do not depend on kv (or score) are computed once per row.
    scoreU = uniformValues(scoreBlock, {0, 4});
    maskU = uniformValues(maskBlock, {3});
    auto hoist = [&](Block &block, const llvm::DenseSet<Value> &uni,
                     IRMapping &map) {
      for (Operation &op : block)
        attn::forEachValueRead(&op, [&](Value operand) {
          if (uni.contains(operand) &&
              (isa<attn::YieldOp>(op) || !uni.contains(op.getResult(0))))
            materialize(operand, map);
        });
    };
    hoist(scoreBlock, scoreU, rs.scoreRow);
    hoist(maskBlock, maskU, rs.maskRow);
    vScale = vector::BroadcastOp::create(b_, vF, e.scale);
    vNinf = vector::BroadcastOp::create(b_, vF, e.ninf);
  }
  if (mods || drops) {
    SmallVector<int32_t> lanes;
    for (int64_t i = 0; i < W; ++i)
      lanes.push_back(int32_t(i));
    iota = arith::ConstantOp::create(
        b_, DenseElementsAttr::get(vI, ArrayRef<int32_t>(lanes)));
    kv0I32 = arith::IndexCastOp::create(b_, i32_, tile.pos0); // positions
    colsI32 = arith::IndexCastOp::create(b_, i32_, tile.cols);
  }
  // The row values the pending maps read, as scalars of this row.
  SmallVector<SmallVector<Value>> mapRows;
  for (Operation *p : st.pending)
    if (auto m = dyn_cast<flash::ScoresMapOp>(p)) {
      SmallVector<Value> v;
      for (Value r : m.getRows())
        v.push_back(vector::BroadcastOp::create(b_, vF, rowValue(rs, r)));
      mapRows.push_back(v);
    }
  Value ident = kind == "max" ? e.ninf : e.zeroF;
  auto rowLoop = [&](bool withMask) {
    auto l = loop(cIdx(0), cIdx(BN), W,
                  {vector::BroadcastOp::create(b_, vF, ident)},
                  [&](Value c, ValueRange acc) {
      Value x = vector::LoadOp::create(b_, vF, S, ValueRange{add(sRow, c)});
      size_t mi = 0;
      for (Operation *p : st.pending) {
        if (isa<flash::ApplyModsOp>(p)) {
          // scale, score_mod on every key, and the mask (with the bounds)
          // only on partial tiles and tails.
          Value cI32 = arith::IndexCastOp::create(b_, i32_, c);
          Value col = arith::AddIOp::create(
              b_, vector::BroadcastOp::create(b_, vI, cI32), iota);
          Value kvv = arith::AddIOp::create(
              b_, vector::BroadcastOp::create(b_, vI, kv0I32), col);
          llvm::DenseMap<Value, Value> sargs;
          sargs[scoreBlock.getArgument(0)] = arith::MulFOp::create(b_, x, vScale);
          sargs[scoreBlock.getArgument(4)] = kvv;
          x = emitModifierVec(scoreBlock, sargs, scoreU, rs.scoreRow, W);
          if (withMask) {
            Value inRange = arith::CmpIOp::create(
                b_, arith::CmpIPredicate::slt, col,
                vector::BroadcastOp::create(b_, vI, colsI32));
            llvm::DenseMap<Value, Value> margs;
            margs[maskBlock.getArgument(3)] = kvv;
            Value m = emitModifierVec(maskBlock, margs, maskU, rs.maskRow, W);
            x = select(arith::AndIOp::create(b_, inRange, m), x, vNinf);
          }
          continue;
        }
        if (isa<flash::DropoutOp>(p)) {
          // The lanes' keys kv0 + c .. + W - 1; kv0 and c are multiples of
          // W, so whole Philox blocks when W is a multiple of 4 (the first
          // key's position is one of 4 with dropout: resolveProblem).
          Value cI32 = arith::IndexCastOp::create(b_, i32_, c);
          Value first = arith::AddIOp::create(b_, kv0I32, cI32);
          Value z;
          if (W % 4 == 0) {
            z = dropoutFactorLanes(e, rs.bI32, rs.hI32, rs.qpos, first, W);
          } else {
            Value kvv = arith::AddIOp::create(
                b_, vector::BroadcastOp::create(b_, vI, first), iota);
            z = dropoutFactor(e, rs.bI32, rs.hI32, rs.qpos, kvv);
          }
          x = arith::MulFOp::create(b_, x, z);
          continue;
        }
        auto m = cast<flash::ScoresMapOp>(p);
        SmallVector<Value> margs = {x};
        margs.append(mapRows[mi++]);
        x = emitMapBody(m.getBody().front(), margs);
      }
      if (!st.pending.empty())
        vector::StoreOp::create(b_, x, S, ValueRange{add(sRow, c)});
      if (kind == "max")
        return SmallVector<Value>{arith::MaximumFOp::create(b_, acc[0], x)};
      if (kind == "add")
        return SmallVector<Value>{arith::AddFOp::create(b_, acc[0], x)};
      return SmallVector<Value>{acc[0]};
    });
    vector::CombiningKind ck = kind == "max" ? vector::CombiningKind::MAXIMUMF
                                             : vector::CombiningKind::ADD;
    return Value(vector::ReductionOp::create(b_, ck, l.getResult(0)));
  };
  Value red;
  if (mods) {
    // Two copies of the loop, chosen once per row: full tiles without a
    // tail never evaluate mask_mod.
    auto branch = scf::IfOp::create(b_, TypeRange{f32_}, tile.skipMask,
                                    /*withElse=*/true);
    OpBuilder::InsertionGuard g(b_);
    b_.setInsertionPointToStart(branch.thenBlock());
    scf::YieldOp::create(b_, rowLoop(false));
    b_.setInsertionPointToStart(branch.elseBlock());
    scf::YieldOp::create(b_, rowLoop(true));
    red = branch.getResult(0);
  } else {
    red = rowLoop(false);
  }
  return red;
}

LogicalResult CpuKernel::lowerRowRun(ArrayRef<Operation *> run) {
  // Values of the run used past it (or yielded) are written to buffers at
  // the end of each row; the rest stay scalars of the row.
  llvm::DenseSet<Operation *> inRun(run.begin(), run.end());
  SmallVector<Value> escaping;
  for (Operation *op : run)
    for (Value r : op->getResults())
      if (isa<flash::RowsType, flash::PartialsType>(r.getType()) &&
          llvm::any_of(r.getUsers(),
                       [&](Operation *u) { return !inRun.contains(u); }))
        escaping.push_back(r);
  for (Value v : escaping)
    rowBuffer(v);
  // Pending element-wise ops: results share their operand's buffer.
  for (Operation *op : run) {
    if (auto a = dyn_cast<flash::ApplyModsOp>(op)) {
      ScoreTile st = scores.lookup(a.getScores());
      st.chain.push_back(op);
      scores[a] = st;
    } else if (auto m = dyn_cast<flash::ScoresMapOp>(op)) {
      if (m.getScores().size() != 1)
        return op->emitOpError("the CPU forward form maps one tile at a time");
      ScoreTile st = scores.lookup(m.getScores()[0]);
      st.chain.push_back(op);
      scores[m] = st;
    } else if (auto d = dyn_cast<flash::DropoutOp>(op)) {
      ScoreTile st = scores.lookup(d.getScores());
      st.chain.push_back(op);
      scores[d] = st;
    }
  }
  LogicalResult result = success();
  loop0(cIdx(0), it.rows, 1, [&](Value r) {
    RowScope rs;
    rs.r = r;
    auto [hr, ir] = rowCoords(e, it, r);
    rs.qpos = arith::IndexCastOp::create(b_, i32_, add(it.qpos0, ir));
    rs.hI32 = headIndex(hr);
    rs.bI32 = it.bI32;
    Block &scoreBlock = v_.getScoreBlock(), &maskBlock = v_.getMaskBlock();
    rs.scoreRow.map(scoreBlock.getArgument(1), it.bI32);
    rs.scoreRow.map(scoreBlock.getArgument(2), rs.hI32);
    rs.scoreRow.map(scoreBlock.getArgument(3), rs.qpos);
    rs.maskRow.map(maskBlock.getArgument(0), it.bI32);
    rs.maskRow.map(maskBlock.getArgument(1), rs.hI32);
    rs.maskRow.map(maskBlock.getArgument(2), rs.qpos);
    for (Operation *op : run) {
      if (auto d = dyn_cast<flash::DropoutOp>(op)) {
        // Read by a product past the run: applied to the row in place now.
        materializeRow(rs, d, "none");
        continue;
      }
      if (isa<flash::ApplyModsOp, flash::ScoresMapOp>(op))
        continue; // pending until a reduction or a product reads them
      if (auto m = dyn_cast<flash::RowMaxOp>(op)) {
        rs.scalar[m] = materializeRow(rs, m.getScores(), "max");
      } else if (auto s = dyn_cast<flash::RowSumOp>(op)) {
        rs.scalar[s] = materializeRow(rs, s.getScores(), "add");
      } else if (auto m = dyn_cast<flash::RowsMapOp>(op)) {
        SmallVector<Value> args;
        for (Value in : m.getInputs())
          args.push_back(rowValue(rs, in));
        rs.scalar[m] = emitMapBody(m.getBody().front(), args);
      } else if (auto s = dyn_cast<flash::RescaleSumOp>(op)) {
        rs.scalar[s] = arith::AddFOp::create(
            b_,
            arith::MulFOp::create(b_, rowValue(rs, s.getSum()),
                                  rowValue(rs, s.getScale())),
            rowValue(rs, s.getAdd()));
      } else if (auto c = dyn_cast<flash::CompleteOp>(op)) {
        rs.scalar[c] = rowValue(rs, c.getSums()); // full sums on the CPU
      } else if (auto st = dyn_cast<flash::StoreOutputOp>(op)) {
        // O = acc * inv_l; LSE where asked for.
        Value invL = rowValue(rs, st.getInvL()), lse = rowValue(rs, st.getLse());
        Value AccBuf = buffers.lookup(st.getAcc());
        Value oRow = add(add(mul(it.oB, e.os[0]), mul(hr, e.os[1])),
                         mul(ir, e.os[2]));
        loop0(cIdx(0), cIdx(DV), 1, [&](Value d) {
          Value x = arith::MulFOp::create(
              b_, load(AccBuf, add(mul(r, cIdx(DV)), d)), invL);
          store(fromF32(x), e.o, add(oRow, mul(d, e.os[3])));
        });
        ifThen(e.hasLse, [&] {
          Value at = add(add(mul(it.oB, e.ls[0]), mul(hr, e.ls[1])),
                         mul(ir, e.ls[2]));
          store(lse, e.lse, at);
        });
      } else {
        result = op->emitOpError("is not row-wise");
      }
    }
    for (Value v : escaping)
      store(rs.scalar.lookup(v), buffers.lookup(v), r);
  });
  return result;
}

} // namespace
} // namespace attnc::codegen

namespace attnc {
namespace {

/// The host CPU's forward form: every request, its tiles as asked.
class CpuForm final : public KernelForm {
public:
  StringRef name() const override { return "cpu"; }
  Direction direction() const override { return Direction::Forward; }
  bool runsOn(StringRef target) const override { return target == "cpu"; }
  std::optional<rt::KernelSpec> configure(const rt::KernelSpec &request,
                                          StringRef) const override {
    return request;
  }
  bool accepts(const rt::KernelSpec &, StringRef) const override {
    return true;
  }
  rt::TileConfig tileConfig(const rt::KernelSpec &s) const override {
    return rt::TileConfig{s.blockM, s.blockN, 0, 1};
  }
  std::vector<KernelEntry> entries(const rt::KernelSpec &,
                                   attn::VariantOp) const override {
    return {KernelEntry{"", {}, {}}};
  }
  LogicalResult lower(flash::KernelOp kernel, const MaskAnalysis &mask,
                      Operation *) const override {
    FlashConfig config = configOf(kernel);
    attn::VariantOp v = variantOf(kernel);
    if (kernel.getKind() != "forward")
      return kernel.emitOpError("the CPU forward form lowers forward kernels");
    if (config.spec.blockN % config.vectorWidth)
      return v.emitError("invalid kernel configuration: blockN must be a "
                         "multiple of the vector width");
    kernel->getContext()
        ->loadDialect<func::FuncDialect, memref::MemRefDialect,
                      scf::SCFDialect, vector::VectorDialect,
                      arith::ArithDialect, math::MathDialect>();
    ModuleOp parent = kernel->getParentOfType<ModuleOp>();
    codegen::CpuKernel lowering(parent, v, mask, config);
    if (failed(lowering.lower(kernel)))
      return failure();
    kernel.erase();
    return success();
  }
};

} // namespace

const KernelForm &cpuForm() {
  static const CpuForm form;
  return form;
}

} // namespace attnc
