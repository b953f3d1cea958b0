//===- ProgramBuilder.h - The kernel forms' shared vocabulary ---------------===//
//
// What every kernel form (CPU, SIMT, mma.sync, the block-mask builder, the
// split-KV merge) builds with: IR helpers, the ABI entry, work items, tiles
// and their classes, modifier emission, vector micro-kernels. Target-neutral:
// the forms live in CPU/ and NVIDIA/ (KernelForm.h).
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_CODEGEN_PROGRAMBUILDER_H
#define ATTNC_CODEGEN_PROGRAMBUILDER_H

#include "attnc/Codegen/FlashProgram.h"

#include "attnc/runtime/KernelABI.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/ImplicitLocOpBuilder.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/DenseSet.h"

#include <array>
#include <cmath>
#include <climits>
#include <functional>
#include <limits>

namespace attnc::codegen {

using namespace mlir;
namespace abi = attnc::rt::abi;

inline Type storageType(MLIRContext *ctx, rt::DType t) {
  Builder b(ctx);
  switch (t) {
  case rt::DType::F32: return b.getF32Type();
  case rt::DType::F16: return b.getF16Type();
  case rt::DType::BF16: return b.getBF16Type();
  case rt::DType::I32: return b.getI32Type();
  case rt::DType::I64: return b.getI64Type();
  case rt::DType::Bool: return b.getI8Type();
  }
  return {};
}

inline rt::DType paramDType(Type t) {
  if (t.isF32()) return rt::DType::F32;
  if (t.isF16()) return rt::DType::F16;
  if (t.isBF16()) return rt::DType::BF16;
  if (t.isInteger(64)) return rt::DType::I64;
  if (t.isInteger(1)) return rt::DType::Bool;
  return rt::DType::I32;
}

class ProgramBuilder {
public:
  /// Values of `block` that do not depend on its arguments `varying`.
  static llvm::DenseSet<Value> uniformValues(Block &block,
                                             ArrayRef<unsigned> varying);
  /// Whether `block` gathers at an index that depends on its arguments
  /// `varying` (score_mod's {0, 4}: the score and kv; mask_mod's {3}).
  static bool gathersVarying(Block &block, ArrayRef<unsigned> varying);
  ProgramBuilder(ModuleOp module, attn::VariantOp v, const MaskAnalysis &mask,
           const FlashConfig &cfg)
      : ctx_(module.getContext()), b_(v.getLoc(), ctx_), v_(v), mask_(mask),
        cfg_(cfg) {
    b_.setInsertionPointToEnd(module.getBody());
    f32_ = b_.getF32Type();
    i32_ = b_.getI32Type();
    i64_ = b_.getI64Type();
    elem_ = storageType(ctx_, cfg.spec.dtype);
    BM = cfg.spec.blockM;
    BN = cfg.spec.blockN;
    D = cfg.spec.headDim;
    DV = cfg.spec.vHeadDim;
    VW = cfg.vectorWidth;

    // The ABI's parameter layout, from the same code the runtime uses.
    for (Attribute a : v.getParams()) {
      auto p = cast<attn::ParamAttr>(a);
      rt::ParamSpec ps;
      ps.name = p.getName().getValue().str();
      ps.isTensor = p.isTensor();
      ps.dtype = paramDType(p.getElementType());
      for (Attribute d : p.getDims()) {
        rt::DimSpec dim;
        if (auto sym = dyn_cast<StringAttr>(d))
          dim.symbol = sym.getValue().str();
        else
          dim.size = cast<IntegerAttr>(d).getInt();
        ps.dims.push_back(dim);
      }
      info_.params.push_back(ps);
    }
    layout_ = abi::computeLayout(info_);
  }

