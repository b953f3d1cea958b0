//===- MmaSyncKernel.cpp - The tensor-core forward: mma.sync and wgmma ----===//
//
// The builder of the tensor-core forward kernels: the mma.sync form
// (MmaSyncForm.cpp) and, with TensorCoreLayout::wgmma, the sm_90a form
// (WgmmaForm.cpp); their threads and shared memory are TensorCoreLayout.h's: the same loop, copies, softmax and epilogue on the same
// accumulator fragments (a wgmma m64nNk16 accumulator is, per warp, the
// mma.sync m16n8 fragments of its N / 8 n-tiles), with S = QK^T by wgmma
// from shared-memory descriptors and O += PV by wgmma with P from
// registers, operands in 128-byte swizzled atoms (Wgmma.h), and K and V
// tiles brought in by a producer warpgroup (TensorCoreLayout::producerWarps)
// behind per-stage `full`/`empty` mbarriers: TMA loads (Tma.h) where the
// call's tensor maps are usable (KernelABI.h), else cp.async.
//
// f16/bf16 on sm_80+: a CTA of `warps` warps takes block_m query rows, each
// warp 16 x m-tiles of them. Q, K and V go through dynamic shared memory
// with 16-byte cp.async into XOR-swizzled rows; operands come from ldmatrix
// (.trans for V); S = QK^T and O += PV run on mma.sync m16n8k16 with f32
// accumulators, each K/V fragment feeding every m-tile of the warp. The
// loop walks only the visited KV tiles (empty ones cost a classification,
// no barrier): per tile, wait for its copy, one barrier, prefetch the next
// visited tile into the other stage, compute. Softmax runs on the
// accumulator fragments in the scores' own units: ex2.approx.ftz of
// (score - row max) times log2(e) (or |scale| log2(e)).
//
// The builder's class is TensorCoreKernel.h's; the algorithm's ops on a
// tile's registers TensorCoreOps.cpp's; the visited-tile search
// TensorCoreTileSearch.cpp's; the wgmma form's producer WgmmaProducer.cpp's
// and its products and overlapped loop WgmmaTileLoop.cpp's.
//
//===----------------------------------------------------------------------===//
#include "TensorCoreKernel.h"

#include <algorithm>

using namespace mlir;

