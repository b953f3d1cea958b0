//===- MmaSyncBackward.h - The tensor-core GPU backward's builder ---------===//
//
// TensorCoreBackward builds the tensor-core form of the GPU backward
// (MmaSyncBackwardKernel.cpp says how it works): its shared staging and
// fragment helpers and `_bwd_q` are defined there, `_bwd_kv` in
// MmaSyncBackwardKeyValue.cpp, what the pair terms read computed ahead
// (diagonal and side values, logs, keep flags) and the gradient sums in
// MmaSyncBackwardPairs.cpp.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_CODEGEN_NVIDIA_MMASYNCBACKWARD_H
#define ATTNC_CODEGEN_NVIDIA_MMASYNCBACKWARD_H

#include "GpuBackwardBuilder.h"
#include "MmaFragments.h"
#include "SeparableLogs.h"

#include <map>

namespace attnc::codegen {

class TensorCoreBackward : public GpuBackwardBuilder {
public:
  TensorCoreBackward(ModuleOp m, attn::VariantOp v, const MaskAnalysis &mask,
                     const FlashConfig &cfg)
      : GpuBackwardBuilder(m, v, mask, cfg), R(cfg.spec.blockM), TH(2 * R),
        C(16), ldQ(D + 8), ldO(DV + 8),
        stages_(cfg.spec.stages >= 2 ? 2 : 1) {
    // dK and dQ take `scale` once per element at their store.
    unscaledDx_ = true;
  }

