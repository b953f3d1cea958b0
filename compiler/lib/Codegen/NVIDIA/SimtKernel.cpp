//===- SimtKernel.cpp - The SIMT GPU form -----------------------------------===//
//
// One block per work item, one thread per query row; K^T and V tiles in
// f32 shared memory. Used for f32 and head dims the tensor-core form does
// not take.
//
//===----------------------------------------------------------------------===//
#include "attnc/Codegen/KernelForm.h"
#include "attnc/Codegen/TileConfigTable.h"
#include "ProgramBuilder.h"

#include <algorithm>

using namespace mlir;
namespace abi = attnc::rt::abi;

namespace attnc::codegen {
namespace {

/// The SIMT form's lowering of a forward flash.kernel: one block per work
/// item, one thread per query row. K^T and V tiles are staged in f32
/// shared memory; a thread's per-row values are scalars (in a one-element
/// buffer across tiles) and its row of scores a local buffer, written as
/// the reductions read it: the product, the modifiers and the maps of one
/// key in one pass. Threads past the item's rows stage tiles and reach the
/// barriers but compute nothing.
class SimtKernel : public ProgramBuilder {
public:
  SimtKernel(ModuleOp m, attn::VariantOp v, const MaskAnalysis &mask,
             const FlashConfig &cfg)
      : ProgramBuilder(m, v, mask, cfg) {
    fuseScoreProducts_ = true;
    byteAddressedGathers_ = true;
  }
  LogicalResult lower(flash::KernelOp kernel, gpu::GPUModuleOp module);

private:
  /// A row of scores: the ops that make it (the product first, then
  /// element-wise ops), and how many of them its buffer holds.
  struct ScoreRow {
    SmallVector<Operation *> chain;
  };
  LogicalResult lowerOps(Block::iterator from, Block::iterator to);
  LogicalResult lowerOp(Operation &op, Block::iterator &next,
                        Block::iterator end);
  Value reduceRow(Value s, StringRef kind);
  Value buffer1(Value init);

