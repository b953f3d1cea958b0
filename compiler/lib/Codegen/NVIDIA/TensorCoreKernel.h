//===- TensorCoreKernel.h - The tensor-core forward's builder -*- C++ -*-===//
//
// The builder shared by the mma.sync form and the sm_90a wgmma form
// (TensorCoreLayout.h says which): its state and stages. The loop, copies,
// softmax and epilogue are MmaSyncKernel.cpp's; the visited-tile search
// TensorCoreTileSearch.cpp's; the warp-specialized form's producer
// warpgroup WgmmaProducer.cpp's; its products and overlapped consumer loop
// WgmmaTileLoop.cpp's.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_CODEGEN_NVIDIA_TENSORCOREKERNEL_H
#define ATTNC_CODEGEN_NVIDIA_TENSORCOREKERNEL_H

#include "attnc/Codegen/KernelForm.h"
#include "attnc/Codegen/TileConfigTable.h"
#include "MmaFragments.h"
#include "ProgramBuilder.h"
#include "SeparableLogs.h"
#include "TensorCoreForward.h"
#include "TensorCoreLayout.h"
#include "Tma.h"
#include "Wgmma.h"

namespace attnc::codegen {

class TensorCoreKernel : public ProgramBuilder {
public:
  TensorCoreKernel(ModuleOp m, attn::VariantOp v, const MaskAnalysis &mask,
                   const FlashConfig &cfg, bool wgmma = false,
                   bool persistent = false)
      : ProgramBuilder(m, v, mask, cfg), L(tensorCoreLayout(cfg.spec, wgmma)),
        persistent_(persistent && L.producerWarps > 0) {
    // (the kernel's own choice: a variant may keep its sums as adds)
    L.sumsInAccumulator = cfg.sumsInAccumulator;
    fuseScoreProducts_ = true;
    byteAddressedGathers_ = true;
    approximateScoreFunctions_ = true;
    MT = L.mTiles;
    NT = BN / 8;
    KS = D / 16;
    DT = DV / 8;
    KP = BN / 16;
    TH = L.warps * 32;
  }
  LogicalResult lower(flash::KernelOp kernel, gpu::GPUModuleOp module);

private:
  /// This thread's query rows: m-tile mt, half k (row g or g + 8).
  /// (h, i) are kept as i32 (the epilogue widens them again): two
  /// registers per row across the KV loop instead of four.
  struct Row {
    Value live, hI32, iI32, qpos; // hI32: the model's head (offset added)
  };
  /// The loop state: O fragments [mt][dt][4], then m and l per row.
  struct State {
    SmallVector<Value> o, m, l;
  };

  // ---- index arithmetic ----
  Value divu(Value a, int64_t d) { return arith::DivUIOp::create(b_, a, cIdx(d)); }
  Value remu(Value a, int64_t d) { return arith::RemUIOp::create(b_, a, cIdx(d)); }
  Value cmp(arith::CmpIPredicate p, Value a, Value c) {
    return arith::CmpIOp::create(b_, p, a, c);
  }
  Value andI(Value a, Value c) { return arith::AndIOp::create(b_, a, c); }
  /// A 32-bit tile index or offset as an index, and back (unsigned: both
  /// are below 2^31).
  Value idxOfU32(Value x) {
    return arith::IndexCastUIOp::create(b_, b_.getIndexType(), x);
  }
  Value u32OfIdx(Value x) { return arith::IndexCastUIOp::create(b_, i32_, x); }
  /// Element index of 16-byte chunk `chunk + chunkC` of shared row `row +
  /// rowC` in a region at `base` with pitch `ld`, XOR-swizzled when
  /// `swizzle`. The constant parts (rowC a multiple of 8, chunkC even and
  /// chunk 0 or 1 when chunkC is not 0) leave the swizzle key unchanged and
  /// become one constant offset, which folds into the instruction's
  /// immediate: a warp keeps a few shared addresses live, not one per
  /// fragment.
  Value sharedIndex(Value base, int64_t ld, bool swizzle, int64_t chunks,
                    Value row, Value chunk, int64_t rowC = 0,
                    int64_t chunkC = 0, int64_t atom = 0);
  /// The shared byte address (i32) of element `at` (wgmma's descriptors).
  Value byteAddress(Value at);
  /// sharedIndex as (the part computed at run time, the constant the
  /// tile row and k-step add): for an address the constant is an
  /// instruction's immediate offset (sharedAt).
  struct SharedPlace {
    Value at;
    int64_t offset;
  };
  SharedPlace sharedPlace(Value base, int64_t ld, bool swizzle, int64_t chunks,
                          Value row, Value chunk, int64_t rowC = 0,
                          int64_t chunkC = 0, int64_t atom = 0);
  /// Shared memory seen from element `at` on, and the index of element
  /// `at + offset` in it: the address is (base + 2 at) + 2 offset, whose
  /// constant PTX and ptxas keep as an immediate (an index `at + offset`
  /// becomes `at | offset` in LLVM, an instruction per access).
  std::pair<Value, Value> sharedAt(SharedPlace p);