  LogicalResult lowerQueryGrads(flash::KernelOp kernel, gpu::GPUModuleOp module);
  LogicalResult lowerKeyValueGrads(flash::KernelOp kernel,
                                   gpu::GPUModuleOp module);

private:
  using Frag = MmaFragments::Frag;
  using Frags = SmallVector<Frag>;
  Frag mmaSync(ArrayRef<Value> a, ArrayRef<Value> b, ArrayRef<Value> c) {
    return mf.mma(a, b, c);
  }
  Frag ldMatrix(Value buf, Value idx, bool trans) {
    return mf.ldMatrix(buf, idx, trans);
  }
  Value packF32Pair(Value x0, Value x1) { return mf.packF32Pair(x0, x1); }
  MmaFragments mf{b_, elem_};
  /// score_grad's accumulates summed in registers (_bwd_kv): those of the
  /// item (one sum per thread) and of a key (two per thread: its keys g and
  /// g + 8), slots of `sums_` (private memory LLVM keeps in registers),
  /// added to the gradient buffer once per query head of the group after a
  /// warp's (quad's) shuffle reduction. A query's (kinds_.rows: this
  /// kernel's columns, spread over the warps) and kinds_.pairs add per pair.
  AccumulateKinds kinds_;
  Value sums_;
  int64_t keySlot(size_t i, int64_t k) const {
    return int64_t(kinds_.item.size()) + 2 * int64_t(i) + k;
  }
  /// Zeroes the sums (before a query head's tiles).
  void zeroSums();
  /// The sums of query head h into the gradient buffer: an item's by lane 0
  /// of each warp, a key's by the first lane of its quad (live keys only).
  void addSums(Value bI32, Value hI32, ArrayRef<Value> kv,
               ArrayRef<Value> keyLive);
  /// _bwd_q's sums of a query's accumulates (two slots each: the thread's
  /// rows g and g + 8) into the gradient buffer, by the first lane of the
  /// row's quad (live rows only).
  void addRowSums(ArrayRef<attn::AccumulateOp> accs, Value sums, Value bI32,
                  ArrayRef<Value> hI32, ArrayRef<Value> qpos,
                  ArrayRef<Value> live);
  /// The entry with its two buffers (the four tiles; LSE, delta and LSE
  /// log2 e per row) and the lane decomposition.
  gpu::GPUFuncOp begin(gpu::GPUModuleOp module, StringRef name, Entry &e,
                       Extra &x, int64_t tilePairs = 2, int64_t rowStages = 1);
  /// The block copies `count` rows of `width` elements into the tile at
  /// `base` (pitch ld): row r is at(r, d); rows [count, R) are zero.
  void stage(int64_t base, int64_t ld, int64_t width, Value count,
             function_ref<Value(Value, Value)> at, Value baseOff = {});
  /// Where a tile's rows are in a tensor: row r starts at start(r); with
  /// `stride`, at first + r * stride (affine: each of a thread's copies
  /// after its first adds a constant to the address).
  struct RowPlace {
    function_ref<Value(Value)> start;
    Value first, stride;
  };
  /// The same copy of rows from `src`, element d of row r at
  /// rows.start(r) + d * dStride: with `vectors` (rowsInVectors, a run-time
  /// value) as 16-byte cp.async, the thread's share unrolled and rows past
  /// `count` zero-filled without a read (their address is formed, not
  /// read); else by `stage`. awaitTiles waits for the copies. `baseOff`
  /// (index, where given) moves the tile: a stage of a ring.
  void stageTile(int64_t base, int64_t ld, int64_t width, Value count,
                 Value src, Value dStride, Value vectors, const RowPlace &rows,
                 Value baseOff = {});
  /// Commits this thread's copies and waits for all of them (before the
  /// barrier that publishes the tiles).
  void awaitTiles() {
    NVVM::CpAsyncCommitGroupOp::create(b_);
    NVVM::CpAsyncWaitGroupOp::create(b_, 0);
  }
  /// A Q tile's Q and dO rows into the tiles at qS and oS (`rowOffset(st,
  /// r)`: row r's offset in q or dO, whose strides are st; `affine`: it is
  /// rowOffset(st, 0) + r * st[2]), and its rows' LSE and delta
  /// (`lseDelta(r)`, for r < rows) into fs: -inf and 0 past the end, and
  /// after them LSE log2 e (the exponent's FMA, probability). The LSE and
  /// delta loads take a thread per row.
  /// `off` and `fsOff` (index, where given) move the tiles and the rows'
  /// values: a stage of _bwd_kv's ring.
  void stageQueryTile(const Entry &e, int64_t qS, int64_t oS, Value rows,
                      function_ref<Value(ArrayRef<Value>, Value)> rowOffset,
                      function_ref<std::pair<Value, Value>(Value)> lseDelta,
                      bool affine, Value off = {}, Value fsOff = {});
  /// The warp's 16 rows of the tile at `aBase` times the columns of the
  /// tile at `bBase` (both [rows][k], k = 16 kSteps): n / 8 accumulators.
  /// `bOff` (index, where given) is added to bBase: a ring's stage.
  Frags rowsByCols(int64_t aBase, int64_t lda, int64_t kSteps, int64_t bBase,
                   int64_t ldb, int64_t n, Value bOff = {});
  /// acc += X B: X the warp's [16][kCols] f32 accumulators (rounded to the
  /// element type), B the tile at `bBase` ([kCols][n], by ldmatrix.trans).
  void accumulate(Frags &acc, ArrayRef<Value> x, int64_t kCols, int64_t bBase,
                  int64_t ldb, int64_t n, Value bOff = {});
  /// _bwd_kv's work on the Q tile's rows [c0, c0 + C) (staged): the
  /// warp's keys get S^T and dP^T, P and dX per element, then dV += P^T dO
  /// and dK += dX^T Q. The pair terms have two versions, chosen by `exact`
  /// (exactTile): without the flags of kept pairs, and with them. (_bwd_q
  /// versions its whole tile body; here, with dK and dV filling the
  /// registers, two versions of the body spilled in the loop at D = 128.)
  void keyValueChunk(const PairSection &sec, const Entry &e, const Item &it,
                     const Tile &t, Value exact, int64_t c0,
                     ArrayRef<Value> keyLive, ArrayRef<Value> kv, Value bI32,
                     Value hI32, Frags &dk, Frags &dv);
  /// Whether the tile is exact: full (the mask skipped), every key and all
  /// R rows in range, so that every pair is kept and every row's LSE is
  /// finite (the row has the tile's keys). Its pairs need no flag: the
  /// kernels run such tiles in a version without them.
  Value exactTile(const Tile &t, Value rows) {
    return arith::AndIOp::create(
        b_, t.skipMask,
        arith::CmpIOp::create(b_, arith::CmpIPredicate::eq, rows, cIdx(R)));
  }
  /// The keep flags of the thread's elements (row k = c / 2, column 8 nt +
  /// 2 tig + c % 2): `base` where the tile skips the mask, else `base` and
  /// mask_mod(b, h, qpos(elem), kv(elem)).
  SmallVector<Value> keepFlags(const Tile &t, ArrayRef<Value> base,
                               function_ref<std::pair<Value, Value>(int64_t)>
                                   posAndKey,
                               Value bI32, Value hI32);
  /// The column (within the tile) of element `at` of the accumulators
  /// of the column chunk starting at `c0`.
  Value colOf(int64_t c0, int64_t at) {
    return add(tig2, cIdx(c0 + 8 * (at / 4) + (at & 1)));
  }
  SmallVector<Value> flatten(const Frags &f) {
    SmallVector<Value> out;
    for (const Frag &x : f)
      out.append(x.begin(), x.end());
    return out;
  }
  Frags unflatten(ValueRange v) {
    Frags out;
    for (size_t i = 0; i < v.size(); i += 4)
      out.push_back(Frag(v.begin() + i, v.begin() + i + 4));
    return out;
  }
  /// Stores the warp's rows of `acc` (times `factor` where given) for the
  /// thread's rows k whose live[k].
  void storeRows(const Frags &acc, Value dst, ArrayRef<Value> strides,
                 function_ref<Value(int64_t)> rowOffset, ArrayRef<Value> live,
                 Value factor = {});