  /// The block-mask builder: a func over [begin, end) items, or with
  /// `gpuModule` a gpu.func with one block per item.
  LogicalResult buildMaskBuilder(StringRef name,
                                 gpu::GPUModuleOp gpuModule = nullptr);
  /// The entry of a program over a range of items (the block-mask builder,
  /// the merge): `args`, then on the CPU a func.func's first and end item,
  /// or with `gpuModule` a gpu.func kernel's first item (one block each).
  /// Returns its entry block; the caller sets the insertion point.
  Block *createRangeEntry(StringRef name, SmallVector<Type> args,
                          gpu::GPUModuleOp gpuModule);
  /// The split-KV merge (SplitMerge.cpp): combines the partial rows of a
  /// split launch by their LSEs (KernelABI.h). On the CPU a func over
  /// [begin, end) rows; with `gpuModule` a gpu.func, one block per row.
  LogicalResult buildMerge(StringRef name, gpu::GPUModuleOp gpuModule = nullptr);

protected:
  // ---- small helpers ----
  Value cIdx(int64_t v) { return arith::ConstantIndexOp::create(b_, v); }
  Value cF32(double v) {
    return arith::ConstantOp::create(b_, b_.getF32FloatAttr(float(v)));
  }
  Value cI32(int64_t v) {
    return arith::ConstantOp::create(b_, b_.getI32IntegerAttr(int32_t(v)));
  }
  Value add(Value a, Value c) { return arith::AddIOp::create(b_, a, c); }
  Value sub(Value a, Value c) { return arith::SubIOp::create(b_, a, c); }
  /// a + c where both are non-negative and the sum is a position (below
  /// 2^30: the runtime checks the offsets), so it wraps neither way; LLVM
  /// may then drop a gather's clamp at 0.
  Value addPos(Value a, Value c) {
    return arith::AddIOp::create(
        b_, a, c,
        arith::IntegerOverflowFlagsAttr::get(
            b_.getContext(), arith::IntegerOverflowFlags::nsw |
                                 arith::IntegerOverflowFlags::nuw));
  }
  /// The i32 position of key `offset` of a run whose first key is at
  /// (index) position pos0, as the modifiers see it.
  Value keyPos(Value pos0, Value offset) {
    return arith::IndexCastOp::create(
        b_, i32_, keyOffsets() ? addPos(pos0, offset) : add(pos0, offset));
  }
  /// The i32 index the modifiers see for the call's query head h: h plus
  /// the head offset (ip[kHeadPos0]; a head-parallel shard's first head).
  Value headIndex(Value h) {
    return arith::IndexCastOp::create(b_, i32_,
                                      add(h, ipAt(abi::kHeadPos0)));
  }
  /// Whether the kernel reads each sequence's first key position
  /// (KernelSpec::keyOffsets); without it key row r is at position r and
  /// nothing of this costs an instruction.
  bool keyOffsets() const { return cfg_.spec.keyOffsets; }
  Value mul(Value a, Value c) { return arith::MulIOp::create(b_, a, c); }
  Value minI(Value a, Value c) { return arith::MinSIOp::create(b_, a, c); }
  Value maxI(Value a, Value c) { return arith::MaxSIOp::create(b_, a, c); }
  Value load(Value m, Value i) { return memref::LoadOp::create(b_, m, i); }
  void store(Value x, Value m, Value i) { memref::StoreOp::create(b_, x, m, i); }
  Value toIdx(Value i) {
    return arith::IndexCastOp::create(b_, b_.getIndexType(), i);
  }
  /// attn.size: B, H, HKV, Q, KV or a free dimension, as i32.
  Value problemSize(StringRef dim);
  Value ipAt(int64_t slot) { return toIdx(load(ip_, cIdx(slot))); }
  Value ipAt(Value slot) { return toIdx(load(ip_, slot)); }
  Value toF32(Value x) {
    return x.getType() == f32_ ? x : Value(arith::ExtFOp::create(b_, f32_, x));
  }
  Value fromF32(Value x) {
    return elem_ == f32_ ? x : Value(arith::TruncFOp::create(b_, elem_, x));
  }
  Value alloca(int64_t n) {
    return memref::AllocaOp::create(b_, MemRefType::get({n}, f32_));
  }
  /// for (i = lb; i < ub; i += step) with loop-carried values.
  scf::ForOp loop(Value lb, Value ub, int64_t step, ValueRange iters,
                  function_ref<SmallVector<Value>(Value, ValueRange)> body) {
    return loop(lb, ub, cIdx(step), iters, body);
  }
  scf::ForOp loop(Value lb, Value ub, Value step, ValueRange iters,
                  function_ref<SmallVector<Value>(Value, ValueRange)> body) {
    auto f = scf::ForOp::create(b_, lb, ub, step, iters);
    OpBuilder::InsertionGuard g(b_);
    b_.setInsertionPointToStart(f.getBody());
    SmallVector<Value> next = body(f.getInductionVar(), f.getRegionIterArgs());
    // ForOp::create adds an empty yield when there are no iter args.
    if (!iters.empty() || f.getBody()->empty() ||
        !isa<scf::YieldOp>(f.getBody()->back()))
      scf::YieldOp::create(b_, next);
    else
      f.getBody()->back().setOperands(next);
    return f;
  }
  void loop0(Value lb, Value ub, int64_t step, function_ref<void(Value)> body) {
    loop0(lb, ub, cIdx(step), body);
  }
  void loop0(Value lb, Value ub, Value step, function_ref<void(Value)> body) {
    auto f = scf::ForOp::create(b_, lb, ub, step);
    OpBuilder::InsertionGuard g(b_);
    b_.setInsertionPoint(f.getBody()->getTerminator());
    body(f.getInductionVar());
  }
  void ifThen(Value cond, function_ref<void()> then) {
    auto op = scf::IfOp::create(b_, cond, /*withElseRegion=*/false);
    OpBuilder::InsertionGuard g(b_);
    b_.setInsertionPoint(op.thenBlock()->getTerminator());
    then();
  }
  void ifThenElse(Value cond, function_ref<void()> then,
                  function_ref<void()> otherwise) {
    auto op = scf::IfOp::create(b_, cond, /*withElseRegion=*/true);
    OpBuilder::InsertionGuard g(b_);
    b_.setInsertionPoint(op.thenBlock()->getTerminator());
    then();
    b_.setInsertionPoint(op.elseBlock()->getTerminator());
    otherwise();
  }
  /// if (cond) then() else keep: yields `then`'s values or `keep`.
  SmallVector<Value> ifYield(Value cond, ValueRange keep,
                             function_ref<SmallVector<Value>()> then) {
    return ifElseYield(cond, keep.getTypes(), then,
                       [&] { return SmallVector<Value>(keep); });
  }
  /// if (cond) then() else otherwise(), each built in its own branch,
  /// yielding values of `types`.
  SmallVector<Value> ifElseYield(Value cond, TypeRange types,
                                 function_ref<SmallVector<Value>()> then,
                                 function_ref<SmallVector<Value>()> otherwise) {
    auto op = scf::IfOp::create(b_, types, cond, /*withElse=*/true);
    OpBuilder::InsertionGuard g(b_);
    b_.setInsertionPointToStart(op.thenBlock());
    scf::YieldOp::create(b_, then());
    b_.setInsertionPointToStart(op.elseBlock());
    scf::YieldOp::create(b_, otherwise());
    return SmallVector<Value>(op.getResults());
  }
  Value select(Value c, Value a, Value x) {
    return arith::SelectOp::create(b_, c, a, x);
  }
  /// Whether tensor `m` (strides `st`, innermost last) takes vector copies
  /// of `mult` elements: unit stride along its rows, the other strides
  /// multiples of `mult`, and its base `bytes`-aligned (checked at run
  /// time: 16-byte cp.async needs mult 8 and 16 bytes for 2-byte elements).
  Value rowsInVectors(Value m, ArrayRef<Value> st, int64_t mult,
                      int64_t bytes) {
    auto eq = [&](Value a, Value c) {
      return arith::CmpIOp::create(b_, arith::CmpIPredicate::eq, a, c);
    };
    auto andI = [&](Value a, Value c) { return arith::AndIOp::create(b_, a, c); };
    Value c0 = cIdx(0);
    Value base = memref::ExtractAlignedPointerAsIndexOp::create(b_, m);
    Value aligned = eq(arith::RemUIOp::create(b_, base, cIdx(bytes)), c0);
    Value ok = eq(st[3], cIdx(1));
    for (int d = 0; d < 3; ++d)
      ok = andI(ok, eq(arith::RemUIOp::create(b_, st[d], cIdx(mult)), c0));
    return andI(ok, aligned);
  }

