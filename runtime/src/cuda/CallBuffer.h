//===- CallBuffer.h - The layout of a call's device buffer -----*- C++ -*-===//
//
// Internal to the CUDA launcher: one device buffer per call (a slot of
// GpuKernel's ring, or a GpuPlan's) holds ip, fp, the block mask and, for
// a split launch, the partial rows and LSEs the merge reads.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_RUNTIME_SRC_CUDA_CALLBUFFER_H
#define ATTNC_RUNTIME_SRC_CUDA_CALLBUFFER_H

#include "../KernelOperands.h"
#include "attnc/runtime/cuda/GpuKernel.h"

#include <cstddef>

namespace attnc::rt::cuda {

inline size_t align8(size_t n) { return (n + 7) & ~size_t(7); }
inline size_t align16(size_t n) { return (n + 15) & ~size_t(15); }

/// Where each part of a call's buffer starts: ip at 0, fp, the block mask,
/// then a split launch's partial rows and LSEs; and its size.
struct SlotLayout {
  size_t fp = 0, bm = 0, partials = 0, lse = 0, total = 0;
};

inline SlotLayout slotLayout(const detail::Operands &ops, const BlockMask *bm,
                             const Problem &p, const KernelSpec &spec,
                             const SplitPlan &plan) {
  SlotLayout l;
  l.fp = ops.ip.size() * 8;
  l.bm = l.fp + align8(ops.fp.size() * 4);
  l.partials = l.bm + (bm ? bm->classes.size() : 0);
  l.total = l.partials;
  if (plan.splits > 1) {
    size_t rows = static_cast<size_t>(detail::partialRows(p, plan.splits));
    l.partials = align16(l.partials);
    l.lse = align16(l.partials + rows * p.Dv * dtypeSize(spec.dtype));
    l.total = l.lse + rows * 4;
  }
  return l;
}

/// A validated call: what GpuKernel::prepare makes for run(), plan() and
/// buildBlockMask(). `bm` points to the caller's block mask or to `built`
/// (a mask the device builder will fill), so a Call stays where it is made.
struct GpuKernel::Call {
  Call() = default;
  Call(const Call &) = delete;
  Call &operator=(const Call &) = delete;
  Problem p;
  BlockMask built;
  const BlockMask *bm = nullptr;
  detail::Operands ops; // split applied
  SplitPlan split;
  bool buildsMask() const { return bm == &built; }
  SlotLayout layout(const KernelSpec &spec) const {
    return slotLayout(ops, bm, p, spec, split);
  }
};

} // namespace attnc::rt::cuda

#endif