namespace attnc {

namespace codegen {


TensorCoreKernel::SharedPlace
TensorCoreKernel::sharedPlace(Value base, int64_t ld, bool swizzle,
                              int64_t chunks, Value row, Value chunk,
                              int64_t rowC, int64_t chunkC, int64_t atom) {
  if (atom) {
    // A 128-byte swizzled atom layout (wgmma): chunk c of row r is in atom
    // c / 8, at row r, chunk (c % 8) xor (r % 8). Copies only: no constant
    // chunk part.
    Value c = arith::XOrIOp::create(b_, remu(chunk, 8), remu(row, 8));
    Value at = add(add(mul(divu(chunk, 8), cIdx(atom)), mul(row, cIdx(ld))),
                   mul(c, cIdx(8)));
    (void)chunks;
    (void)chunkC;
    return {add(base, at), rowC * ld};
  }
  Value c = chunk;
  int64_t offset = rowC * ld + chunkC * 8;
  if (swizzle) {
    // 8 consecutive rows at one chunk land in 8 different 16-byte bank
    // groups: xor the chunk with the row (mod 8), or for rows of 2 and 4
    // chunks with the row's position among the 8 / chunks rows sharing a
    // 128-byte line. The key is below 8 (below `chunks`), so it touches
    // only the chunk's low 3 bits: (8a + b) ^ key = 8a + (b ^ key).
    Value key = chunks % 8 == 0 ? remu(row, 8) : remu(divu(row, 8 / chunks), chunks);
    int64_t lo = chunks % 8 == 0 ? chunkC % 8 : chunkC;
    c = arith::XOrIOp::create(b_, lo ? add(chunk, cIdx(lo)) : chunk, key);
    offset = rowC * ld + (chunkC - lo) * 8;
  }
  return {add(base, add(mul(row, cIdx(ld)), mul(c, cIdx(8)))), offset};
}

Value TensorCoreKernel::sharedIndex(Value base, int64_t ld, bool swizzle,
                                    int64_t chunks, Value row, Value chunk,
                                    int64_t rowC, int64_t chunkC, int64_t atom) {
  auto [at, offset] =
      sharedPlace(base, ld, swizzle, chunks, row, chunk, rowC, chunkC, atom);
  return offset ? add(at, cIdx(offset)) : at;
}

Value TensorCoreKernel::byteAddress(Value at) {
  Value off = u32OfIdx(mul(at, cIdx(elem_.getIntOrFloatBitWidth() / 8)));
  return arith::AddIOp::create(b_, smemAddr, off);
}

std::pair<Value, Value> TensorCoreKernel::sharedAt(SharedPlace p) {
  if (!p.offset)
    return {smem, p.at};
  auto wg = gpu::AddressSpaceAttr::get(ctx_, gpu::AddressSpace::Workgroup);
  Value view = memref::ViewOp::create(
      b_, MemRefType::get({L.totalElems}, elem_, MemRefLayoutAttrInterface(), wg),
      smemBytes, mul(p.at, cIdx(elem_.getIntOrFloatBitWidth() / 8)),
      ValueRange{});
  return {view, cIdx(p.offset)};
}

/// exp2 on the special-function unit, subnormals flushed (they are below
/// what the f32 accumulation of P·V can see).
Value TensorCoreKernel::ex2(Value x) {
  return LLVM::CallIntrinsicOp::create(
             b_, f32_, b_.getStringAttr("llvm.nvvm.ex2.approx.ftz.f32"),
             ValueRange{x})
      .getResult(0);
}

void TensorCoreKernel::computeRows() {
  Value c1 = cIdx(1);
  rows.clear();
  scoreRow.clear();
  maskRow.clear();
  for (int64_t mt = 0; mt < MT; ++mt)
    for (int64_t k = 0; k < 2; ++k) {
      Value r = add(add(mul(warp, cIdx(16 * MT)), g), cIdx(16 * mt + 8 * k));
      Row R;
      // In i32 (both are below block_m): what stays live to the epilogue,
      // which alone reads it, is two 32-bit values, not two 64-bit ones.
      R.live = cmp(arith::CmpIPredicate::slt, arith::IndexCastOp::create(b_, i32_, r),
                   arith::IndexCastOp::create(b_, i32_, it.rows));
      // Rows past the end compute on the last row; they are not stored.
      auto [h, i] = rowCoords(e, it, minI(r, sub(it.rows, c1)));
      R.hI32 = headIndex(h);
      R.iI32 = arith::IndexCastOp::create(b_, i32_, i);
      R.qpos = arith::IndexCastOp::create(b_, i32_, add(it.qpos0, i));
      rows.push_back(R);
      // What the modifiers compute from (b, h, q) alone, once per row.
      Value kv0 = cI32(0);
      scoreRow.push_back(hoistUniform(v_.getScoreBlock(), {0, 4},
                                      {e.zeroF, it.bI32, R.hI32, R.qpos, kv0}));
      maskRow.push_back(hoistUniform(v_.getMaskBlock(), {3},
                                     {it.bI32, R.hI32, R.qpos, kv0}));
    }
  // score_mod's separable logarithms: whether this thread's rows' x are
  // in their range (modifiedScores votes with the key columns' y).
  if (!separable_)
    separable_ = separableLogs(v_.getScoreBlock());
  rowLogsValid_ = {};
  if (separable_->empty())
    return;
  Value valid = arith::ConstantOp::create(b_, b_.getBoolAttr(true));
  for (IRMapping &row : scoreRow)
    for (const SeparableLog &l : *separable_)
      valid = andI(valid, inLogRange(b_, b_.getLoc(), materialize(l.row, row)));
  rowLogsValid_ = valid;
}

/// The item's Q rows into shared memory (zero past the last row).
void TensorCoreKernel::loadQ() {
  const int64_t chunks = D / 8;
  Value c0 = cIdx(0), c1 = cIdx(1), qOff = cIdx(L.qOffset);
  auto rowOf = [&](Value row) {
    auto [h, i] = rowCoords(e, it, minI(row, sub(it.rows, c1)));
    return add(add(mul(it.b, e.qs[0]), mul(h, e.qs[1])), mul(i, e.qs[2]));
  };
  ifThenElse(
      fastQ,
      [&] {
        loop0(tid, cIdx(BM * chunks), cIdx(TH), [&](Value c) {
          Value row = divu(c, chunks), ch = remu(c, chunks);
          Value live = cmp(arith::CmpIPredicate::slt, row, it.rows);
          nvgpu::DeviceAsyncCopyOp::create(
              b_, nvgpu::DeviceAsyncTokenType::get(ctx_), smem,
              ValueRange{sharedIndex(qOff, L.ldQ, L.swizzleQ, chunks, row, ch,
                                     0, 0, L.atomQ)},
              e.q, ValueRange{add(rowOf(row), mul(ch, cIdx(8)))},
              b_.getIndexAttr(8), select(live, cIdx(8), c0), b_.getUnitAttr());
        });
      },
      [&] {
        loop0(tid, cIdx(BM * D), cIdx(TH), [&](Value x) {
          Value row = divu(x, D), d = remu(x, D);
          Value live = cmp(arith::CmpIPredicate::slt, row, it.rows);
          Value v = load(e.q, add(rowOf(row), mul(d, e.qs[3])));
          Value at = add(sharedIndex(qOff, L.ldQ, L.swizzleQ, chunks, row,
                                     divu(d, 8), 0, 0, L.atomQ),
                         remu(d, 8));
          store(select(live, v, zeroE), smem, at);
        });
      });
}

/// Q's A fragment for m-tile mt and k-step ks: registers (row g, cols
/// 16 ks + 2 tig), (row g + 8, same), (row g, + 8), (row g + 8, + 8).
TensorCoreKernel::Frag TensorCoreKernel::qFragment(int64_t mt, int64_t ks) {
  Value row = add(mul(warp, cIdx(16 * MT)), add(mul(remu(mat, 2), cIdx(8)), r8));
  return ldmatrix(sharedIndex(cIdx(L.qOffset), L.ldQ, L.swizzleQ, D / 8, row,
                              divu(mat, 2), 16 * mt, 2 * ks),
                  /*trans=*/false);
}

void TensorCoreKernel::signSharedQ() {
  Value negative = arith::CmpFOp::create(b_, arith::CmpFPredicate::OLT, e.scale,
                                         e.zeroF);
  ifThen(negative, [&] {
    Type i16 = b_.getI16Type();
    Value sign = arith::ConstantOp::create(b_, b_.getI16IntegerAttr(-32768));
    // A thread per element, in Q's atom layout (rows past the end are
    // zero and stay zero up to the sign).
    loop0(tid, cIdx(BM * D), cIdx(TH), [&](Value x) {
      Value row = divu(x, D), d = remu(x, D);
      Value at = add(sharedIndex(cIdx(L.qOffset), L.ldQ, L.swizzleQ, D / 8, row,
                                 divu(d, 8), 0, 0, L.atomQ),
                     remu(d, 8));
      Value bits = arith::BitcastOp::create(b_, i16, load(smem, at));
      store(arith::BitcastOp::create(b_, elem_,
                                     arith::XOrIOp::create(b_, bits, sign)),
            smem, at);
    });
  });
}

void TensorCoreKernel::signQ() {
  Value negative = arith::CmpFOp::create(b_, arith::CmpFPredicate::OLT, e.scale,
                                         e.zeroF);
  Value mask = select(negative, cI32(int32_t(0x80008000u)), cI32(0));
  for (auto &row : qf)
    for (Frag &f : row)
      for (Value &x : f) {
        // bf16 pairs are i32 already; f16 pairs are vector<2xf16>.
        const bool packed = x.getType() == i32_;
        Value bits = packed ? x : LLVM::BitcastOp::create(b_, i32_, x);
        bits = arith::XOrIOp::create(b_, bits, mask);
        x = packed ? bits : LLVM::BitcastOp::create(b_, x.getType(), bits);
      }
}

/// Tile j's K and V rows into the stage at element `base`; rows past the
/// sequence are zero (cp.async zero-fill reads nothing out of bounds).
void TensorCoreKernel::planCopies() {
  for (auto [plan, n, ld, swizzle, st, atom] :
       {std::tuple{&planK, D, L.ldK, L.swizzleK, &e.ks, L.atomK},
        std::tuple{&planV, DV, L.ldV, L.swizzleV, &e.vs, L.atomV}}) {
    const int64_t chunks = n / 8, total = BN * chunks;
    plan->count = (total + TH - 1) / TH;
    plan->ld = ld;
    const bool strided = TH % chunks == 0 && (TH / chunks) % 8 == 0;
    plan->rowStep = strided ? TH / chunks : 0;
    if (strided)
      plan->stepGlobal = mul((*st)[2], cIdx(plan->rowStep));
    plan->tileStride = mul((*st)[2], cIdx(BN));
    for (int64_t i = 0; i < plan->count; ++i) {
      Value c = add(tid, cIdx(i * TH));
      if (!strided || i == 0) {
        Value row = divu(c, chunks), ch = remu(c, chunks);
        plan->row.push_back(row);
        plan->shared.push_back(
            sharedIndex(cIdx(0), ld, swizzle, chunks, row, ch, 0, 0, atom));
        plan->global.push_back(add(mul(row, (*st)[2]), mul(ch, cIdx(8))));
      }
      plan->has.push_back((i + 1) * TH <= total
                              ? Value()
                              : cmp(arith::CmpIPredicate::slt, c, cIdx(total)));
    }
    Value itemBase = plan == &planK ? it.kBase : it.vBase;
    plan->first = strided ? add(itemBase, plan->global[0]) : itemBase;
  }
  fullTiles = u32OfIdx(divu(it.kvLen, BN));
}

void TensorCoreKernel::copyContiguous(Value j32, Value base) {
  // j < 2^32: its products with the strides are one wide multiply each.
  Value j = idxOfU32(j32);
  Value full = cmp(arith::CmpIPredicate::ult, j32, fullTiles);
  auto copies = [&](bool tail) {
    Value cols = tail ? sub(it.kvLen, mul(j, cIdx(BN))) : Value();
    for (auto [plan, src, at] :
         {std::tuple{&planK, e.k, base},
          std::tuple{&planV, e.v, add(base, cIdx(L.vOffset))}}) {
      // The tile's first copy; each copy adds its fixed offset. Strided
      // plans walk down the tile from copy 0 (each global address the last
      // plus stepGlobal, each shared one an immediate offset), so nothing
      // per copy is invariant for LLVM to hoist into a register.
      Value tileBase = add(plan->first, mul(j, plan->tileStride));
      Value from = Value(), row = Value();
      for (int64_t i = 0; i < plan->count; ++i) {
        const bool strided = plan->rowStep != 0;
        if (!strided || i == 0) {
          row = plan->row[i];
          from = strided ? tileBase : add(tileBase, plan->global[i]);
        } else {
          row = add(plan->row[0], cIdx(i * plan->rowStep));
          from = add(from, plan->stepGlobal);
        }
        auto [dst, shared] =
            strided ? sharedAt({add(at, plan->shared[0]),
                                i * plan->rowStep * plan->ld})
                    : sharedAt({add(at, plan->shared[i]), 0});
        auto issue = [&] {
          Value size = cIdx(8);
          if (tail) {
            // Rows past the sequence: zero-filled, their source not read
            // (src-size 0), so its address needs no clamping.
            Value live = cmp(arith::CmpIPredicate::slt, row, cols);
            size = select(live, cIdx(8), cIdx(0));
          }
          nvgpu::DeviceAsyncCopyOp::create(
              b_, nvgpu::DeviceAsyncTokenType::get(ctx_), dst,
              ValueRange{shared}, src, ValueRange{from},
              b_.getIndexAttr(8), size, b_.getUnitAttr());
        };
        if (plan->has[i])
          ifThen(plan->has[i], issue);
        else
          issue();
      }
    }
  };
  ifThenElse(full, [&] { copies(false); }, [&] { copies(true); });
}

void TensorCoreKernel::loadTile(Value j, Value base, Value thread,
                                int64_t threads) {
  if (!thread) {
    thread = tid;
    threads = TH;
  }
  Value c0 = cIdx(0);
  Value kv0 = mul(j, cIdx(BN));
  Value last = sub(it.kvLen, cIdx(1));
  struct Part {
    Value src, itemBase;
    int64_t stride0Slot;
    const SmallVector<Value> *st;
    int64_t n, ld;
    bool swizzle;
    Value at;
    int64_t atom;
  };
  for (const Part &p :
       {Part{e.k, it.kBase, abi::kKStride, &e.ks, D, L.ldK, L.swizzleK, base,
             L.atomK},
        Part{e.v, it.vBase, abi::kVStride, &e.vs, DV, L.ldV, L.swizzleV,
             add(base, cIdx(L.vOffset)), L.atomV}}) {
    const int64_t chunks = p.n / 8;
    // Contiguous and paged K/V get their own copy of each loop, so the
    // contiguous one holds no page-table state (register pressure).
    auto rowOffset = [&](bool paged, Value row) {
      return paged ? pagedRowOffset(it, row, p.itemBase, (*p.st)[2], p.stride0Slot)
                   : add(p.itemBase, mul(row, (*p.st)[2]));
    };
    auto fastLoop = [&](bool paged) {
      loop0(thread, cIdx(BN * chunks), cIdx(threads), [&](Value c) {
        Value row = divu(c, chunks), ch = remu(c, chunks);
        Value key = add(kv0, row);
        Value valid = cmp(arith::CmpIPredicate::slt, key, it.kvLen);
        Value from = add(rowOffset(paged, minI(key, last)), mul(ch, cIdx(8)));
        nvgpu::DeviceAsyncCopyOp::create(
            b_, nvgpu::DeviceAsyncTokenType::get(ctx_), smem,
            ValueRange{sharedIndex(p.at, p.ld, p.swizzle, chunks, row, ch, 0, 0,
                                   p.atom)},
            p.src, ValueRange{from}, b_.getIndexAttr(8),
            select(valid, cIdx(8), c0), b_.getUnitAttr());
      });
    };
    auto slowLoop = [&](bool paged) {
      loop0(thread, cIdx(BN * p.n), cIdx(threads), [&](Value x) {
        Value row = divu(x, p.n), d = remu(x, p.n);
        Value key = add(kv0, row);
        Value valid = cmp(arith::CmpIPredicate::slt, key, it.kvLen);
        Value v = load(p.src, add(rowOffset(paged, minI(key, last)),
                                  mul(d, (*p.st)[3])));
        Value at = add(sharedIndex(p.at, p.ld, p.swizzle, chunks, row,
                                   divu(d, 8), 0, 0, p.atom),
                       remu(d, 8));
        store(select(valid, v, zeroE), smem, at);
      });
    };
    // Paged K/V, or strides and alignment that 16-byte copies cannot take:
    // loops (the contiguous fast case is copyContiguous, or TMA in the
    // wgmma form, which has no copyContiguous: contiguous K/V its maps
    // cannot serve take the element loop).
    ifThenElse(
        L.wgmma ? andI(fastKV, paged) : fastKV, [&] { fastLoop(true); },
        [&] {
          ifThenElse(paged, [&] { slowLoop(true); }, [&] { slowLoop(false); });
        });
  }
}

LogicalResult TensorCoreKernel::lowerOps(Block::iterator from,
                                         Block::iterator to) {
  for (Block::iterator i = from; i != to; ++i)
    if (failed(lowerOp(*i)))
      return failure();
  return success();
}

LogicalResult TensorCoreKernel::lowerOp(Operation &op) {
  const int64_t R = 2 * MT;
  if (isa<flash::WorkItemOp>(op))
    return success(); // one block per item: decoded at the entry
  if (auto l = dyn_cast<flash::LoadQueryOp>(op)) {
    if (l.getSignedByScale() && !L.qInRegisters && !L.wgmma)
      return op.emitOpError("the mma.sync form signs Q held in registers only");
    qSigned = l.getSignedByScale();
    // The persistent form's consumers overwrite the previous item's Q, a
    // thread copying rows of both warpgroups: the turns already order a
    // warpgroup's last S = Q K^T before the other's last turn, and this
    // barrier makes that so without them too (one consumer warpgroup).
    if (persistent_)
      consumerBarrier();
    loadQ();
    NVVM::CpAsyncCommitGroupOp::create(b_);
    return success();
  }
  if (auto s = dyn_cast<flash::ScoreScaleOp>(op)) {
    // A zero scale becomes the smallest normal float: a masked score's
    // -inf times the factor stays -inf (not NaN), and a product below
    // 2^100 times it is below 2^-26, whose 2^x rounds to exactly 1
    // in f32, as the unfolded form's 2^0 does.
    Value mag = arith::MaximumFOp::create(
        b_, math::AbsFOp::create(b_, e.scale),
        cF32(std::numeric_limits<float>::min()));
    regs[s] = SmallVector<Value>(R, mag);
    return success();
  }
  if (auto z = dyn_cast<flash::ZeroAccOp>(op)) {
    // With the sums: an n-tile of them after O's, per m-tile.
    regs[z] = SmallVector<Value>(MT * DT * 4 + (z.getRowSums() ? MT * 4 : 0),
                                 e.zeroF);
    return success();
  }
  if (auto f = dyn_cast<flash::FillRowsOp>(op)) {
    regs[f] = SmallVector<Value>(R, cF32(f.getValue().convertToFloat()));
    return success();
  }
  if (auto z = dyn_cast<flash::ZeroPartialsOp>(op)) {
    regs[z] = SmallVector<Value>(R, e.zeroF);
    return success();
  }
  if (auto l = dyn_cast<flash::ForTilesOp>(op))
    return lowerTileLoops(l);
  if (auto l = dyn_cast<flash::LoadKeyValueOp>(op)) {
    regs[l] = {stageBase}; // the loop staged it
    return success();
  }
  if (std::optional<LogicalResult> r = lowerTileOp(op))
    return *r;
  if (std::optional<LogicalResult> r = lowerRowOp(op))
    return *r;
  if (auto st = dyn_cast<flash::StoreOutputOp>(op)) {
    storeOutput(st);
    return success();
  }
  return op.emitOpError("is not lowered by the mma.sync forward form");
}

/// O = acc * inv_l per row, O's two adjacent columns as one 4-byte store
/// where strides and alignment allow; LSE written by lane tig 0.
void TensorCoreKernel::storeOutput(flash::StoreOutputOp op) {
  const int64_t R = 2 * MT;
  const SmallVector<Value> &fin = regs[op.getAcc()];
  const SmallVector<Value> &invLs = regs[op.getInvL()];
  const SmallVector<Value> &lses = regs[op.getLse()];
  Value c0 = cIdx(0);
  VectorType pair = VectorType::get({2}, elem_);
  for (int64_t r = 0; r < R; ++r) {
    const Row &row = rows[r];
    int64_t mt = r / 2, half = r % 2;
    Value invL = invLs[r];
    ifThen(row.live, [&] {
      // The call's head: the model's less the head offset (recomputed here
      // rather than kept live across the KV loop).
      Value h = sub(idxOfU32(row.hI32),
                    ipAt(abi::kHeadPos0));
      Value i = idxOfU32(row.iI32);
      Value oRow = add(add(mul(it.oB, e.os[0]), mul(h, e.os[1])),
                       mul(i, e.os[2]));
      auto value = [&](int64_t dt, int64_t c) {
        return fromF32(arith::MulFOp::create(
            b_, fin[(mt * DT + dt) * 4 + 2 * half + c], invL));
      };
      ifThenElse(
          fastO,
          [&] {
            for (int64_t dt = 0; dt < DT; ++dt) {
              Value d = add(mul(tig, cIdx(2)), cIdx(8 * dt));
              Value v = vector::FromElementsOp::create(
                  b_, pair, ValueRange{value(dt, 0), value(dt, 1)});
              vector::StoreOp::create(b_, v, e.o, ValueRange{add(oRow, d)},
                                      /*nontemporal=*/false, llvm::Align(4));
            }
          },
          [&] {
            for (int64_t dt = 0; dt < DT; ++dt)
              for (int64_t c = 0; c < 2; ++c) {
                Value d = add(mul(tig, cIdx(2)), cIdx(8 * dt + c));
                store(value(dt, c), e.o, add(oRow, mul(d, e.os[3])));
              }
          });
      ifThen(andI(e.hasLse, cmp(arith::CmpIPredicate::eq, tig, c0)), [&] {
        Value at = add(add(mul(it.oB, e.ls[0]), mul(h, e.ls[1])),
                       mul(i, e.ls[2]));
        store(lses[r], e.lse, at);
      });
    });
  }
}

LogicalResult TensorCoreKernel::lowerTileLoops(flash::ForTilesOp loopOp) {
  ColumnValues cv = scoreColumnValues();
  diagonals_ = diagonalValues(v_.getScoreBlock(), {0});
  bool diagonals = !diagonals_.ops.empty();
  hoistColumns_ = cv == ColumnValues::OfKey;
  if (cv != ColumnValues::OfKeyAndHead && !diagonals)
    return lowerTileLoop(loopOp);
  // score_mod's key values read h (synaptic's key_factor[b, h, kv]): once
  // per column where the item has one query head (P = 1: every prefill
  // with Lq >= block_m), per element where GQA heads share the tile; its
  // diagonal values likewise once per diagonal (P = 1: a row's position is
  // then affine in its index). Two versions of the loop, not of the
  // element code inside it: the two in one loop spilled in it (synaptic,
  // D=128).
  SmallVector<Type> types;
  for (Value v : loopOp.getInits())
    for (Value r : regs[v])
      types.push_back(r.getType());
  // (and the ring's state after the loop, each version's own)
  Value stage0 = ringStage, phases0 = ringPhases;
  if (L.wgmma)
    types.append({i32_, i32_});
  LogicalResult result = success();
  auto version = [&](bool oneHead) {
    hoistColumns_ = cv == ColumnValues::OfKey ||
                    (oneHead && cv == ColumnValues::OfKeyAndHead);
    shareDiagonals_ = oneHead && diagonals;
    ringStage = stage0;
    ringPhases = phases0;
    if (failed(lowerTileLoop(loopOp)))
      result = failure();
    SmallVector<Value> out;
    for (Value v : loopOp.getResults())
      out.append(regs[v]);
    if (L.wgmma)
      out.append({ringStage, ringPhases});
    return out;
  };
  SmallVector<Value> out = ifElseYield(
      cmp(arith::CmpIPredicate::eq, e.P, cIdx(1)), types,
      [&] { return version(true); }, [&] { return version(false); });
  hoistColumns_ = shareDiagonals_ = false;
  if (L.wgmma) {
    ringStage = out[out.size() - 2];
    ringPhases = out.back();
  }
  size_t at = 0;
  for (Value v : loopOp.getResults()) {
    size_t n = regs[v].size();
    regs[v] = SmallVector<Value>(out.begin() + at, out.begin() + at + n);
    at += n;
  }
  return result;
}

LogicalResult TensorCoreKernel::lowerTileLoop(flash::ForTilesOp loopOp) {
  if (L.overlap && overlapFits())
    if (auto plan = overlappable(loopOp))
      return lowerOverlappedLoop(loopOp, plan->first, plan->second);
  Value c0 = cIdx(0);
  // Tile indices are i32 (fewer than 2^31 tiles): the loop's counter, its
  // bound and the next tile's search need no 64-bit arithmetic.
  Value nKT32 = u32OfIdx(nKT);
  // Prologue: the first visited tile into stage 0 (Q's copy is already
  // committed; the wgmma form's producer fills the stages), then Q's
  // fragments once it has landed.
  auto [first, firstClass] = nextVisited(u32OfIdx(it.jlo), nKT32, inv);
  if (!L.wgmma)
    ifThen(cmp(arith::CmpIPredicate::ult, first, nKT32), [&] {
      ifThenElse(contiguous, [&] { copyContiguous(first, c0); },
                 [&] { loadTile(idxOfU32(first), c0); });
    });
  NVVM::CpAsyncCommitGroupOp::create(b_);
  if (L.qInRegisters) {
    NVVM::CpAsyncWaitGroupOp::create(b_, 1);
    gpu::BarrierOp::create(b_);
    qf.assign(MT, {});
    for (int64_t mt = 0; mt < MT; ++mt)
      for (int64_t ks = 0; ks < KS; ++ks)
        qf[mt].push_back(qFragment(mt, ks));
    if (qSigned)
      signQ();
  } else if (L.wgmma) {
    consumersStart();
  }

  // The loop over visited tiles: (j, the stage (mma.sync: its first
  // element; wgmma: its index in the ring), j's class, [wgmma: the
  // stages' mbarrier phase parities, a bit each,] the
  // iteration values' registers), j and the stage as i32 (one register
  // each across the loop).
  const size_t kLoopState = L.wgmma ? 4 : 3;
  SmallVector<Value> init = {first, L.wgmma ? ringStage : cI32(0), firstClass};
  if (L.wgmma)
    init.push_back(ringPhases);
  SmallVector<size_t> widths;
  for (Value v : loopOp.getInits()) {
    init.append(regs[v]);
    widths.push_back(regs[v].size());
  }
  Block &body = loopOp.getBody().front();
  auto yield = cast<flash::YieldOp>(body.getTerminator());
  LogicalResult result = success();
  scf::WhileOp w;
  {
    OpBuilder::InsertionGuard g2(b_);
    ValueRange after;
    std::tie(w, after) = tileLoop(init, nKT32);
    Value j32 = after[0], stage = after[1], cls = after[2];
    Value stageIdx, phases, next, nextClass, other;
    if (L.wgmma) {
      // (the stage as its index: the ring may have more than two)
      stageIdx = stage;
      phases = awaitStage(j32, stage, after[3]);
      std::tie(next, nextClass) = nextVisited(nextTile(j32), nKT32, inv);
      other = nextStage(stage);
    } else {
      // Tile j has arrived (its group is the only one pending) and every
      // warp is past the previous tile, whose stage the prefetch now
      // refills.
      NVVM::CpAsyncWaitGroupOp::create(b_, 0);
      gpu::BarrierOp::create(b_);
      std::tie(next, nextClass) = nextVisited(nextTile(j32), nKT32, inv);
      other = arith::SubIOp::create(b_, cI32(L.stageElems), stage);
      ifThen(cmp(arith::CmpIPredicate::ult, next, nKT32), [&] {
        ifThenElse(contiguous, [&] { copyContiguous(next, idxOfU32(other)); },
                   [&] { loadTile(idxOfU32(next), idxOfU32(other)); });
      });
      NVVM::CpAsyncCommitGroupOp::create(b_);
    }
    // The class the search found and the tail from the item's full-tile
    // count, where registers allow: with Q read from shared memory per
    // tile (Dqk > 128, or two m-tiles) the kernel is at the register
    // file's limit and either value live across the loop spills (synaptic
    // at D=256); the tile is classified again there, its tail from kvLen.
    tile = L.qInRegisters
               ? tileAt(it, idxOfU32(j32), inv,
                        cmp(arith::CmpIPredicate::ult, j32, fullTiles), cls)
               : tileAt(it, idxOfU32(j32), inv);
    stageBase = L.wgmma ? stageAt(stage) : idxOfU32(stage);
    size_t at = kLoopState;
    for (auto [arg, n] : llvm::zip(body.getArguments().drop_front(), widths)) {
      regs[arg] = SmallVector<Value>(after.slice(at, n));
      at += n;
    }
    if (failed(lowerOps(body.begin(), Block::iterator(yield))))
      result = failure();
    // The wgmma form: the tile's products have completed (both wait for
    // their group), so the warp releases the stage to the producer.
    if (L.wgmma)
      releaseStage(stageIdx);
    SmallVector<Value> out = {next, other, nextClass};
    if (L.wgmma)
      out.push_back(phases);
    for (Value v : yield.getValues())
      out.append(regs[v]);
    scf::YieldOp::create(b_, out);
  }
  NVVM::CpAsyncWaitGroupOp::create(b_, 0);
  if (pingPong())
    ifThen(firstWarpgroup, [&] { tma.namedBarrier(kTurnBarrier, TH); });
  if (L.wgmma) {
    ringStage = w.getResult(1);
    ringPhases = w.getResult(3);
  }
  size_t at = kLoopState;
  for (auto [res, n] : llvm::zip(loopOp.getResults(), widths)) {
    regs[res] = SmallVector<Value>(w.getResults().slice(at, n));
    at += n;
  }
  return result;
}

LogicalResult TensorCoreKernel::lower(flash::KernelOp kernel,
                                      gpu::GPUModuleOp module) {
  OpBuilder::InsertionGuard guard(b_);
  b_.setInsertionPointToEnd(module.getBody());
  SmallVector<Type> args = kernelArgs();
  if (L.wgmma) {
    // After the first item: K's and V's tensor maps (grid constants: the
    // NVVM lowering makes them byval, GpuBackend.cpp) and their flag.
    auto ptr = LLVM::LLVMPointerType::get(ctx_);
    args.append({ptr, ptr, i64_});
  }
  auto fn = gpu::GPUFuncOp::create(b_, kernel.getSymName(),
                                   b_.getFunctionType(args, {}));
  if (L.wgmma) {
    unsigned n = fn.getNumArguments();
    for (unsigned a : {n - 3, n - 2})
      fn.setArgAttr(a, "llvm.align", b_.getI64IntegerAttr(64));
    fn->setAttr(kKvTensorMapsAttr, b_.getUnitAttr());
  }
  fn->setAttr(gpu::GPUDialect::getKernelFuncAttrName(), b_.getUnitAttr());
  const int64_t threads = L.launchWarps() * 32;
  fn.setKnownBlockSizeAttr(b_.getDenseI32ArrayAttr({int32_t(threads), 1, 1}));
  // The whole register file is the budget (one CTA per SM by design): left
  // to itself, ptxas caps some small-D kernels at 128 registers and spills.
  // The warp-specialized form launches with an even share (a multiple of
  // 8); its warpgroups then trade registers within it (setmaxnreg).
  fn->setAttr(NVVM::NVVMDialect::getMaxnregAttrName(),
              b_.getI32IntegerAttr(int32_t(L.launchRegisters())));
  b_.setInsertionPointToStart(&fn.getBody().front());
  auto wg = gpu::AddressSpaceAttr::get(ctx_, gpu::AddressSpace::Workgroup);
  Value raw = gpu::DynamicSharedMemoryOp::create(
      b_, MemRefType::get({ShapedType::kDynamic}, b_.getI8Type(),
                          MemRefLayoutAttrInterface(), wg));
  Value viewAt = cIdx(0);
  if (L.wgmma) {
    // The atoms' swizzle is of the shared address: start on a 1024-byte
    // boundary (the 1 KB of slack the layout adds).
    Value base = memref::ExtractAlignedPointerAsIndexOp::create(b_, raw);
    viewAt = remu(sub(cIdx(1024), remu(base, 1024)), 1024);
    raw = memref::ViewOp::create(
        b_,
        MemRefType::get({ShapedType::kDynamic}, b_.getI8Type(),
                        MemRefLayoutAttrInterface(), wg),
        raw, viewAt, ValueRange{cIdx(L.onesOffset() + L.onesBytes())});
    smemAddr = u32OfIdx(memref::ExtractAlignedPointerAsIndexOp::create(b_, raw));
    viewAt = cIdx(0);
  }
  smemBytes = raw;
  smem = memref::ViewOp::create(
      b_, MemRefType::get({L.totalElems}, elem_, MemRefLayoutAttrInterface(), wg),
      raw, viewAt, ValueRange{});
  Value c0 = cIdx(0);
  if (L.wgmma) {
    tid = gpu::ThreadIdOp::create(b_, gpu::Dimension::x);
    lane = remu(tid, 32);
    warp = divu(tid, 32);
    // Per stage a `full` mbarrier (one arrival: the TMA issuer's with the
    // bytes it expects, or the producer's after its copies) and an `empty`
    // one (a consumer warp's arrival each), initialized before any thread
    // waits on them.
    mbarBase = arith::AddIOp::create(b_, smemAddr, cI32(L.totalElems * 2));
    ifThen(cmp(arith::CmpIPredicate::eq, tid, c0), [&] {
      for (int64_t s = 0; s < L.stages; ++s) {
        tma.init(fullBar(cI32(s)), 1);
        tma.init(emptyBar(cI32(s)), L.warps);
      }
    });
    gpu::BarrierOp::create(b_);
  }
  SmallVector<Value> maps = readCall(fn);
  Block &body = kernel.getBlock();
  if (!L.producerWarps) {
    if (failed(lowerOps(body.begin(), body.end())))
      return failure();
    gpu::ReturnOp::create(b_);
    return success();
  }
  // Warp-specialized: the producer warpgroup after the consumers'. What
  // both read of the call is read before they part, at the launch's even
  // register share (ptxas keeps each role's loop spill-free that way;
  // reading it again in each role after setmaxnreg spilled in both).
  LogicalResult result = success();
  ifThenElse(
      cmp(arith::CmpIPredicate::uge, tid, cIdx(TH)),
      [&] {
        tma.setMaxRegisters(false, TensorCoreLayout::kProducerRegisters);
        produce(maps);
      },
      [&] {
        tma.setMaxRegisters(true, L.consumerRegisters());
        firstWarpgroup = cmp(arith::CmpIPredicate::ult, warp, cIdx(4));
        // The warpgroup's index as a warp's minimum (redux.sync): ptxas
        // keeps it in a uniform register, and with it the Q descriptors'
        // base, which it otherwise builds per k-step in vector registers
        // and moves over (4 instructions each instead of 2).
        warpgroupIdx =
            idxOfU32(NVVM::ReduxOp::create(b_, i32_, u32OfIdx(divu(warp, 4)),
                                           NVVM::ReduxKind::UMIN, cI32(-1)));
        myTurn = select(firstWarpgroup, cI32(kTurnBarrier), cI32(kTurnBarrier + 1));
        theirTurn = arith::SubIOp::create(b_, cI32(2 * kTurnBarrier + 1), myTurn);
        auto item = [&] {
          // (the ring's state as the producer's branch left it is not
          // this branch's: a block's one item starts it at zero)
          if (!persistent_)
            ringStage = ringPhases = cI32(0);
          computeRows();
          if (failed(lowerOps(body.begin(), body.end())))
            result = failure();
        };
        if (persistent_)
          forEachItem(item);
        else
          item();
      });
  gpu::ReturnOp::create(b_);
  return result;
}

SmallVector<Value> TensorCoreKernel::readCall(gpu::GPUFuncOp fn) {
  const unsigned itemArg = fn.getNumArguments() - (L.wgmma ? 4 : 1);
  fn_ = fn;
  e = loadEntry(fn.getArguments());
  firstItem = add(toIdx(fn.getArgument(itemArg)),
                  gpu::BlockIdOp::create(b_, gpu::Dimension::x));
  if (!tid) {
    tid = gpu::ThreadIdOp::create(b_, gpu::Dimension::x);
    lane = remu(tid, 32);
    warp = divu(tid, 32);
  }
  g = divu(lane, 4);
  tig = remu(lane, 4);
  mat = divu(lane, 8);
  r8 = remu(lane, 8);
  zeroE = arith::ConstantOp::create(b_, b_.getZeroAttr(elem_));
  // The persistent form takes its items in each role's loop
  // (forEachItem); the others have one, the block's.
  if (!persistent_)
    decodeBlockItem(firstItem);
  readCopyCase();
  if (!L.wgmma)
    planCopies();
  SmallVector<Value> maps;
  if (L.wgmma) {
    unsigned n = fn.getNumArguments();
    for (unsigned m = 0; m < 2; ++m)
      maps.push_back(
          LLVM::PtrToIntOp::create(b_, i64_, fn.getArgument(n - 3 + m)));
  }
  if (!persistent_)
    itemInvariants();
  return maps;
}

void TensorCoreKernel::readProblem() {
  e = loadEntry(fn_.getArguments());
  readCopyCase();
}

void TensorCoreKernel::readCopyCase() {
  Value c0 = cIdx(0);
  // 16-byte cp.async needs unit stride along D, the other strides in
  // multiples of 8 elements and 16-byte aligned bases; otherwise the same
  // copies go element by element. Paired O stores need 4 bytes likewise.
  fastQ = rowsInVectors(e.q, e.qs, 8, 16);
  fastKV = andI(rowsInVectors(e.k, e.ks, 8, 16), rowsInVectors(e.v, e.vs, 8, 16));
  fastO = rowsInVectors(e.o, e.os, 2, 4);
  // Read once, before the loop: the copies' case never changes per tile.
  paged = cmp(arith::CmpIPredicate::ne, ipAt(abi::kPageSize), c0);
  contiguous = andI(fastKV, arith::XOrIOp::create(
                                b_, paged, arith::ConstantOp::create(
                                               b_, b_.getBoolAttr(true))));
  if (L.wgmma) {
    // The runtime's flag: maps it could encode (contiguous K/V, or pages
    // of a multiple of the tile's rows), and 16-byte rows.
    unsigned n = fn_.getNumArguments();
    useTma =
        andI(cmp(arith::CmpIPredicate::ne, toIdx(fn_.getArgument(n - 1)), c0),
             fastKV);
  }
}

void TensorCoreKernel::beginItem(Value item) {
  decodeBlockItem(item);
  itemInvariants();
}

void TensorCoreKernel::decodeBlockItem(Value item) {
  it = decodeItem(e, item, /*heavyFirst=*/true);
  if (!L.producerWarps)
    computeRows(); // (the warp-specialized form's consumers compute theirs)
}

void TensorCoreKernel::itemInvariants() {
  inv = IRMapping();
  inv.map(v_.getMaskBlock().getArgument(0), it.bI32);
  inv.map(v_.getMaskBlock().getArgument(1), it.hI32);
  materializeMaskInvariants(inv);
  nKT = it.jhi; // the end of the item's KV split
}

Value TensorCoreKernel::itemCount() {
  // Loaded where it is needed (a load per value: the loop's test reads
  // them again rather than keep the count live across the tile loop).
  Value heads =
      arith::DivUIOp::create(b_, ipAt(abi::kHq), ipAt(abi::kPackHeads));
  return mul(mul(mul(ipAt(abi::kB), heads), ipAt(abi::kNumQTiles)),
             ipAt(abi::kNumSplits));
}

void TensorCoreKernel::forEachItem(function_ref<void()> body) {
  // The call's values are read again in each item (loads of the parameter
  // block, cached), and the loop's count in its test: computed before the
  // loop, those the item's start needs (strides, sizes, the copies' case)
  // would be live across every item's tile loop, where the consumers'
  // registers are at the limit (it still spills in document_mask,
  // synaptic, alibi and distance_barrier at D=128: docs/kernels.md). The
  // item index is i32 (one register).
  Entry outer = e;
  SmallVector<Type> types(3, i32_);
  auto w = scf::WhileOp::create(
      b_, types, ValueRange{u32OfIdx(firstItem), cI32(0), cI32(0)});
  SmallVector<Location> locs(3, b_.getLoc());
  {
    OpBuilder::InsertionGuard g(b_);
    Block *before = b_.createBlock(&w.getBefore(), {}, types, locs);
    scf::ConditionOp::create(b_,
                             cmp(arith::CmpIPredicate::ult,
                                 idxOfU32(before->getArgument(0)), itemCount()),
                             before->getArguments());
    Block *after = b_.createBlock(&w.getAfter(), {}, types, locs);
    Value item = after->getArgument(0);
    readProblem();
    beginItem(idxOfU32(item));
    ringStage = after->getArgument(1);
    ringPhases = after->getArgument(2);
    body();
    Value step = u32OfIdx(gpu::GridDimOp::create(b_, gpu::Dimension::x));
    scf::YieldOp::create(b_, ValueRange{arith::AddIOp::create(b_, item, step),
                                        ringStage, ringPhases});
  }
  e = outer;
}

} // namespace codegen

LogicalResult lowerTensorCoreForward(flash::KernelOp kernel,
                                     const MaskAnalysis &mask,
                                     Operation *container, bool wgmma,
                                     bool persistent) {
  if (kernel.getKind() != "forward")
    return kernel.emitOpError("the tensor-core forward forms lower forward "
                              "kernels");
  kernel->getContext()
      ->loadDialect<gpu::GPUDialect, memref::MemRefDialect, scf::SCFDialect,
                    arith::ArithDialect, math::MathDialect,
                    vector::VectorDialect, NVVM::NVVMDialect,
                    nvgpu::NVGPUDialect, LLVM::LLVMDialect>();
  codegen::TensorCoreKernel lowering(kernel->getParentOfType<ModuleOp>(),
                                     variantOf(kernel), mask, configOf(kernel),
                                     wgmma, persistent);
  if (failed(lowering.lower(kernel, cast<gpu::GPUModuleOp>(container))))
    return failure();
  kernel.erase();
  return success();
}

} // namespace attnc