  void loadEntryValues(ValueRange fnArgs, unsigned firstCapture);

  /// Problem-wide values of a kernel, read once at its entry.
  struct Entry {
    Value q, k, v, o, lse;
    Value Hq, Lq, B, nQT, G, P; // P: query heads per work item
    SmallVector<Value> qs, ks, vs, os, ls; // strides of q, k, v, out, lse
    Value hasLse, scale, ninf, zeroF, log2e, ln2;
    // Dropout (KernelABI.h's slots; read only by kernels that drop): i32
    // threshold and Philox key words, the f32 factor of a kept pair.
    Value dropThreshold, dropScale, dropKey0, dropKey1;
  };
  /// Binds ip/fp/blockmask and the captures from the kernel's arguments
  /// (ABI order) and loads the problem-wide values.
  Entry loadEntry(ValueRange fnArgs);
  /// A work item's coordinates: sequence, head, Q tile and its rows.
  struct Item {
    Value qt, h, b, kvh, kvLen, qpos0, r0, rows, bI32, hI32, qlo, qhi;
    Value kvpos0; // the position of the sequence's first key (row 0)
    Value kBase, vBase; // offsets of this (b, kv head) in contiguous K and V
    Value jlo, jhi;     // the item's KV split: tiles [jlo, jhi)
    Value oB;           // the batch index of its rows in O and LSE (s*B + b)
    // h is the item's first query head (classification, block masks); with
    // packed heads each row has its own, from rowCoords.
  };
  /// With `heavyFirst`, the Q tiles of a (b, head) run last to first: under
  /// a causal or other lower-triangular mask the late tiles visit the most
  /// KV tiles, and launching them first shortens the tail of the grid.
  Item decodeItem(const Entry &e, Value item, bool heavyFirst = false);
  /// The item of sequence b, first query head h, Q tile qt and KV split
  /// `split` (index values), built from its coordinates (decodeItem's
  /// second half); `kvh`, where the caller has it, is h / G.
  Item itemAt(const Entry &e, Value b, Value h, Value qt, Value split,
              Value kvh = {});
  /// Q tile qt of query head h, an item of one head (P = 1, as the
  /// backward's launcher sets it) of `first`'s sequence and KV head: its
  /// rows are positions r0 .. of that head, and the sequence's values
  /// (lengths, positions, K/V bases) are first's, so the backward's walk
  /// over Q tiles reloads and divides nothing per tile.
  Item headTileItem(const Entry &e, const Item &first, Value h, Value qt);
  /// The offset of key `row` of the item's sequence and KV head in paged K
  /// or V: base + (page - b)*s0 + (row % pageSize)*s2 (base: it.kBase or
  /// it.vBase, b*s0 + kvh*s1; s2: the row stride; add d*s3), for code that
  /// has tested ip[kPageSize] != 0; contiguous K/V are base + row*s2.
  /// `stride0Slot` is abi::kKStride or abi::kVStride. Callers keep a copy
  /// of their loop per case, so contiguous K/V pay nothing for pages.
  Value pagedRowOffset(const Item &it, Value row, Value base, Value s2,
                       int64_t stride0Slot);
  /// The pool's page that holds key `row` of the item's sequence (its page
  /// table's entry row / pageSize).
  Value pageOf(const Item &it, Value row);
  /// Where ip's words after the per-sequence part start (pages; the
  /// backward's slots): KernelABI.h's Layout::pageBase(B).
  Value afterSequences(Value B) {
    return add(cIdx(layout_.seqBase), mul(B, cIdx(abi::kSeqWords)));
  }
  /// The position of sequence b's first key (ip[seqBase + 2B + b]; the
  /// runtime keeps it in [0, 2^30), which the mask states to LLVM), or 0
  /// for a kernel without key offsets.
  Value firstKeyPosition(Value B, Value b) {
    if (!keyOffsets())
      return cIdx(0);
    return arith::AndIOp::create(
        b_, ipAt(add(add(cIdx(layout_.seqBase), mul(B, cIdx(2))), b)),
        cIdx((int64_t(1) << 30) - 1));
  }
  /// Row r of the item's tile: its query head and query index.
  std::pair<Value, Value> rowCoords(const Entry &e, const Item &it, Value r);
  /// The KV tiles of a work item that are not empty: for each, `body` gets
  /// the tile's first key, its number of keys, its class, and whether the
  /// mask can be skipped (a full tile without a tail).
  struct Tile {
    Value j, kv0, cols, khi, cls, visit, skipMask;
    Value pos0; // the position of key kv0 (kv0 + the item's kvpos0)
  };
  void forEachVisitedTile(const Item &it, function_ref<void(const Tile &)> body);
  /// Tile j of a work item: its keys and class (`inv` holds the mask's
  /// values that do not depend on q or kv). `noTail`, where the form knows
  /// it more cheaply (an i32 compare with the item's full tiles), says
  /// whether the tile ends before the sequence does; `cls`, where the form
  /// classified the tile already (while looking for it), is its class.
  Tile tileAt(const Item &it, Value j, IRMapping &inv, Value noTail = {},
              Value cls = {});
  /// The kernel operands (KernelABI.h order, then the launch's first work
  /// item; the CPU form adds the end of its range).
  SmallVector<Type> kernelArgs();
  /// Writes row `r` of the tile: O = acc / l (0 when l = 0) and, if asked
  /// for, LSE = (m + log2 l) ln 2 (-inf when l = 0).
  void emitRowEpilogue(const Entry &e, const Item &it, Value r, Value m,
                       Value l, function_ref<Value(Value)> acc);
  Value materialize(Value v, IRMapping &map);
  Value gather(attn::GatherOp g, IRMapping &map);
  /// Index `i` (i32) of dimension d of capture pi clamped into it, in i32
  /// (an extent past 2^31 - 1 holds every i32 index): a gather's, and the
  /// accumulate's into the capture's gradient.
  Value clampedIndex(size_t pi, size_t d, Value i);
  /// attn.sum on scalars: a loop over the index, the body's values local
  /// to it (what it reads from outside is computed before the loop).
  Value sum(attn::SumOp s, IRMapping &map);
  /// attn.sum over W lanes; a count that varies across lanes runs to the
  /// largest and drops each lane's terms past its own count.
  Value sumVec(attn::SumOp s, const llvm::DenseMap<Value, Value> &vec,
               const llvm::DenseSet<Value> &uniformSet, IRMapping &uniform,
               int64_t W);
  /// The score sequence of one element at (b, h, q, kv), every form's:
  /// score_mod(x * scale); `row` holds what score_mod computes from (b, h,
  /// q) alone, hoisted (or null).
  Value scaledScore(Value x, Value scale, Value b, Value h, Value q, Value kv,
                    const IRMapping *row = nullptr);
  /// Dropout's factor for pair (b, h, q, kv), i32 positions as the
  /// modifiers see them: the kept pair's scale, or 0 where Philox drops it
  /// (the runtime's Dropout.h says how; its fp64 reference draws the same
  /// mask). `kv` may be a vector (the CPU's lanes): the rest is broadcast.
  Value dropoutFactor(const Entry &e, Value b, Value h, Value q, Value kv);
  /// The two halves of dropoutFactor, for a form whose thread holds
  /// neighbouring keys: the Philox block of keys kv - kv % 4 .. + 3, then
  /// key kv's factor from it (any kv of that block).
  std::array<Value, 4> philoxBlock(const Entry &e, Value b, Value h, Value q,
                                   Value kv);
  Value dropoutFactorOf(const Entry &e, const std::array<Value, 4> &block,
                        Value kv);
  /// The factors of keys kv0 .. kv0 + W - 1 as a vector (kv0 a multiple
  /// of 4, W of 4): one Philox block per 4 lanes, its words spread over
  /// them by shuffles.
  Value dropoutFactorLanes(const Entry &e, Value b, Value h, Value q, Value kv0,
                           int64_t W);
  /// Whether an element of a tile that needs its mask is kept: its key is
  /// within the tile (`inRange`) and mask_mod(b, h, q, kv) holds; `row` as
  /// above, for mask_mod.
  Value keptByMask(Value inRange, Value b, Value h, Value q, Value kv,
                   const IRMapping *row = nullptr);
  /// The modifier on scalars; values already in `hoisted` (computed once,
  /// outside the loop) are reused.
  Value emitModifier(Block &block, ValueRange args,
                     const IRMapping *hoisted = nullptr);
  /// A modifier's diagonal values: those that depend on (b, h) and one
  /// difference kv - q or q - kv (`differences`, arith.subi of its
  /// arguments 4 and 3) and on nothing else per element (the arguments
  /// `varying`: score, and score_grad's dy), so they are equal wherever
  /// kv - q is (alibi's f32(kv - q) slope[h], a barrier's abs(q - kv), a
  /// gathered bias[h, min(abs(q - kv), 255)]).
  struct DiagonalValues {
    SmallVector<Operation *> differences;
    SmallVector<Operation *> ops;
    /// Whether the block also gathers at an index of q or kv themselves
    /// (synaptic's qamp[b, h, q]): per-row or per-key values.
    bool positionGathers = false;
    /// The bucket: the one i32 value through which every diagonal value
    /// depends on the difference, when it is a monotone function of it
    /// that cannot wrap (relative_bias's min(q - kv, 255), a window's
    /// clamp): where it is the same at a thread's first and last diagonal
    /// it is the same on every diagonal between, and so is every diagonal
    /// value (bucketConstant). Null when there is none.
    Value bucket;
    /// math.absi ops on the way to the bucket whose operand can take
    /// either sign: monotone only where it keeps one over the diagonals.
    SmallVector<Operation *> bucketAbs;
  };
  static DiagonalValues diagonalValues(Block &block, ArrayRef<unsigned> varying);
  /// Sets d.bucket and d.bucketAbs (see there) from d's ops.
  static void findBucket(Block &block, DiagonalValues &d);
  /// A tile's diagonals: kv - q at the thread's first element (`base`, i32;
  /// the others are base + a constant). In the f16/bf16 kernels
  /// (approximateScoreFunctions_) also f32(base) and f32(-base) where the
  /// block converts kv - q or q - kv to f32, and c f32(+-base) for each
  /// product c f32(kv - q) whose c is the same on every diagonal, so that a
  /// diagonal's f32(kv - q) is one FADD and such a product one FFMA
  /// (diagonalAt).
  struct DiagonalTile {
    Value base, baseF, negBaseF;
    /// Per such product: c, c f32(+-base) and the difference's sign.
    struct Scaled {
      Value factor, product;
      int sign;
    };
    llvm::DenseMap<Operation *, Scaled> scaled;
  };
  DiagonalTile diagonalTile(const DiagonalValues &d, Block &block, Value base,
                            const IRMapping &args);
  /// `d`'s values where kv - q is t.base + `at`, the block's other
  /// arguments mapped as `args` maps them: a mapping of the ops' results
  /// only (to seed an element's, as emitModifier's `hoisted`). With
  /// t.baseF, f32(kv - q) is f32(base) + at (exact while |kv - q| < 2^24,
  /// else within an ulp), abs's of it |f32(base) + at| and a product
  /// c f32(kv - q) fma(c, at, c f32(base)); q - kv's likewise.
  IRMapping diagonalAt(const DiagonalValues &d, Block &block,
                       const DiagonalTile &t, int64_t at,
                       const IRMapping &args);
  /// Whether `d`'s bucket is the same on every diagonal t.base + at for
  /// at in [atLo, atHi] (i1, per thread): its values at both ends are
  /// equal, and each sign-changing abs on its way keeps one sign.
  Value bucketConstant(const DiagonalValues &d, const DiagonalTile &t,
                       int64_t atLo, int64_t atHi, const IRMapping &args);
  /// The values of `block` that depend on none of its arguments `varying`,
  /// computed here for `args` (e.g. a row's q-only values).
  IRMapping hoistUniform(Block &block, ArrayRef<unsigned> varying,
                         ValueRange args);
  /// The modifier over W lanes: `vecArgs` maps the varying block arguments
  /// to vectors; uniform values come from `uniform` (scalars, computed once
  /// outside the lane loop) and are broadcast.
  Value emitModifierVec(Block &block, const llvm::DenseMap<Value, Value> &vecArgs,
                        const llvm::DenseSet<Value> &uniformSet,
                        IRMapping &uniform, int64_t W);
  Value gatherVec(attn::GatherOp g, ArrayRef<Value> idx, int64_t W);
  /// A flash map's body (flash.rows_map, flash.scores_map: arith and math)
  /// on `args`, scalars or vectors of one width (the body's scalar
  /// constants are broadcast); `custom`, when given, may emit an op itself
  /// from its mapped operands (a null result clones it).
  Value emitMapBody(Block &body, ValueRange args,
                    function_ref<Value(Operation &, ArrayRef<Value>)> custom =
                        nullptr);
  /// Reads elements [0, n) of a K or V row starting at `row` (stride
  /// `stride`) as f32, zero where `keep` is false, and hands each to
  /// `put(d, x)`; with unit stride, 8 at a time, to `put8(d, x8)` when given
  /// (else lane by lane to `put`).
  void forTileRow(Value mem, Value row, Value stride, int64_t n, Value keep,
                  function_ref<void(Value, Value)> put,
                  function_ref<void(Value, Value)> put8 = nullptr);
  /// The GPU forms' element-wise staging of rows into shared memory, once:
  /// threads `tid` of `threads` copy `rows` rows of `width` elements; row
  /// r's element d is `read(min(r, count - 1), d)` (clamped: a read never
  /// leaves the source's rows) for r < count and 0 past it, converted to
  /// `dst`'s element type and stored at `dst[at(r, d)]`.
  void stageRows(Value dst, int64_t rows, int64_t width, Value count, Value tid,
                 int64_t threads, function_ref<Value(Value, Value)> read,
                 function_ref<Value(Value, Value)> at);
  /// The register-blocked micro-kernel of both matrix products: for rows
  /// r..r+rb and cb vectors of `vt` starting at column col0,
  ///   acc[i][j] += A[(r + i) * aStride + x] * B[x * bStride + col0 + j*W]
  /// over x in [0, depth). Returns the rb * cb accumulators (row-major).
  SmallVector<Value> outerProduct(Value A, int64_t aStride, Value B,
                                  int64_t bStride, Value r, Value col0,
                                  int64_t depth, int64_t rb, int64_t cb,
                                  VectorType vt, ValueRange init);
  /// The class of queries at positions [qlo, qhi] against key rows [klo,
  /// khi], whose positions are kvShift more (the item's first key
  /// position, null for none: added to each affine form's constant, once
  /// per item, not to the per-tile bounds).
  Value classify(Value b, Value h, Value qt, Value j, Value qlo, Value qhi,
                 Value klo, Value khi, Value kvShift, IRMapping &inv);
  /// Computes, here, every q/kv-independent value the tile classifier of a
  /// closed-form mask reads (b and h already mapped in `inv`), so that
  /// classify() finds them all computed at a point that dominates its uses.
  void materializeMaskInvariants(IRMapping &inv);

