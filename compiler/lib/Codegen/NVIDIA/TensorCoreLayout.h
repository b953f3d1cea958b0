//===- TensorCoreLayout.h - Tensor-core forward: threads, memory -*- C++ -*-===//
//
// What the tensor-core forward's builder (MmaSyncKernel.cpp) and its forms
// (MmaSyncForm.cpp, WgmmaForm.cpp) agree on for a spec: warps and m-tiles,
// where Q, K and V live in dynamic shared memory (pitches, swizzle, the
// wgmma form's atoms, stages, its mbarriers), and the work of one full
// tile as the static SASS model checks it.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_CODEGEN_NVIDIA_TENSORCORELAYOUT_H
#define ATTNC_CODEGEN_NVIDIA_TENSORCORELAYOUT_H

#include "attnc/runtime/Attention.h"

#include <algorithm>
#include <cstdint>

namespace attnc {

/// The form's threads and shared-memory layout for a spec. Offsets and
/// pitches are in elements of the input dtype (2 bytes). Stage s holds K
/// rows at s * stageElems and V rows after them; shared rows are
/// XOR-swizzled by 16-byte chunk (conflict-free ldmatrix and cp.async)
/// where the row has 2, 4 or a multiple of 8 chunks, else padded by one
/// chunk.
struct TensorCoreLayout {
  int64_t warps = 0, mTiles = 0, stages = 2;
  /// The sm_90a form is warp-specialized: after the `warps` consumer warps
  /// (two warpgroups computing), a producer warpgroup that fills the
  /// stages (TMA, or cp.async where the maps cannot serve) and lowers its
  /// register budget so the consumers can raise theirs (setmaxnreg).
  int64_t producerWarps = 0;
  static constexpr int64_t kProducerRegisters = 40;
  int64_t launchWarps() const { return warps + producerWarps; }
  /// Registers per thread at launch (.maxnreg): the whole register file
  /// (one CTA per SM by design) up to ptxas's 255; for the warp-specialized
  /// form an even share of it, a multiple of 8 (setmaxnreg's unit).
  int64_t launchRegisters() const {
    return producerWarps ? std::min<int64_t>(248, 65536 / (launchWarps() * 32) / 8 * 8)
                         : 255;
  }
  /// What the consumers raise theirs to: setmaxnreg.inc draws from the
  /// CTA's pool, the launch's count for each of its threads, not from the
  /// SM's 64K file (PTX ISA), so the consumers get what the producer gives
  /// back, in multiples of 8: (168 x 12 - 40 x 4) / 8 = 232 at 12 warps.
  /// Asking for more parks them in setmaxnreg.inc for good (an H200 hung
  /// on 48 + 2 x 232 > 3 x 168, 2026-11-27).
  int64_t consumerRegisters() const {
    return std::min<int64_t>(
        248, (launchRegisters() * launchWarps() - kProducerRegisters * producerWarps) /
                 warps / 8 * 8);
  }
  /// The sm_90a form: Q, K and V in 128-byte swizzled atoms of 8 rows x 64
  /// elements (Wgmma.h), an atom's elements per region (rows x 64), Q kept
  /// in shared memory (wgmma reads it there), 1 KB to align the base.
  bool wgmma = false;
  /// The sm_90a form with three stages: a warpgroup issues tile j's S =
  /// Q K^T and tile j-1's O += P V together and computes j's softmax while
  /// the latter runs (wgmma.wait_group 1; FlashAttention-3's intra-
  /// warpgroup overlap). With two stages (Dqk + Dv > 256: what fits) the
  /// products of a tile are waited for one after the other.
  bool overlap = false;
  int64_t atomQ = 0, atomK = 0, atomV = 0;
  int64_t vOffset = 0; // V's rows after K's, within a stage (elements)
  /// Q fragments loaded once per work item and held in registers; else
  /// re-read from shared memory for every KV tile (fewer registers).
  bool qInRegisters = true;
  int64_t ldQ = 0, ldK = 0, ldV = 0;
  bool swizzleQ = false, swizzleK = false, swizzleV = false;
  int64_t stageElems = 0, qOffset = 0, totalElems = 0;
  /// wgmma, after Q (from the aligned base): per stage two mbarriers (8
  /// bytes each): `full` (the producer's loads landed) and `empty` (every
  /// consumer warp is done reading the stage).
  int64_t tmaBytes() const { return wgmma ? stages * 16 : 0; }
  /// The forward keeps the softmax's sums in O's accumulator (every
  /// kernel without dropout): P [V | 1], one MMA per 16 keys and m-tile
  /// adding a row's probabilities where the adds were one per score.
  bool sumsInAccumulator = false;
  /// wgmma, after the mbarriers: the ones column's B operand, 16 keys x 8
  /// columns of 1.0 without swizzle (256 bytes, K-major core matrices
  /// 128 bytes apart), written by the consumers at their start.
  int64_t onesBytes() const { return wgmma && sumsInAccumulator ? 256 : 0; }
  int64_t onesOffset() const { return totalElems * 2 + tmaBytes(); } // bytes
  int64_t sharedBytes() const {
    return totalElems * 2 + (wgmma ? 1024 + tmaBytes() + onesBytes() : 0);
  }
};

/// The layout of `s` (wgmma: the sm_90a form's).
TensorCoreLayout tensorCoreLayout(const rt::KernelSpec &s, bool wgmma = false);
/// One full tile's work in the tile loop: MMAs per warp, 16-byte cp.async
/// per thread (the wgmma form's consumers: none, one mbarrier wait).
rt::TileWork tensorCoreTileWork(const rt::KernelSpec &s, bool wgmma = false);

} // namespace attnc

#endif