  // R rows per tile; TH threads; C columns per chunk; tile pitches.
  int64_t R, TH, C, ldQ, ldO;
  /// Where the four tiles start in shared memory (elements): _bwd_q
  /// stages Q and dO first, _bwd_kv K and V; Q and K have pitch ldQ, dO
  /// and V ldO.
  struct TileLayout {
    int64_t q, dO, k, v;
  };
  TileLayout queryLayout() const {
    return {0, R * ldQ, R * (ldQ + ldO), R * (2 * ldQ + ldO)};
  }
  TileLayout keyValueLayout() const {
    return {R * (ldQ + ldO), R * (2 * ldQ + ldO), 0, R * ldQ};
  }
  /// _bwd_q's K and V ring: with two stages (spec.stages), stage s's K and
  /// V tiles sit s x this many elements after queryLayout's, past dO.
  int64_t keyValueStage() const { return R * (ldQ + ldO); }
  /// The ring's stages (spec.stages): _bwd_q's K and V, _bwd_kv's Q, dO
  /// and their rows' values; 1 or 2.
  const int64_t stages_;
  /// _bwd_kv's current Q tile's stage: its Q and dO tiles' offset past
  /// stage 0's (elements) and its rows' values' offset in fs; null with
  /// one stage.
  Value qoOff_, fsOff_;
  Value fsAt(Value i) { return fsOff_ ? add(fsOff_, i) : i; }
  Value smem, fs, tid, laneId, warp, g, tig2, zeroE;
  /// The diagonal values of score_mod and score_grad (diagonalValues), 18
  /// distinct kv - q of a tile's 32 elements at R = 64. _bwd_kv: at the
  /// thread's element (key g + 8k, query column c0 + 8 nt + 2 tig + at % 2
  /// of the Q tile) kv - q is diagBase_ + 8k - c0 - 8 nt - at % 2; each
  /// one's values are computed at its first use, before its chunk's two
  /// versions, and serve both (and the next chunk, which shares two of
  /// them). _bwd_q: at (query g + 8k, key column c0 + 8 nt + 2 tig + at %
  /// 2) it is diagBase_ + c0 + 8 nt + at % 2 - 8k, computed in the tile's
  /// exact version (its flagged one computes each pair's).
  DiagonalValues scoreDiag_, gradDiag_;
  /// Whether a kernel shares them (diagonalsShared), and for a tile its
  /// values from the thread's first element's kv - q, `base`
  /// (beginTileDiagonals: diagBase_ and the tile's conversions).
  bool diagonalsShared();
  void beginTileDiagonals(Value base, Value bI32, Value hI32);
  /// score_mod's and score_grad's diagonal values at kv - q = diagBase_ +
  /// off, computed at their first use (diagAt_ holds them until cleared).
  std::pair<IRMapping, IRMapping> &tileDiagonal(int64_t off);
  Value diagBase_;
  DiagonalTile scoreTile_, gradTile_; // the tile's (diagonalTile)
  /// score_mod's and score_grad's values of one side of a pair, computed
  /// once for the pairs that share it: a query's (of b, h, q: synaptic's
  /// qamp[b, h, q] and 1/qamp) or a key's (of b, h, kv). _bwd_kv holds its
  /// keys' for a query head's tiles and computes a chunk's queries'; _bwd_q
  /// holds its rows' for the item and computes a chunk's keys'. Where no
  /// block has a value of that side alone (hoistsQueries_, hoistsKeys_,
  /// from beginSides), nothing is computed ahead and the pairs' code is as
  /// it was.
  struct SideValues {
    IRMapping score, grad;
  };
  void beginSides();
  SideValues queryValues(Value bI32, Value hI32, Value qpos);
  SideValues keyValues(Value bI32, Value hI32, Value kv);
  /// Points pairScoreDiagonal_ and pairGradDiagonal_ at the pair's values
  /// computed ahead: its query's, its key's that vary with the key, and
  /// its diagonal's (where given); null where there are none.
  /// `logs` (where given): the pair's separable logs (SeparableLogs.h),
  /// one per separable_.
  void bindPair(const SideValues *query, const SideValues *key,
                const std::pair<IRMapping, IRMapping> *diagonal,
                ArrayRef<Value> logs = {});
  /// score_mod's separable logs (beginSides) and, for a side's values,
  /// whether its factors are in range (an i1 per side) and their terms:
  /// a query's rowSign ln x, a key's lg2 y, one per log.
  SmallVector<SeparableLog> separable_;
  Value logsInRange(const SideValues &side, bool query);
  SmallVector<Value> logTerms(const SideValues &side, bool query);
  /// The pair's logs from its query's and key's terms.
  SmallVector<Value> pairLogs(ArrayRef<Value> queryTerms,
                              ArrayRef<Value> keyTerms);
  void unbindPair() { pairScoreDiagonal_ = pairGradDiagonal_ = nullptr; }
  bool hoistsQueries_ = false, hoistsKeys_ = false;
  llvm::DenseSet<Value> scoreOfQuery_, gradOfQuery_;
  IRMapping pairScore_, pairGrad_;
  SmallVector<SideValues> keySide_; // _bwd_kv: its keys' (per query head)
  SmallVector<SmallVector<Value>> keyLogTerms_; // and their lg2 y
  Value keyLogsInRange_;
  IRMapping diagScoreArgs_, diagGradArgs_;
  std::map<int64_t, std::pair<IRMapping, IRMapping>> diagAt_;
  // Whether Q and dO, and K and V, take 16-byte copies (stageTile).
  Value vectorsQO, vectorsKV;
  // The lane's (row, column) in the A, B and B.trans fragments (begin()).
  Value aLane, aCol, bLane, bCol, tLane;
};

} // namespace attnc::codegen

#endif // ATTNC_CODEGEN_NVIDIA_MMASYNCBACKWARD_H