  // ---- fragments (the mma helpers are ProgramBuilder's) ----
  using Frag = MmaFragments::Frag;
  Frag mma(ArrayRef<Value> a, ArrayRef<Value> b, ArrayRef<Value> c) {
    return mf.mma(a, b, c);
  }
  Frag ldmatrix(Value idx, bool trans) { return mf.ldMatrix(smem, idx, trans); }
  Frag ldmatrix(SharedPlace p, bool trans) {
    auto [view, idx] = sharedAt(p);
    return mf.ldMatrix(view, idx, trans);
  }
  Value shfl(Value x, int64_t off) { return mf.shflXor(x, off); }
  Value packF32Pair(Value x0, Value x1) { return mf.packF32Pair(x0, x1); }
  Value ex2(Value x);

  // ---- stages of the kernel ----
  void computeRows();
  void loadQ();
  Frag qFragment(int64_t mt, int64_t ks);
  /// Q's fragments negated where the scale is negative (load_query
  /// signed_by_scale): a sign-bit xor of every element, once per item.
  void signQ();
  /// The same for Q in shared memory (the wgmma form), once it has landed:
  /// every element's sign bit flipped where the scale is negative.
  void signSharedQ();
  bool qSigned = false;
  /// Tile j's K and V rows into the stage at element `base` by the
  /// `threads` threads numbered from `thread` (default: the CTA's TH
  /// threads by tid).
  void loadTile(Value j, Value base, Value thread = {}, int64_t threads = 0);
  /// A thread's share of a tile's contiguous 16-byte copies, fixed for the
  /// kernel: per copy, its row, its element offset in the stage and in the
  /// tile's first row of K or V, and (where the copies do not divide evenly
  /// over the threads) whether the thread has it. When the threads cover
  /// whole rows a multiple of 8 at a time (every head dimension the table
  /// has), copy i is copy 0 moved down i * rowStep rows: same chunk, same
  /// swizzle, so the plan keeps copy 0 alone and each copy adds a constant
  /// in shared memory and a multiple of the row stride in global (register
  /// pressure: one offset pair, not one per copy).
  struct CopyPlan {
    int64_t count = 0, rowStep = 0, ld = 0;
    Value stepGlobal; // rowStep rows of global memory, when rowStep
    Value tileStride; // BN rows of global memory
    Value first;      // the item's tile 0: copy 0's element (strided plans)
                      // or the item's first (the others add `global`)
    SmallVector<Value> row, shared, global, has;
  };
  void planCopies();
  /// The unrolled copies of a contiguous tile at `j` (i32) into the stage
  /// at `base`: straight-line, no page arithmetic; rows past the sequence
  /// are zero-filled only on the tile that has them.
  void copyContiguous(Value j, Value base);
  /// The item's tiles with no row past the sequence (i32).
  Value fullTiles;
  // ---- the wgmma form's warp roles and TMA loads (Tma.h) ----
  /// The producer warpgroup (threads TH..TH+127): lowers its register
  /// budget, then walks the item's visited tiles as the consumers do and
  /// fills stage after stage once the consumers have released it (its
  /// `empty` mbarrier): two TMA boxes issued by one lane where the call's
  /// maps are usable, else every producer thread's cp.async copies,
  /// completed on the stage's `full` mbarrier.
  void produce(ArrayRef<Value> maps);
  /// What every warp reads of the call before any role: the problem's
  /// values, the work item, the copies' case, the mask's invariants; the
  /// wgmma form's tensor maps (their generic addresses) as the result.
  SmallVector<Value> readCall(gpu::GPUFuncOp fn);
  /// Work item `item`'s values (ProgramBuilder::Item), the mask's
  /// invariants of its (b, h) and its KV split's end; the mma.sync form's
  /// rows of it too (the warp-specialized consumers compute theirs).
  void beginItem(Value item);
  /// beginItem's two parts: the item's values (and the mma.sync form's
  /// rows); the mask's invariants and the split's end.
  void decodeBlockItem(Value item);
  void itemInvariants();
  /// The call's values (Entry) and readCopyCase's.
  void readProblem();
  /// The copies' case (fastQ, fastKV, fastO, paged, contiguous) and, for
  /// wgmma, whether the maps serve (useTma).
  void readCopyCase();
  gpu::GPUFuncOp fn_;
  /// The launch's first item plus blockIdx.x: the block's item, or the
  /// first of the persistent form's.
  Value firstItem;
  /// The warp-specialized form made persistent (the form
  /// `wgmma-persistent`): a grid of at most one block
  /// per SM (the runtime's choice, LaunchFacts::persistent), each block
  /// taking items firstItem, + gridDim.x, ... below the call's count. The
  /// stages' ring goes on from one item to the next (ringStage,
  /// ringPhases), so the producer fills stages with the next item's tiles
  /// while the consumers finish this one's. `body` is built once, after
  /// beginItem, with the ring's state of the item's start in ringStage and
  /// ringPhases, and leaves the state of its end there. Correct at any
  /// grid: with one block per item each block takes one.
  void forEachItem(function_ref<void()> body);
  /// The call's work items: B x (Hq / P) x Q tiles x KV splits.
  Value itemCount();
  /// The ring's state (wgmma): the next tile's stage index and the stages'
  /// mbarrier parities, a bit each (the consumers': `full`; the
  /// producer's: `empty`). Zero at a block's first item.
  Value ringStage, ringPhases;
  /// The producer's loop: by TMA (one lane; `pages`: the boxes' rows from
  /// the page table) or by every producer thread's cp.async.
  void produceTiles(bool byTma, ArrayRef<Value> maps, bool pages);
  /// After the stage's TMA loads landed: rows past the sequence of tile j
  /// (rows of other heads, or zeros past the tensor) set to zero, as
  /// cp.async's zero-fill leaves them.
  void zeroTail(Value j, Value base);
  Value useTma;   // i1: the maps are usable and K/V contiguous
  Value mbarBase; // the stages' `full` mbarriers, then their `empty` ones
                  // (shared address, i32)
  Value fullBar(Value stageIdx) {
    return arith::AddIOp::create(b_, mbarBase,
                                 arith::MulIOp::create(b_, stageIdx, cI32(8)));
  }
  Value emptyBar(Value stageIdx) {
    return arith::AddIOp::create(b_, fullBar(stageIdx), cI32(8 * L.stages));
  }
  /// The hardware barriers of the warp-specialized form: the CTA's (0,
  /// before the roles part), the consumers' own, the producers' own (its
  /// cp.async fallback), and the first of the two consumer warpgroups'
  /// turns (kTurnBarrier + w).
  static constexpr int64_t kConsumerBarrier = 1, kProducerBarrier = 2,
                           kTurnBarrier = 3;
  /// The consumers' own barrier over their TH threads: the producer never
  /// takes part in it.
  void consumerBarrier() { tma.namedBarrier(kConsumerBarrier, TH); }
  /// Ping-pong of two consumer warpgroups (FlashAttention-3's warp
  /// scheduler barriers): each issues its products only in its turn and
  /// passes the turn once they are issued, so that one warpgroup's softmax
  /// runs while the other's products occupy the tensor cores. Warpgroup w
  /// waits on barrier kTurnBarrier + w (its 128 threads and the other's 128
  /// arriving);
  /// the second warpgroup hands the first its first turn before the loop,
  /// and the first takes back the one turn left over after it.
  bool pingPong() const { return L.producerWarps && L.warps == 8; }
  Value firstWarpgroup;   // i1: a consumer warp of warpgroup 0
  Value warpgroupIdx;     // the consumer warp's warpgroup (uniform register)
  Value myTurn, theirTurn; // i32: barrier kTurnBarrier + w and the other's
  void awaitTurn() {
    if (pingPong())
      tma.namedBarrier(myTurn, TH);
  }
  void passTurn() {
    if (pingPong())
      tma.namedArrive(theirTurn, TH);
  }
  TmaEmitter tma{b_};
  /// The first tile from `from` on that the item visits, or nKT (i32:
  /// tile indices and their loop stay 32-bit), and its class (i8).
  std::pair<Value, Value> nextVisited(Value from, Value nKT, IRMapping &inv);
  /// The same for a data-dependent mask, 32 tiles per step of the warp.
  std::pair<Value, Value> nextVisitedByWarp(Value from, Value nKT,
                                            IRMapping &inv);
  /// Tile j's class from the block mask where `inRange` (j < nKT), else
  /// empty (the mask has no entry past nKT).
  Value blockMaskClass(Value j, Value inRange, IRMapping &inv) {
    Value empty = arith::ConstantOp::create(b_, b_.getI8IntegerAttr(abi::kEmpty));
    return ifYield(inRange, ValueRange{empty}, [&] {
      return SmallVector<Value>{
          tileAt(it, arith::IndexCastUIOp::create(b_, b_.getIndexType(), j), inv)
              .cls};
    })[0];
  }
  /// The stage after stage index `s` (i32), round the ring.
  Value nextStage(Value s) {
    return select(cmp(arith::CmpIPredicate::eq, s, cI32(L.stages - 1)), cI32(0),
                  arith::AddIOp::create(b_, s, cI32(1)));
  }
  /// Stage index `s`'s first element (index).
  Value stageAt(Value s) {
    return idxOfU32(arith::MulIOp::create(b_, s, cI32(L.stageElems)));
  }
  /// The consumers' start (wgmma): Q landed and visible to the async
  /// proxy for every consumer, signed where the scale is negative; the
  /// first turn handed over.
  void consumersStart();
  /// The consumers wait for stage `s`'s `full` phase (parity bit s of
  /// `phases`) and zero tile j's rows past the sequence where TMA brought
  /// them; the phases after it.
  Value awaitStage(Value j32, Value s, Value phases);
  /// A consumer warp is done with stage `s`: its `empty` arrival.
  void releaseStage(Value s);
  // ---- the wgmma form's products (WgmmaTileLoop.cpp) ----
  /// S = Q K^T for the warpgroup's rows from the stage at element kBase, in
  /// the warpgroup's turn; with a pending P V (the overlap) that one is
  /// issued in the same turn as a second group and only S waited for.
  SmallVector<Value> wgmmaScores(Value kBase);
  /// O += P V (P as pvOperands) from the stage at element vBase (the V
  /// rows), in the warpgroup's turn, waited for.
  SmallVector<Value> wgmmaPv(ArrayRef<Value> aRegs, ArrayRef<Value> o,
                             Value vBase);
  /// P's registers as wgmma's A operand: per 16 keys four packed pairs
  /// (i32), in order.
  SmallVector<Value> pvOperands(ArrayRef<Value> P);
  /// V's descriptors per 16 keys for the stage's V at element vBase, then
  /// (sumsInAccumulator) the ones' descriptor.
  SmallVector<Value> pvDescriptors(Value vBase);
  /// The shared address (i32) of the sums' ones (TensorCoreLayout), and
  /// their writing by the consumers (consumersStart).
  Value onesAddress();
  void writeOnes();
  /// Issues O += P V (A: pvOperands) on descriptors `descs`, unwaited.
  SmallVector<Value> issuePv(ArrayRef<Value> aRegs, ArrayRef<Value> o,
                             ArrayRef<Value> descs);
  /// The overlapped loop (L.overlap): tile j's front (everything up to the
  /// accumulate) with tile j-1's P V in flight; the accumulate of the
  /// last tile after it. Null when the body is not in that form.
  LogicalResult lowerOverlappedLoop(flash::ForTilesOp loop,
                                    flash::AccumulateOp acc, unsigned accPos);
  /// Whether the overlap's registers fit beside the score_mod's: the
  /// overlap holds O (Dv / 2 f32 per thread) and P (block_n / 4 packed) in
  /// flight beside S (block_n / 2); a score_mod that gathers at an index
  /// that depends on the key adds loads and their values per element. The
  /// static model measured those (synaptic, relative_bias) at Dv = 128
  /// spilling 12-48 local-memory instructions per tile with the overlap
  /// and none without: they keep the three stages, their products waited
  /// for one after the other.
  bool overlapFits();
  /// The body's accumulate and the position of its accumulator among the
  /// loop's values when the loop can be overlapped: the accumulate is the
  /// last op, its result only yielded, and the accumulator it adds to is
  /// the loop's own, rescaled (flash.scale_acc) after the scores' product
  /// and read by nothing else.
  std::optional<std::pair<flash::AccumulateOp, unsigned>>
  overlappable(flash::ForTilesOp loop);
  /// The P V a tile's front issues with its S (the overlapped loop): the
  /// accumulator (in flight once issued), P's packed registers (held until
  /// the wait), the stage of V, and the loop's accumulator argument, whose
  /// rescale waits for it and releases the stage.
  struct PendingPv {
    SmallVector<Value> acc, aRegs;
    Value stage, accArg;
  };
  std::optional<PendingPv> pendingPv;
  /// A loop over the item's visited tiles: an scf.while from `init`, whose
  /// first value is the tile index (i32), while it is below `nKT32`. The
  /// builder is left in the loop's body (the caller's insertion guard
  /// restores it); the body's arguments are returned.
  std::pair<scf::WhileOp, ValueRange> tileLoop(ValueRange init, Value nKT32) {
    SmallVector<Type> types = llvm::to_vector(init.getTypes());
    auto w = scf::WhileOp::create(b_, types, init);
    SmallVector<Location> locs(types.size(), b_.getLoc());
    Block *before = b_.createBlock(&w.getBefore(), {}, types, locs);
    scf::ConditionOp::create(
        b_, cmp(arith::CmpIPredicate::ult, before->getArgument(0), nKT32),
        before->getArguments());
    Block *after = b_.createBlock(&w.getAfter(), {}, types, locs);
    return {w, after->getArguments()};
  }
  /// j + 1 for an i32 tile index below nKT (no wrap).
  Value nextTile(Value j) {
    return arith::AddIOp::create(b_, j, cI32(1),
                                 arith::IntegerOverflowFlags::nuw |
                                     arith::IntegerOverflowFlags::nsw);
  }
  /// The flash ops of a kernel body, in order.
  LogicalResult lowerOps(Block::iterator from, Block::iterator to);
  LogicalResult lowerOp(Operation &op);
  /// lowerOp's ops on a tile's registers and on per-row values; nothing
  /// for other ops.
  std::optional<LogicalResult> lowerTileOp(Operation &op);
  /// score_mod(S x scale) of the tile's elements (S: its accumulator
  /// fragments, kvpos: the thread's key columns' positions, 2 per n-tile),
  /// its values of (b, h, q) once per row and, with hoistColumns_, those of
  /// (b, h, kv) once per key column.
  /// Scores held as x whose values are alpha x + beta, alpha > 0 the same
  /// for the warp and beta one per row of the thread: where score_mod is
  /// s + g with g the same on every diagonal of a tile (an additive
  /// bucketed modifier past its last bucket: relative_bias), the tile
  /// keeps S x scale's products and the row maxima and exponents take
  /// alpha and beta per row (max is monotone: alpha max(x) + beta; the
  /// exponent's FMA takes x alpha c + (beta - m) c), not an add per score.
  struct AffineScores {
    Value alpha;
    SmallVector<Value> beta;
  };
  DenseMap<Value, AffineScores> affine_;
  /// modifiedScores' result: the scores, affine where `affine` is set.
  struct ModifiedScores {
    SmallVector<Value> scores;
    std::optional<AffineScores> affine;
  };
  ModifiedScores modifiedScores(ArrayRef<Value> S, ArrayRef<Value> kvpos);
  /// modifiedScores' element code, with score_mod's separable logarithms
  /// per row and column (`separated`) or per element.
  ModifiedScores modifiedScoresOf(ArrayRef<Value> S, ArrayRef<Value> kvpos,
                                  bool separated, ArrayRef<IRMapping> columns);
  /// score_mod's values of (b, h, kv) per key column of the thread (with
  /// the item's head: the loop's version for one head per item).
  SmallVector<IRMapping> columnValues(ArrayRef<Value> kvpos);
  /// score_mod's separable logs (SeparableLogs.h). Where hoistColumns_,
  /// such a log costs a lg2 per row and per key column of the thread and
  /// an FMA per score: in the tile's version taken where every x of the
  /// warp's rows (rowLogsValid_, once per item) and y of its columns is in
  /// range (modifiedScores); otherwise per score.
  std::optional<SmallVector<SeparableLog>> separable_;
  Value rowLogsValid_; // i1: this thread's rows' x are in range
  Value lg2(Value x) { return lg2Flushing(b_, b_.getLoc(), x); }
  /// score_mod's g where it is s + g (or g + s) and g reads neither the
  /// score nor the key but through diagonal values (diagonals_.ops): in a
  /// tile where those are constant, g is one value per row. Null where
  /// score_mod is not such.
  Value additiveOfDiagonals();
  /// The values of the scores `v` (alpha x + beta where affine_ has it).
  SmallVector<Value> scoreValues(Value v);
  /// Whether score_mod has values of the key that are not the row's (a
  /// gathered key factor), and whether they read the head.
  enum class ColumnValues { None, OfKey, OfKeyAndHead };
  ColumnValues scoreColumnValues();
  /// Whether the tile loop being built computes score_mod's key values
  /// once per column: where they do not read h, or in the loop's version
  /// for items of one query head (P = 1), whose rows all have the item's.
  bool hoistColumns_ = false;
  /// score_mod's diagonal values: those of (b, h) and one difference of
  /// positions, kv - q or q - kv (alibi's f32(kv - q) x slope[h],
  /// relative_bias's bias[h, min(abs(q - kv), 255)]), in block order; the
  /// differences themselves first. Empty where only differences are.
  DiagonalValues diagonals_; // score_mod's (lowerTileLoops)
  /// Whether the tile loop being built computes the diagonal values once
  /// per diagonal of the thread's fragment (kv - q is the same at element
  /// (r, k) and (r + 1, k + 2): 34 distinct of 64 at 64x128, 18 of 32 at
  /// 64x64): in the loop's version for items of one query head (P = 1),
  /// where a row's position is the item's first plus its index.
  bool shareDiagonals_ = false;
  std::optional<LogicalResult> lowerProductOp(Operation &op);
  std::optional<LogicalResult> lowerRowOp(Operation &op);
  /// The pipelined loop over visited tiles (flash.for_tiles).
  /// The tile loop, in two versions where score_mod's key values read h
  /// (hoistColumns_) or it has diagonal values (shareDiagonals_).
  LogicalResult lowerTileLoops(flash::ForTilesOp loop);
  LogicalResult lowerTileLoop(flash::ForTilesOp loop);
  /// The probabilities' map, exp2((s - m) c) with a score s, the rows' m
  /// and c the rows' values or a constant: c per row of the thread, or
  /// nothing when the map is not that.
  std::optional<SmallVector<Value>> exp2OfDifferenceFactor(flash::ScoresMapOp m);
  /// exp2((s - m) c) per score, as one FMA, s c - m c, where every row of
  /// the warp has |m c| < 2^10 (m c's rounding then moves an exponent by
  /// at most 2^-14: a relative 4e-5 in a probability that f16/bf16 round
  /// to 5e-4 or 4e-3), else as the map states it (exact at any |m|: a row
  /// of scores near -1e30 needs it).
  SmallVector<Value> probabilities(flash::ScoresMapOp m, ArrayRef<Value> c);
  /// A map body per register: exp2 on the special-function unit.
  Value mapBody(Block &body, ValueRange args);
  void storeOutput(flash::StoreOutputOp op);

  /// Per flash value: a thread's registers (tiles: element (mt, nt, c) at
  /// (mt * NT + nt) * 4 + c; accumulators: (mt * DT + dt) * 4 + c; per-row
  /// values: one per row mt * 2 + k).
  DenseMap<Value, SmallVector<Value>> regs;
  IRMapping inv;
  Value nKT;
  Tile tile;
  Value stageBase;

  TensorCoreLayout L;
  const bool persistent_; // forEachItem: each block takes items a grid apart
  MmaFragments mf{b_, elem_};
  int64_t MT, NT, KS, DT, KP, TH;
  Entry e;
  Item it;
  Value smem, smemBytes, tid, lane, warp, g, tig, mat, r8, zeroE;
  Value smemAddr; // the aligned base's shared address (wgmma), i32
  WgmmaEmitter wg{b_};
  Value fastQ, fastKV, fastO, paged, contiguous;
  CopyPlan planK, planV;
  SmallVector<Row> rows;                 // [mt * 2 + k]
  SmallVector<IRMapping> scoreRow, maskRow;
  SmallVector<SmallVector<Frag>> qf;     // [mt][ks] when in registers
};

} // namespace attnc::codegen

#endif
