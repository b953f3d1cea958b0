//===- KernelABI.h - The contract between kernels and the runtime -*- C++ -*-===//
//
// A CPU kernel is `void kernel(void **args)` (MLIR's packed calling
// convention) over these operands, each a 1-D memref (5 descriptor words:
// allocated, aligned, offset, size, stride):
//
//   q, k, v, o : element type of the kernel (f32 | f16 | bf16)
//   lse        : f32           (size 0 when not requested)
//   ip         : i64 parameters, laid out as below
//   fp         : f32 parameters: [0] = scale, [1 + i] = f32 scalar param i
//   blockmask  : i8 tile classes for data-dependent masks (size 0 if none)
//   captures   : one memref per tensor parameter, in declaration order
//   itemBegin, itemEnd : i64, work items
//                        (((b * Hq/P + hi) * numQTiles + qt) * S + s)
//
// With P = ip[kPackHeads] query heads per item (P = 1, or the GQA group G
// for small Lq), the rows of an item's Q tiles run over the P heads of
// group hi: flat row p in [0, P*Lq) is query p % Lq of head hi*P + p / Lq,
// so K and V are read once for the whole group.
//
// Split-KV (S = ip[kNumSplits] > 1): item split s visits only the KV tiles
// [s * T, (s + 1) * T) with T = ip[kSplitTiles], and writes its normalized
// partial output and LSE through kOStride/kLseStride into the runtime's
// partial buffers, laid out [S][B][Hq][Lq][Dv] and [S][B][Hq][Lq] (so split
// s is batch index s * B + b there); a split with no visited key writes 0
// and LSE -inf. The merge entry (`<kernel>_merge`: opart, lsepart, o, lse,
// ip, then the first row) combines the S partials of each row
// (b * Hq + h) * Lq + i by their LSEs into O and LSE through kOutStride,
// kOutLseStride and kOutHasLse. With S = 1 nothing is partial.
//
// The CPU backward entries (`<kernel>_bwd_kv`, `<kernel>_bwd_q`,
// compiler/lib/Codegen/CpuBackwardKernel.cpp) take the forward's operands
// with dO in o's place and the forward's LSE in lse's (ip built with one
// head per item and no split), then f32 delta [B][Hq][Lq], dq, dk, dv
// (contiguous [B][H][L][D]) and the thread's gradient buffer: every float
// parameter's gradient, dense over its shape (a scalar: one element),
// concatenated in declaration order (rt::zeroParamGradients' sizes); ip
// has the BackwardSlot slots below, of which the CPU reads
// kBwdTilesPerItem and kBwdFuseQuery.
//
// The GPU backward entries (GpuBackwardKernel.cpp; gpu.funcs, one block per
// item, the forward's first-item operand last) take the forward's operands
// (dO in o's place, LSE in lse's), then fwdO (the forward's O, kernel
// dtype), dLse (f32, size 0 if none), delta (f32 [B][Hq][Lq], written by
// `_bwd_q` and read by `_bwd_kv`, so launched in that order), dq, dk, dv
// (kernel dtype, any strides) and the gradient buffer (f32, as above,
// shared by every block: atomic adds). Their strides follow the forward's
// ip at Layout::pageBase(B) (the backward takes no pages): BackwardSlot.
//
// The sm_90a wgmma forward (WgmmaForm.cpp) takes three more parameters
// after its first item: K's and V's tensor maps (CUtensorMap, 128 bytes by
// value, `.param .align 64`) and an i64, 1 when the maps are usable for the
// call (else the kernel copies K and V itself). Each map views its tensor
// as [P / 64][rows][64] (P its sequence stride, kKStride + 2 or kVStride +
// 2: rows of P elements, cut in 64-element chunks) in boxes of D / 64
// chunks x blockN rows x 64 with the 128-byte swizzle; the rows of (b, kv
// head) start at row kBase / P, chunk (kBase % P) / 64 (kBase = b s0 + h
// s1). runtime/src/cuda/KvTensorMaps.cpp makes them and says when they are
// usable.
//
// Integer parameter layout (ip):
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_RUNTIME_KERNELABI_H
#define ATTNC_RUNTIME_KERNELABI_H

#include "attnc/runtime/Variant.h"

#include <cstdint>
#include <vector>