  MLIRContext *ctx_;
  ImplicitLocOpBuilder b_;
  attn::VariantOp v_;
  const MaskAnalysis &mask_;
  // A copy: forms pass configOf(kernel), a temporary.
  const FlashConfig cfg_;
  Type f32_, i32_, i64_, elem_;
  int64_t BM, BN, D, DV, VW;
  rt::VariantInfo info_;
  abi::Layout layout_;

  // Entry values of the function being built.
  Value ip_, fp_, bm_;
  SmallVector<Value> captures_;               // per param (null for scalars)
  SmallVector<SmallVector<Value>> capDims_, capStrides_;
  SmallVector<Value> scalars_;                // per param (null for tensors)
  /// The GPU forms: score_mod's and score_grad's float products may fuse
  /// with the additions they feed (one rounding, an FMA: nvcc's and
  /// Triton's default); mask_mod's arithmetic is never fused (the mask's
  /// tile classification evaluates it as written).
  bool fuseScoreProducts_ = false;
  /// The GPU forms: a gather's address is formed in bytes and loaded from
  /// the global address space (`ld.global`; gather()). The CPU form loads
  /// through the memref: x86 scales an element index in the address itself.
  bool byteAddressedGathers_ = false;
  /// The tensor-core forms, which round P (and the backward's dS) to 16
  /// bits: score_mod's and score_grad's tanh and exp and a division by a
  /// loop-invariant divisor take the multi-function unit's shorter forms,
  /// accurate to ~3e-7 absolute where P's rounding is 2^-9 to 2^-12
  /// relative (fastmath `afn`, SpecialFunctions.cpp), and their products
  /// may be reassociated (`reassoc nsz`: a chain of loop-invariant factors,
  /// softcap's scale, 1/cap and tanh's 2 log2 e, is one multiply per score).
  bool approximateScoreFunctions_ = false;
  /// The fast-math flags of a float op of score_mod or score_grad (`op`,
  /// the variant's) as the kernel is built: none on the CPU. (A division
  /// whose quotient is floored or ceiled is IEEE's whatever its flags:
  /// SpecialFunctions.cpp.)
  arith::FastMathFlags scoreFlags(Operation *op) const;
  arith::FastMathFlags scoreProductFlags() const;
};

} // namespace attnc::codegen

#endif