  Entry e;
  Item it;
  Tile tile;
  Value Kt, Vs, Qp, Sp, tid, live, qpos, hI32;
  IRMapping scoreRow, maskRow;
  SmallVector<Operation *> applied; // what Sp holds
  DenseMap<Value, ScoreRow> scores;
  DenseMap<Value, Value> scalar;    // rows and partials values
  DenseMap<Value, Value> accBuf;    // acc values -> the thread's buffer
  DenseMap<Value, Value> accScale;  // acc from flash.scale_acc -> scale
  Operation *allocAnchor = nullptr;
};

Value SimtKernel::buffer1(Value init) {
  Value buf;
  {
    OpBuilder::InsertionGuard g(b_);
    b_.setInsertionPoint(allocAnchor);
    buf = alloca(1);
  }
  store(init, buf, cIdx(0));
  return buf;
}

LogicalResult SimtKernel::lower(flash::KernelOp kernel,
                                gpu::GPUModuleOp module) {
  SmallVector<Type> args = kernelArgs();
  OpBuilder::InsertionGuard guard(b_);
  b_.setInsertionPointToEnd(module.getBody());
  auto fn = gpu::GPUFuncOp::create(b_, kernel.getSymName(),
                                   b_.getFunctionType(args, {}));
  fn->setAttr(gpu::GPUDialect::getKernelFuncAttrName(), b_.getUnitAttr());
  auto shared = gpu::AddressSpaceAttr::get(ctx_, gpu::AddressSpace::Workgroup);
  Kt = fn.addWorkgroupAttribution(
      MemRefType::get({D * BN}, f32_, MemRefLayoutAttrInterface(), shared),
      fn.getLoc());
  Vs = fn.addWorkgroupAttribution(
      MemRefType::get({BN * DV}, f32_, MemRefLayoutAttrInterface(), shared),
      fn.getLoc());
  b_.setInsertionPointToStart(&fn.getBody().front());
  // Allocations go before this marker, ahead of everything else.
  allocAnchor = cIdx(0).getDefiningOp();
  e = loadEntry(fn.getArguments());
  Value item = add(toIdx(fn.getArgument(fn.getNumArguments() - 1)),
                   gpu::BlockIdOp::create(b_, gpu::Dimension::x));
  tid = gpu::ThreadIdOp::create(b_, gpu::Dimension::x);
  it = decodeItem(e, item);
  {
    OpBuilder::InsertionGuard g(b_);
    b_.setInsertionPoint(allocAnchor);
    Qp = alloca(D);
    Sp = alloca(BN);
  }
  live = arith::CmpIOp::create(b_, arith::CmpIPredicate::slt, tid, it.rows);
  // Rows past the end read the last row (their results are not stored).
  auto [hr, ir] = rowCoords(e, it, minI(tid, sub(it.rows, cIdx(1))));
  qpos = arith::IndexCastOp::create(b_, i32_, add(it.qpos0, ir));
  hI32 = headIndex(hr);
  Block &sb = v_.getScoreBlock(), &mb = v_.getMaskBlock();
  scoreRow = hoistUniform(sb, {0, 4},
                          {e.zeroF, it.bI32, hI32, qpos, cI32(0)});
  maskRow = hoistUniform(mb, {3}, {it.bI32, hI32, qpos, cI32(0)});
  Block &body = kernel.getBlock();
  if (failed(lowerOps(body.begin(), body.end())))
    return failure();
  gpu::ReturnOp::create(b_);
  return success();
}

LogicalResult SimtKernel::lowerOps(Block::iterator from, Block::iterator to) {
  for (Block::iterator i = from; i != to;) {
    Operation &op = *i++;
    if (failed(lowerOp(op, i, to)))
      return failure();
  }
  return success();
}

Value SimtKernel::reduceRow(Value s, StringRef kind) {
  ScoreRow &row = scores[s];
  assert(applied.size() <= row.chain.size() &&
         std::equal(applied.begin(), applied.end(), row.chain.begin()) &&
         "a row rewritten by another chain");
  SmallVector<Operation *> todo(row.chain.begin() + applied.size(),
                                row.chain.end());
  applied = row.chain;
  Value c0 = cIdx(0);
  Value ident = kind == "max" ? e.ninf : e.zeroF;
  auto rowLoop = [&](bool withMask) {
    auto l = loop(c0, cIdx(BN), 1, {ident}, [&](Value c, ValueRange acc) {
      Value x = load(Sp, c);
      Value kvpos = keyPos(tile.pos0, c);
      for (Operation *op : todo) {
        if (isa<flash::ProductOp>(op)) {
          auto dot = loop(c0, cIdx(D), 1, {e.zeroF}, [&](Value d, ValueRange a) {
            Value prod = arith::MulFOp::create(
                b_, load(Qp, d), load(Kt, add(mul(d, cIdx(BN)), c)));
            return SmallVector<Value>{arith::AddFOp::create(b_, a[0], prod)};
          });
          x = dot.getResult(0);
        } else if (isa<flash::ApplyModsOp>(op)) {
          x = scaledScore(x, e.scale, it.bI32, hI32, qpos, kvpos, &scoreRow);
          if (withMask) {
            Value in =
                arith::CmpIOp::create(b_, arith::CmpIPredicate::slt, c, tile.cols);
            x = select(keptByMask(in, it.bI32, hI32, qpos, kvpos, &maskRow), x,
                       e.ninf);
          }
        } else if (isa<flash::DropoutOp>(op)) {
          x = arith::MulFOp::create(
              b_, x, dropoutFactor(e, it.bI32, hI32, qpos, kvpos));
        } else {
          auto m = cast<flash::ScoresMapOp>(op);
          SmallVector<Value> margs = {x};
          for (Value r : m.getRows())
            margs.push_back(scalar.lookup(r));
          x = emitMapBody(m.getBody().front(), margs);
        }
      }
      if (!todo.empty())
        store(x, Sp, c);
      if (kind == "max")
        return SmallVector<Value>{arith::MaximumFOp::create(b_, acc[0], x)};
      if (kind == "add")
        return SmallVector<Value>{arith::AddFOp::create(b_, acc[0], x)};
      return SmallVector<Value>{acc[0]};
    });
    return l.getResult(0);
  };
  bool mods = llvm::any_of(todo, [](Operation *o) {
    return isa<flash::ApplyModsOp>(o);
  });
  if (!mods)
    return rowLoop(false);
  // Full tiles without a tail never evaluate mask_mod.
  auto branch = scf::IfOp::create(b_, TypeRange{f32_}, tile.skipMask,
                                  /*withElse=*/true);
  OpBuilder::InsertionGuard g(b_);
  b_.setInsertionPointToStart(branch.thenBlock());
  scf::YieldOp::create(b_, rowLoop(false));
  b_.setInsertionPointToStart(branch.elseBlock());
  scf::YieldOp::create(b_, rowLoop(true));
  return branch.getResult(0);
}

LogicalResult SimtKernel::lowerOp(Operation &op, Block::iterator &next,
                                  Block::iterator end) {
  Value c0 = cIdx(0);
  if (isa<flash::WorkItemOp>(op))
    return success(); // one block per item: decoded at the entry
  if (isa<flash::LoadQueryOp>(op)) {
    auto [hr, ir] = rowCoords(e, it, minI(tid, sub(it.rows, cIdx(1))));
    Value qRow = add(add(mul(it.b, e.qs[0]), mul(hr, e.qs[1])),
                     mul(ir, e.qs[2]));
    loop0(c0, cIdx(D), 1, [&](Value d) {
      Value x = toF32(load(e.q, add(qRow, mul(d, e.qs[3]))));
      store(select(live, x, e.zeroF), Qp, d);
    });
    return success();
  }
  if (auto z = dyn_cast<flash::ZeroAccOp>(op)) {
    Value acc;
    {
      OpBuilder::InsertionGuard g(b_);
      b_.setInsertionPoint(allocAnchor);
      acc = alloca(DV);
    }
    loop0(c0, cIdx(DV), 1, [&](Value d) { store(e.zeroF, acc, d); });
    accBuf[z] = acc;
    return success();
  }
  if (auto f = dyn_cast<flash::FillRowsOp>(op)) {
    scalar[f] = cF32(f.getValue().convertToFloat());
    return success();
  }
  if (auto z = dyn_cast<flash::ZeroPartialsOp>(op)) {
    scalar[z] = e.zeroF;
    return success();
  }
  if (auto loopOp = dyn_cast<flash::ForTilesOp>(op)) {
    // Per-row iteration values cross tiles in one-element buffers;
    // accumulators are updated in place.
    Block &body = loopOp.getBody().front();
    SmallVector<Value> bufs;
    for (Value init : loopOp.getInits())
      bufs.push_back(isa<flash::AccType>(init.getType())
                         ? accBuf.lookup(init)
                         : buffer1(scalar.lookup(init)));
    auto y = cast<flash::YieldOp>(body.getTerminator());
    LogicalResult result = success();
    // The class is the same for every thread of the block, so the barriers
    // inside are reached by all or none.
    forEachVisitedTile(it, [&](const Tile &t) {
      tile = t;
      for (auto [arg, buf] :
           llvm::zip(body.getArguments().drop_front(), bufs)) {
        if (isa<flash::AccType>(arg.getType()))
          accBuf[arg] = buf;
      }
      // Staging first (every thread), then the live rows' work.
      Block::iterator i = body.begin();
      for (; i != Block::iterator(y); ++i)
        if (isa<flash::LoadKeyValueOp>(*i)) {
          Block::iterator n = std::next(i);
          if (failed(lowerOp(*i, n, Block::iterator(y))))
            result = failure();
          ++i;
          break;
        }
      ifThen(live, [&] {
        for (auto [arg, buf] :
             llvm::zip(body.getArguments().drop_front(), bufs))
          if (!isa<flash::AccType>(arg.getType()))
            scalar[arg] = load(buf, c0);
        if (failed(lowerOps(i, Block::iterator(y))))
          result = failure();
        for (auto [v, buf] : llvm::zip(y.getValues(), bufs)) {
          if (isa<flash::AccType>(v.getType())) {
            if (accBuf.lookup(v) != buf)
              result = op.emitOpError("an accumulator not updated in place");
          } else {
            store(scalar.lookup(v), buf, c0);
          }
        }
      });
      // Everyone is done with this tile before it is overwritten.
      gpu::BarrierOp::create(b_);
    });
    for (auto [res, buf] : llvm::zip(loopOp.getResults(), bufs)) {
      if (isa<flash::AccType>(res.getType()))
        accBuf[res] = buf;
      else
        scalar[res] = load(buf, c0);
    }
    return result;
  }
  if (isa<flash::LoadKeyValueOp>(op)) {
    // The block's threads stage K^T and V (f32) in shared memory.
    // Contiguous and paged K/V each get their own copy of the loops.
    Value paged = arith::CmpIOp::create(b_, arith::CmpIPredicate::ne,
                                        ipAt(abi::kPageSize), c0);
    auto stage = [&](bool pagedRows) {
      auto rowOffset = [&](Value row, Value base, Value s2, int64_t slot) {
        return pagedRows ? pagedRowOffset(it, row, base, s2, slot)
                         : add(base, mul(row, s2));
      };
      for (auto [dst, src, width, base, st, slot, transposed] :
           {std::tuple{Kt, e.k, D, it.kBase, &e.ks, abi::kKStride, true},
            std::tuple{Vs, e.v, DV, it.vBase, &e.vs, abi::kVStride, false}}) {
        stageRows(
            dst, BN, width, tile.cols, tid, BM,
            [&](Value c, Value d) {
              Value row = add(tile.kv0, c);
              return load(src, add(rowOffset(row, base, (*st)[2], slot),
                                   mul(d, (*st)[3])));
            },
            [&](Value c, Value d) {
              return transposed ? add(mul(d, cIdx(BN)), c)
                                : add(mul(c, cIdx(DV)), d);
            });
      }
    };
    ifThenElse(paged, [&] { stage(true); }, [&] { stage(false); });
    gpu::BarrierOp::create(b_);
    return success();
  }
  if (auto p = dyn_cast<flash::ProductOp>(op)) {
    scores[p] = ScoreRow{{&op}};
    applied.clear();
    return success();
  }
  if (auto a = dyn_cast<flash::ApplyModsOp>(op)) {
    ScoreRow row = scores.lookup(a.getScores());
    row.chain.push_back(&op);
    scores[a] = row;
    return success();
  }
  if (auto d = dyn_cast<flash::DropoutOp>(op)) {
    ScoreRow row = scores.lookup(d.getScores());
    row.chain.push_back(&op);
    scores[d] = row;
    return success();
  }
  if (auto m = dyn_cast<flash::ScoresMapOp>(op)) {
    if (m.getScores().size() != 1)
      return op.emitOpError("the SIMT forward form maps one tile at a time");
    ScoreRow row = scores.lookup(m.getScores()[0]);
    row.chain.push_back(&op);
    scores[m] = row;
    return success();
  }
  if (auto m = dyn_cast<flash::RowMaxOp>(op)) {
    scalar[m] = reduceRow(m.getScores(), "max");
    return success();
  }
  if (auto s = dyn_cast<flash::RowSumOp>(op)) {
    scalar[s] = reduceRow(s.getScores(), "add");
    return success();
  }
  if (auto m = dyn_cast<flash::RowsMapOp>(op)) {
    SmallVector<Value> args;
    for (Value in : m.getInputs())
      args.push_back(scalar.lookup(in));
    scalar[m] = emitMapBody(m.getBody().front(), args);
    return success();
  }
  if (auto s = dyn_cast<flash::RescaleSumOp>(op)) {
    scalar[s] = arith::AddFOp::create(
        b_,
        arith::MulFOp::create(b_, scalar.lookup(s.getSum()),
                              scalar.lookup(s.getScale())),
        scalar.lookup(s.getAdd()));
    return success();
  }
  if (auto c = dyn_cast<flash::CompleteOp>(op)) {
    scalar[c] = scalar.lookup(c.getSums()); // a thread holds its whole row
    return success();
  }
  if (auto s = dyn_cast<flash::ScaleAccOp>(op)) {
    accBuf[s] = accBuf.lookup(s.getAcc());
    accScale[s] = scalar.lookup(s.getScale());
    return success();
  }
  if (auto a = dyn_cast<flash::AccumulateOp>(op)) {
    if (a.getKind() != "pv")
      return op.emitOpError("the SIMT forward form lowers pv only");
    // Ops after the row sums (dropout) are applied to the row now.
    SmallVector<Operation *> chain = scores.lookup(a.getScores()).chain;
    if (!chain.empty() && applied != chain)
      (void)reduceRow(a.getScores(), "none");
    Value acc = accBuf.lookup(a.getAcc());
    Value alpha = accScale.lookup(a.getAcc());
    accBuf[a] = acc;
    loop0(c0, cIdx(DV), 1, [&](Value d) {
      Value init = load(acc, d);
      if (alpha)
        init = arith::MulFOp::create(b_, init, alpha);
      auto pv = loop(c0, cIdx(BN), 1, {init}, [&](Value c, ValueRange x) {
        Value prod = arith::MulFOp::create(b_, load(Sp, c),
                                           load(Vs, add(mul(c, cIdx(DV)), d)));
        return SmallVector<Value>{arith::AddFOp::create(b_, x[0], prod)};
      });
      store(pv.getResult(0), acc, d);
    });
    return success();
  }
  if (auto st = dyn_cast<flash::StoreOutputOp>(op)) {
    Value acc = accBuf.lookup(st.getAcc());
    Value invL = scalar.lookup(st.getInvL()), lse = scalar.lookup(st.getLse());
    ifThen(live, [&] {
      auto [h, i] = rowCoords(e, it, tid);
      Value oRow = add(add(mul(it.oB, e.os[0]), mul(h, e.os[1])),
                       mul(i, e.os[2]));
      loop0(c0, cIdx(DV), 1, [&](Value d) {
        Value x = arith::MulFOp::create(b_, load(acc, d), invL);
        store(fromF32(x), e.o, add(oRow, mul(d, e.os[3])));
      });
      ifThen(e.hasLse, [&] {
        Value at = add(add(mul(it.oB, e.ls[0]), mul(h, e.ls[1])),
                       mul(i, e.ls[2]));
        store(lse, e.lse, at);
      });
    });
    return success();
  }
  (void)next;
  (void)end;
  return op.emitOpError("is not lowered by the SIMT forward form");
}

} // namespace
} // namespace attnc::codegen