namespace attnc::rt::abi {

enum : int64_t {
  kB = 0,
  kHq,
  kHkv,
  kLq,
  kLkv,        // capacity of the KV sequence axis
  kNumQTiles,
  kNumKTiles,  // ceil(Lkv / blockN): the block mask's last dimension
  kQStride,    // 4 strides each, in elements, logical [B, H, S, D]
  kKStride = kQStride + 4,
  kVStride = kKStride + 4,
  kOStride = kVStride + 4,
  kLseStride = kOStride + 4, // 3: [B, H, S]
  kHasLse = kLseStride + 3,
  kHasBlockMask,
  kBMStrideB,  // block mask [B|1][H|1][numQTiles][numKTiles], in elements
  kBMStrideH,
  kPackHeads,  // query heads per work item: 1, or the GQA group size G
  kPageSize,   // 0: K/V contiguous; else rows per page (K/V are page pools)
  kNumSplits,  // S >= 1, KV splits per (b, head, Q tile)
  kSplitTiles, // KV tiles per split (>= ceil(Lkv / blockN) when S = 1)
  kOutStride,  // 4: with S > 1, where the merge writes O (else unused)
  kOutLseStride = kOutStride + 4, // 3
  kOutHasLse = kOutLseStride + 3,
  kDropThreshold, // dropout (Dropout.h): a word below it drops the pair
  kDropScaleBits, // a kept pair's factor, f32 bits
  kDropKey0,      // Philox key words
  kDropKey1,
  kKvSize,     // KV as the modifiers read it (`size KV`): Lkv, or with key
               // offsets the extent of the key positions (Attention.h)
  kHeadPos0,   // the index the modifiers see for query head 0 (head offset)
  kHSize,      // H and HKV as the modifiers read them: Hq and Hkv, or with
  kHkvSize,    // a head offset the whole model's head counts
  kFixedEnd,   // then: params, capture shapes, per-sequence lengths, pages
};

/// The GPU backward's ip slots, from Layout::pageBase(B).
enum BackwardSlot : int64_t {
  kBwdOStride = 0,    // 4: the forward's O
  kBwdDLseStride = 4, // 3
  kBwdHasDLse = 7,
  kBwdDqStride = 8,   // 4 each
  kBwdDkStride = 12,
  kBwdDvStride = 16,
  kBwdTilesPerItem = 20, // the CPU _bwd_kv: KV tiles per work item
  kBwdFuseQuery = 21,    // the CPU _bwd_kv: 1 if it also forms dQ
  kBwdSlots = 22,
};

/// Words per sequence in ip's sequence part: kv length, first query's
/// position, first key's position.
inline constexpr int64_t kSeqWords = 3;

/// Threads per block of the GPU merge entry (one block per row).
inline constexpr int64_t kMergeThreads = 64;
/// The most KV splits a launch may have.
inline constexpr int64_t kMaxSplits = 256;

/// Tile classes, as stored in a block mask.
enum TileClass : int8_t { kEmpty = 0, kPartial = 1, kFull = 2 };

/// Where each variable-size part of `ip` starts, for one variant.
struct Layout {
  int64_t paramBase = kFixedEnd; // ip[paramBase + i] = i32 or bool (0/1) scalar param i
  /// ip[captureBase[i] + d] = size of dim d; + rank + d = stride of dim d.
  std::vector<int64_t> captureBase; // per param (-1 for scalars)
  /// ip[seqBase + b] = kv length, [seqBase + B + b] = the position of the
  /// first query, [seqBase + 2B + b] = the position of the first key (key
  /// row r of sequence b is at position kvPos0 + r, as the modifiers see it).
  int64_t seqBase = 0;
  /// With pages (ip[kPageSize] > 0): ip[pageBase(B) + b] = sequence b's
  /// first entry in the page list, which starts at ip[pageBase(B) + B]: key
  /// row r of sequence b is row r % pageSize of pool page
  /// ip[pageBase(B) + B + ip[pageBase(B) + b] + r / pageSize], and K/V's
  /// stride 0 steps pages instead of sequences.
  int64_t pageBase(int64_t batch) const { return seqBase + kSeqWords * batch; }
  int64_t size(int64_t batch, int64_t pageEntries = 0) const {
    return pageBase(batch) + (pageEntries ? batch + pageEntries : 0);
  }
};

inline Layout computeLayout(const VariantInfo &v) {
  Layout l;
  int64_t next = l.paramBase + static_cast<int64_t>(v.params.size());
  for (const ParamSpec &p : v.params) {
    if (!p.isTensor) {
      l.captureBase.push_back(-1);
      continue;
    }
    l.captureBase.push_back(next);
    next += 2 * static_cast<int64_t>(p.dims.size());
  }
  l.seqBase = next;
  return l;
}

} // namespace attnc::rt::abi

#endif
