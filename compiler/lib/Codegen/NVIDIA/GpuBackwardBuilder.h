//===- GpuBackwardBuilder.h - What the GPU backward's forms share ----------===//
//
// The GPU backward is two gpu.funcs, FlashAttention-2's split so that dQ,
// dK and dV rows each have one writer: `_bwd_q` (delta and dQ, items (b,
// head, Q tile)) runs first, then `_bwd_kv` (dK, dV and the parameters'
// gradients by atomic adds, items (b, KV head, KV tile)). Two forms build
// them: SIMT (SimtBackwardKernel.cpp, a thread per row or key) and mma.sync
// (MmaSyncBackwardKernel.cpp, f16/bf16 on tensor cores, a warp per 16 rows
// or keys). This is their entry, work items and shared epilogues
// (GpuBackwardBuilder.cpp).
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_CODEGEN_GPUBACKWARDBUILDER_H
#define ATTNC_CODEGEN_GPUBACKWARDBUILDER_H

#include "BackwardBuilder.h"

namespace attnc::codegen {

/// The bytes of dynamic shared memory createEntry lays `shared` out in:
/// each buffer at the next 16-byte aligned offset.
int64_t dynamicSharedBytes(ArrayRef<std::pair<int64_t, int64_t>> countAndBytes);

/// The pair section of a GPU backward kernel of `kind` (bwd_q: a loop over
/// KV tiles accumulating dQ; bwd_kv: a loop over query tiles accumulating
/// dK and dV), its other ops checked: an op the GPU forms do not lower is
/// an error.
FailureOr<PairSection> backwardSection(flash::KernelOp kernel, StringRef kind);

class GpuBackwardBuilder : public BackwardBuilder {
public:
  GpuBackwardBuilder(ModuleOp m, attn::VariantOp v, const MaskAnalysis &mask,
                     const FlashConfig &cfg)
      : BackwardBuilder(m, v, mask, cfg) {
    fuseScoreProducts_ = true;
    byteAddressedGathers_ = true;
    approximateScoreFunctions_ = cfg.spec.dtype != rt::DType::F32;
  }

protected:
  /// P = 2^((sm - lse) log2 e) on ex2.approx.ftz: a P below 2^-126 is 0,
  /// where the IEEE ex2 costs a compare and two predicated multiplies per
  /// pair; without a score_mod, sm - lse is one FMA, s scale - lse. Where
  /// lseLog2e_ is set (the pair's row's lse log2 e, on a tile whose warp
  /// vote found every such |value| below 2^10), the exponent is one FMA,
  /// sm log2 e - lse log2 e (s (scale log2 e) - lse log2 e without a
  /// score_mod): lse log2 e's rounding grows with |lse|, and the bound
  /// keeps it within 2^-14, the forward's "exponent's price"
  /// (docs/kernels.md).
  Value probability(const Entry &e, Value s, Value sm, Value lse) override;
  /// Whether every lane's `l` (rows' lse log2 e) is below 2^10 in
  /// magnitude: one warp vote (the same for every lane).
  Value smallExponents(ArrayRef<Value> l);
  Value lseLog2e_;

  /// The backward operands after the forward's, and the strides the
  /// backward's ip slots hold.
  struct Extra {
    Value fwdO, dLse, delta, dq, dk, dv, grads, first;
    SmallVector<Value> os, dls, dqs, dks, dvs;
    Value hasDLse;
  };
  /// A workgroup buffer of the entry: `n` elements of `type`, 16-byte
  /// aligned (ldmatrix rows).
  struct SharedBuffer {
    int64_t n;
    Type type;
  };
  /// A gpu.func with the backward's operands and the given workgroup
  /// buffers; sets the entry values and binds the gradient buffer. The
  /// buffers are the function's workgroup attributions (static shared
  /// memory), or with `dynamic` views into its dynamic shared memory, one
  /// after the other at 16-byte aligned offsets (dynamicSharedBytes says
  /// how much that is); `shared_` holds them in either case.
  gpu::GPUFuncOp createEntry(gpu::GPUModuleOp module, StringRef name,
                             ArrayRef<SharedBuffer> shared, Entry &e, Extra &x,
                             bool dynamic = false);
  SmallVector<Value> shared_;
  /// The block's work item: launch's first item + blockIdx.x.
  Value blockItem(const Extra &x);
  Value offset4(ArrayRef<Value> s, Value i0, Value i1, Value i2) {
    return add(add(mul(i0, s[0]), mul(i1, s[1])), mul(i2, s[2]));
  }
  /// Row (b, h, i)'s delta = rowsum(dO * O) - dLSE, from global memory;
  /// `onGrad(d, dO[d])` sees each element of dO as f32 when given.
  Value rowDelta(const Entry &e, const Extra &x, Value b, Value h, Value i,
                 function_ref<void(Value, Value)> onGrad = nullptr);
  /// Where delta of row (b, h, i) lives between the two kernels.
  Value deltaAt(const Entry &e, Value b, Value h, Value i) {
    return add(mul(add(mul(b, e.Hq), h), e.Lq), i);
  }