namespace attnc {
namespace {

constexpr int64_t kStaticShared = 48 * 1024;

/// The SIMT form: every request on a GPU; the KV tile shrinks until the K^T
/// and V tiles (f32) fit static shared memory.
class SimtForm final : public KernelForm {
public:
  StringRef name() const override { return "simt"; }
  Direction direction() const override { return Direction::Forward; }
  bool runsOn(StringRef target) const override {
    return isGpuTarget(target.str());
  }
  std::optional<rt::KernelSpec> configure(const rt::KernelSpec &request,
                                          StringRef) const override {
    rt::KernelSpec s = request;
    s.warps = 0;
    int64_t perKey = (s.headDim + s.vHeadDim) * 4;
    s.blockN = std::max<int64_t>(
        8, std::min<int64_t>(s.blockN, (kStaticShared / perKey) / 8 * 8));
    return s;
  }
  bool accepts(const rt::KernelSpec &s, StringRef) const override {
    return (s.headDim + s.vHeadDim) * 4 * s.blockN <= kStaticShared;
  }
  rt::TileConfig tileConfig(const rt::KernelSpec &s) const override {
    return rt::TileConfig{s.blockM, s.blockN, (s.blockM + 31) / 32, 1};
  }
  std::vector<KernelEntry> entries(const rt::KernelSpec &s,
                                   attn::VariantOp) const override {
    LaunchFacts l;
    l.threads = s.blockM; // a thread per query row
    l.staticSharedBytes = (s.headDim + s.vHeadDim) * s.blockN * 4;
    return {KernelEntry{"", l, {}}};
  }
  LogicalResult lower(flash::KernelOp kernel, const MaskAnalysis &mask,
                      Operation *container) const override {
    if (kernel.getKind() != "forward")
      return kernel.emitOpError("the SIMT forward form lowers forward kernels");
    kernel->getContext()
        ->loadDialect<gpu::GPUDialect, memref::MemRefDialect, scf::SCFDialect,
                      arith::ArithDialect, math::MathDialect,
                      vector::VectorDialect>();
    codegen::SimtKernel lowering(kernel->getParentOfType<ModuleOp>(),
                                 variantOf(kernel), mask, configOf(kernel));
    if (failed(lowering.lower(kernel, cast<gpu::GPUModuleOp>(container))))
      return failure();
    kernel.erase();
    return success();
  }
};

} // namespace

const KernelForm &simtForm() {
  static const SimtForm form;
  return form;
}

} // namespace attnc
