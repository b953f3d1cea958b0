//===- TensorCoreLayout.cpp - The tensor-core forward's threads and memory -===//
#include "TensorCoreLayout.h"
#include "TensorCoreForward.h"
#include "attnc/Codegen/TileConfigTable.h"

#include <algorithm>

namespace attnc {

TensorCoreLayout tensorCoreLayout(const rt::KernelSpec &s, bool wgmma) {
  TensorCoreLayout L;
  L.sumsInAccumulator = !s.dropout;
  if (wgmma) {
    L.wgmma = true;
    L.warps = s.blockM / 16;
    L.producerWarps = 4;
    L.mTiles = 1;
    L.qInRegisters = false;
    L.ldQ = L.ldK = L.ldV = 64;
    L.swizzleQ = L.swizzleK = L.swizzleV = true;
    L.atomQ = s.blockM * 64;
    L.atomK = L.atomV = s.blockN * 64;
    L.vOffset = s.blockN * s.headDim;
    L.stageElems = s.blockN * (s.headDim + s.vHeadDim);
    // Three stages where sm_90a's shared memory holds them: a stage is
    // released only once the next tile's products are issued (the
    // overlap), so the producer needs a third to run a tile ahead. Stages
    // asked for are taken as they are (the form refuses what does not fit).
    auto place = [&](int64_t stages) {
      L.stages = stages;
      L.qOffset = L.stages * L.stageElems;
      L.totalElems = L.qOffset + s.blockM * s.headDim;
    };
    place(s.stages ? s.stages : 3);
    if (!s.stages && L.sharedBytes() > gpuSharedOptIn("sm_90a"))
      place(2);
    L.overlap = L.stages >= 3;
    return L;
  }
  L.warps = s.warps > 0 ? s.warps : std::clamp<int64_t>(s.blockM / 16, 1, 8);
  L.mTiles = s.blockM / (16 * L.warps);
  // Q in registers costs 2 x D / 16 x 4 x m-tiles of them per thread.
  L.qInRegisters = L.mTiles == 1 && s.headDim <= 128;
  auto pitch = [](int64_t d, bool &swizzle) {
    int64_t chunks = d / 8;
    swizzle = chunks == 2 || chunks == 4 || chunks % 8 == 0;
    return swizzle ? d : d + 8;
  };
  L.ldQ = pitch(s.headDim, L.swizzleQ);
  L.ldK = pitch(s.headDim, L.swizzleK);
  L.ldV = pitch(s.vHeadDim, L.swizzleV);
  L.stageElems = s.blockN * (L.ldK + L.ldV);
  L.vOffset = s.blockN * L.ldK;
  int64_t kv = L.stages * L.stageElems, q = s.blockM * L.ldQ;
  // Q held in registers is dead in shared memory once loaded: it borrows
  // stage 1, which the first prefetch fills only after every warp has
  // read its Q fragments (the loop's first barrier).
  if (L.qInRegisters && L.stages >= 2 && q <= L.stageElems) {
    L.qOffset = L.stageElems;
    L.totalElems = kv;
  } else {
    L.qOffset = kv;
    L.totalElems = kv + q;
  }
  return L;
}

rt::TileWork tensorCoreTileWork(const rt::KernelSpec &s, bool wgmma) {
  TensorCoreLayout L = tensorCoreLayout(s, wgmma);
  const int64_t threads = L.warps * 32;
  auto perThread = [&](int64_t chunks) { return (chunks + threads - 1) / threads; };
  rt::TileWork w;
  // QK^T: (block_n / 8) n-tiles x (D / 16) k-steps; PV: (block_n / 16)
  // k-steps x (Dv / 8) n-tiles; each for every m-tile of the warp.
  // wgmma: one HGMMA per 16 of Dqk (S) and per 16 keys (PV), issued by
  // every warp of the warpgroup.
  w.mma = L.wgmma ? s.headDim / 16 + s.blockN / 16
                  : L.mTiles * (s.blockN / 8 * (s.headDim / 16) +
                                s.blockN / 16 * (s.vHeadDim / 8));
  // The sums' MMAs (P [V | 1]): one per 16 keys (and m-tile), N = 8.
  if (L.sumsInAccumulator) {
    w.sumMma = L.wgmma ? s.blockN / 16 : L.mTiles * (s.blockN / 16);
    w.mma += w.sumMma;
  }
  w.asyncCopies = perThread(s.blockN * s.headDim / 8) +
                  perThread(s.blockN * s.vHeadDim / 8);
  if (L.wgmma) {
    // A full tile's copies are the producer warpgroup's (two TMA loads,
    // outside the consumers' loop): a consumer warp waits for the stage
    // once per tile.
    w.asyncCopies = 0;
    w.mbarrierWaits = 1;
  }
  return w;
}

int64_t tensorCoreSharedBytes(const rt::KernelSpec &s, bool wgmma) {
  return tensorCoreLayout(s, wgmma).sharedBytes();
}

int64_t tensorCoreWarps(const rt::KernelSpec &s, bool wgmma) {
  return tensorCoreLayout(s, wgmma).launchWarps();
}

rt::TileWork tensorCoreWork(const rt::KernelSpec &s, bool wgmma) {
  return tensorCoreTileWork(s, wgmma);
}

} // namespace attnc