  /// A `_bwd_kv` item: (b, KV head, KV tile) and the tile's keys.
  struct KeyTile {
    Value b, kvh, kt, kvLen, kv0, cols;
    Value kvpos0; // the position of the sequence's first key (0 without
                  // key offsets)
  };
  KeyTile decodeKeyTile(Value item);
  /// The forward's item (b, h, qt) with one head per item and no split
  /// (the launcher's ip), h one of the key tile's KV head's query heads;
  /// with `first` (such an item: the block's first) headTileItem, which
  /// takes the sequence's values from it.
  Item queryItem(const Entry &e, const KeyTile &k, Value h, Value qt,
                 const Item *first = nullptr) {
    return first ? headTileItem(e, *first, h, qt)
                 : itemAt(e, k.b, h, qt, cIdx(0), k.kvh);
  }
  /// The mask's (b, h)-only values for query head h (as i32: hI32).
  IRMapping maskInvariants(const KeyTile &k, Value hI32);
  /// `body(j, t, acc)` over the visited tiles t (index j) of [lo, hi) in order,
  /// carrying `init`; returns the last values. `tileOf(j, cls)` is tile j
  /// (index), classified unless its class `cls` (i8) is given. With a
  /// data-dependent mask the warp's search (WarpTileSearch.h, `lane32`
  /// the lane's index) finds each next visited tile 32 classes at a time;
  /// otherwise tiles are classified one by one (closed-form classes are
  /// arithmetic). Every thread of the block reaches it alike. A visited
  /// tile's `tileOf` is the last one called before its `body`, in the
  /// block `body` is built in, so what it builds dominates the body.
  /// The first visited tile of [from, hi32) (i32) and its class (i8):
  /// (hi32, ...) where none. Tile by tile for a closed-form mask; for a
  /// data-dependent one, tile `from` alone (one class load) and past an
  /// empty one the warp's search.
  std::pair<Value, Value>
  visitedFrom(Value from, Value hi32, Value lane32,
              function_ref<Tile(Value j, Value cls)> tileOf);
  SmallVector<Value> forVisitedTiles(
      Value lo, Value hi, ValueRange init, Value lane32,
      function_ref<Tile(Value j, Value cls)> tileOf,
      function_ref<SmallVector<Value>(Value j, const Tile &, ValueRange)> body);
  /// forVisitedTiles with the tiles' copies a tile ahead, in a ring of two
  /// stages: `prefetch(j, t, stage)` issues tile j's cp.async copies into
  /// `stage` (i32, 0 or 1); `body(j, t, stage, acc)` runs once tile j's
  /// copies landed and a barrier published them, and must end with a
  /// barrier (the next tile's prefetch refills the stage it read). Each
  /// iteration finds the next visited tile, issues its copies, then waits
  /// for its own (cp.async.wait_group 1): the copies of tile j + 1 overlap
  /// tile j's products. The same tileOf contract.
  SmallVector<Value> forVisitedTilesStaged(
      Value lo, Value hi, ValueRange init, Value lane32,
      function_ref<Tile(Value j, Value cls)> tileOf,
      function_ref<void(Value j, const Tile &, Value stage)> prefetch,
      function_ref<SmallVector<Value>(Value j, const Tile &, Value stage,
                                      ValueRange)>
          body);
  /// Zero dK and dV rows of key `c` of the tile (c < the tile's width) when
  /// it is past the sequence's length but within the K/V capacity.
  void zeroKeyPastLength(const KeyTile &k, const Extra &x, Value c);
};

} // namespace attnc::codegen

#endif
